"""Makes Hugging Face accelerate place work on ``tpu`` (what ``Trainer`` and ``Accelerator`` use).

accelerate 1.x picks its device from a fixed list of backends it knows by name (mps, mlu, sdaa, musa, npu,
hpu, cuda, xpu, neuron) and otherwise the CPU; it does not ask ``torch.accelerator``, and offers no
registration hook for a PrivateUse1 device. transformers does ask ``torch.accelerator``, so without this
``Trainer`` puts the model on ``tpu:0`` while accelerate leaves every batch on the CPU.

The one change: ``PartialState.default_device`` (a property) answers the current ``tpu`` device where
accelerate's own answer is the CPU and ``torch.accelerator`` says the accelerator is ``tpu``. Everything
explicit still wins: ``cpu=True`` / ``use_cpu`` and ``ACCELERATE_TORCH_DEVICE`` never reach that property.
It applies to accelerate 1.x only (checked on import); a release that learns ``torch.accelerator`` already
returns ``tpu`` and the wrapper then changes nothing.

accelerate is not imported by ``import torchtpu``: the change applies right after ``accelerate.state`` first
runs, or at once when it already has (``_import_hooks.after_import``).
"""
from __future__ import annotations

import torch

from torchtpu._import_hooks import after_import

_MODULE = "accelerate.state"
_SUPPORTED_MAJOR = 1  # accelerate 1.x: no torch.accelerator support, PartialState.default_device is a property


def _accelerate_version() -> tuple[int, ...]:
    from importlib.metadata import version

    parts = []
    for piece in version("accelerate").split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _patch(state_module) -> None:
    cls = state_module.PartialState
    original = cls.__dict__.get("default_device")
    if not isinstance(original, property) or getattr(original.fget, "_torchtpu", False):
        return
    if _accelerate_version()[0] != _SUPPORTED_MAJOR:
        return

    def default_device(self) -> torch.device:
        device = original.fget(self)
        accelerator = torch.accelerator.current_accelerator()
        if device.type == "cpu" and accelerator is not None and accelerator.type == "tpu":
            return torch.device("tpu", torch.accelerator.current_device_index())
        return device

    default_device._torchtpu = True
    cls.default_device = property(default_device, doc=original.__doc__)


def install() -> None:
    """Patches accelerate now if it is loaded, otherwise when it is first imported."""
    after_import(_MODULE, _patch)
