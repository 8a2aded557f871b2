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

accelerate is not imported by ``import torchtpu``: a finder on ``sys.meta_path`` applies the change right
after ``accelerate.state`` is first executed, or at once when it already was.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch

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


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds ``accelerate.state`` through the other finders and patches it once its module has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_patch(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_then_patch
        return spec


def install() -> None:
    """Patches accelerate now if it is loaded, otherwise when it is first imported."""
    if _MODULE in sys.modules:
        _patch(sys.modules[_MODULE])
    elif importlib.util.find_spec("accelerate") is not None:
        sys.meta_path.insert(0, _AfterImport())
