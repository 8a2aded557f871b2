"""Device-side value checks (docs/value_checks.md).

Ops that CPU checks by value (index bounds, loss targets, probabilities, ...) check on the device and
report at the next sync point (``.item()``, ``.cpu()``, printing, ``torch.tpu.synchronize()``) with CPU's
message, as CUDA reports device-side asserts. ``TORCHTPU_VALUE_CHECKS=0`` turns them off at start.
"""
from __future__ import annotations

from torchtpu import _C
from torchtpu._setting import ProcessSetting


class value_checks(ProcessSetting):
    """Turns value checks on or off: ``torchtpu.value_checks(False)`` for the rest of the process, or
    ``with torchtpu.value_checks(False):`` for a block (the previous setting returns on exit). Programs are
    kept per setting, so switching back and forth compiles each op once per setting."""

    def __init__(self, enabled: bool) -> None:
        super().__init__(bool(enabled), _C._value_checks, _C._set_value_checks)


def value_checks_enabled() -> bool:
    return _C._value_checks()
