"""Eager execution modes (docs/modes.md).

- ``"debug"``: each op runs and waits, so an error surfaces at the Python line that caused it.
- ``"strict"`` (default): each op's program is enqueued at once and runs asynchronously.
- ``"fused"``: ops are recorded and run as one program when a value is needed (``.item()``, ``.cpu()``,
  printing, a fallback op, ``torch.tpu.synchronize()``), after every optimizer step, or when the recorded
  graph reaches its size limit. ``torchtpu.metrics()["fused"]`` counts the flushes by reason.

``TORCHTPU_EAGER_MODE=debug|strict|fused`` picks the mode at start.
"""
from __future__ import annotations

import contextlib

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from torchtpu import _C
from torchtpu._setting import ProcessSetting

MODES = ("debug", "strict", "fused")


class eager_mode(ProcessSetting):
    """Switches the eager mode: ``torchtpu.eager_mode("fused")`` for the rest of the process, or
    ``with torchtpu.eager_mode("fused"):`` for a block (the previous mode returns on exit). Switching
    runs whatever fused mode has recorded so far."""

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown eager mode {mode!r}: expected one of {', '.join(MODES)}")
        super().__init__(mode, _C._eager_mode, _C._set_eager_mode)


def current_eager_mode() -> str:
    return _C._eager_mode()


@contextlib.contextmanager
def fused_in_this_thread():
    """Fused recording for a block of the calling thread's work alone; leaving it runs what the block recorded.
    Compiled graphs record this way: `eager_mode` switches the process's mode, which other threads running
    compiled graphs at the same time would switch under each other."""
    previous = _C._thread_eager_mode()
    _C._set_thread_eager_mode("fused")
    try:
        yield
    finally:
        _C._set_thread_eager_mode(previous)


def flush() -> None:
    """Runs what fused mode has recorded (a no-op in the other modes)."""
    _C._flush("explicit")


def _after_optimizer_step(optimizer, args, kwargs) -> None:
    # A training step ends here: one fused program per step, the same one every step. Inside
    # torch.compile the compiled step is one program already.
    if not torch.compiler.is_compiling() and _C._eager_mode() == "fused":
        _C._flush("optimizer step")


register_optimizer_step_post_hook(_after_optimizer_step)
