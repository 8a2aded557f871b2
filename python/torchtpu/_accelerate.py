"""Makes Hugging Face accelerate place work on ``tpu`` (what ``Trainer`` and ``Accelerator`` use).

accelerate 1.x picks its device from a fixed list of backends it knows by name (mps, mlu, sdaa, musa, npu,
hpu, cuda, xpu, neuron) and otherwise the CPU; it does not ask ``torch.accelerator``, and offers no
registration hook for a PrivateUse1 device. transformers does ask ``torch.accelerator``, so without this
``Trainer`` puts the model on ``tpu:0`` while accelerate leaves every batch on the CPU.

The changes: ``PartialState.default_device`` (a property) answers the current ``tpu`` device where
accelerate's own answer is the CPU and ``torch.accelerator`` says the accelerator is ``tpu``. Everything
explicit still wins: ``cpu=True`` / ``use_cpu`` and ``ACCELERATE_TORCH_DEVICE`` never reach that property.
And under a launcher (``torchrun``: ``LOCAL_RANK`` set) on ``tpu``, where accelerate finds no backend for a
device it does not know and would run the process alone, it takes the backend ``"tpu_dist"`` and runs as it
does for CPU processes (its ``MULTI_CPU`` path: the process group from the launcher's environment, DDP
without device ids), with the process's ``tpu`` device as its device.
It applies to accelerate 1.x only (checked on import); a release that learns ``torch.accelerator`` already
returns ``tpu`` and the wrapper then changes nothing.

``device_map="auto"`` (and ``"balanced"``, ``"sequential"``): accelerate's ``get_max_memory`` sizes only the
devices it knows by name, so every layer went to the CPU. On ``tpu`` it now lists each chip by index, as it
lists CUDA devices (``torch.device(i)`` is ``tpu:i`` when ``tpu`` is the accelerator), with the free memory
``torch.tpu.mem_get_info`` reports; a user's ``max_memory`` may name chips as ``i``, ``"tpu:i"`` or
``torch.device("tpu", i)``. transformers holds its own reference to the function, so that one is replaced too.

accelerate is not imported by ``import torchtpu``: the changes apply right after ``accelerate.state`` and
``accelerate.utils.modeling`` first run, or at once when they already have (``_import_hooks.after_import``).
"""
from __future__ import annotations

import sys

import torch

from torchtpu._import_hooks import after_import

_MODULE = "accelerate.state"
_MEMORY_MODULE = "accelerate.utils.modeling"
_TRANSFORMERS_MODULE = "transformers.integrations.accelerate"
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

    prepare_backend = cls._prepare_backend
    set_device = cls.set_device

    def _prepare_backend(self, cpu: bool = False, sagemaker_dp=False, backend: str | None = None):
        found, distributed_type = prepare_backend(self, cpu, sagemaker_dp, backend)
        if distributed_type == state_module.DistributedType.NO and _launched_on_tpu(cpu):
            from torchtpu.distributed import BACKEND_NAME

            return BACKEND_NAME, state_module.DistributedType.MULTI_CPU
        return found, distributed_type

    def _set_device(self) -> None:
        from torchtpu.distributed import BACKEND_NAME

        if self.device is None and self.backend == BACKEND_NAME:
            self.device = torch.device("tpu", torch.accelerator.current_device_index())
        set_device(self)

    cls._prepare_backend = _prepare_backend
    cls.set_device = _set_device


def _launched_on_tpu(cpu: bool) -> bool:
    import os

    accelerator = torch.accelerator.current_accelerator()
    return (not cpu and int(os.environ.get("LOCAL_RANK", -1)) != -1 and accelerator is not None
            and accelerator.type == "tpu")


def _on_tpu() -> bool:
    accelerator = torch.accelerator.current_accelerator()
    return accelerator is not None and accelerator.type == "tpu"


def _chip_index(key):
    """``"tpu:1"`` and ``torch.device("tpu", 1)`` as accelerate's integer key; other keys unchanged."""
    if isinstance(key, (str, torch.device)) and str(key).startswith("tpu"):
        return torch.device(key).index or 0
    return key


def _patch_memory(modeling) -> None:
    original = modeling.get_max_memory
    if getattr(original, "_torchtpu", False) or _accelerate_version()[0] != _SUPPORTED_MAJOR:
        return

    def get_max_memory(max_memory=None):
        if not _on_tpu():
            return original(max_memory)
        if max_memory is None:
            found = original(None)
            if any(isinstance(k, int) for k in found):  # accelerate found a device of its own
                return found
            chips = {i: torch.tpu.mem_get_info(i)[0] for i in range(torch.tpu.device_count())}
            return {**chips, **found}
        chips, others = {}, {}
        for key in max_memory:
            if isinstance(max_memory[key], str):  # in place, as accelerate does: transformers reads them back
                max_memory[key] = modeling.convert_file_size_to_int(max_memory[key])
            index = _chip_index(key)
            if not isinstance(index, int):
                others[key] = max_memory[key]
            elif 0 <= index < torch.tpu.device_count():
                chips[index] = max_memory[key]
            else:
                raise ValueError(f"max_memory names tpu:{index}, but there are {torch.tpu.device_count()} tpu devices")
        return {**dict(sorted(chips.items())), **original(others)}

    get_max_memory._torchtpu = True
    modeling.get_max_memory = get_max_memory
    utils = sys.modules.get("accelerate.utils")
    if utils is not None and getattr(utils, "get_max_memory", None) is original:
        utils.get_max_memory = get_max_memory
    transformers_side = sys.modules.get(_TRANSFORMERS_MODULE)
    if transformers_side is not None:
        _patch_transformers(transformers_side)


def _patch_transformers(integration) -> None:
    modeling = sys.modules.get(_MEMORY_MODULE)
    patched = getattr(modeling, "get_max_memory", None)
    if getattr(patched, "_torchtpu", False) and hasattr(integration, "accelerate_max_memory"):
        integration.accelerate_max_memory = patched


def install() -> None:
    """Patches accelerate now if it is loaded, otherwise when it is first imported."""
    after_import(_MODULE, _patch)
    after_import(_MEMORY_MODULE, _patch_memory)
    after_import(_TRANSFORMERS_MODULE, _patch_transformers)
