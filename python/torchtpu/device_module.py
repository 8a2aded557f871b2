"""``torch.tpu``: the device module, shaped like ``torch.cuda``.

Memory numbers are real: bytes held by live PJRT buffers on the device.
"""
from __future__ import annotations

from typing import Any

import torch

from torchtpu import _C

_DeviceLike = Any  # int, str, torch.device or None


def _index(device: _DeviceLike = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"Expected a tpu device, got {device}")
    return current_device() if device.index is None else device.index


def is_available() -> bool:
    try:
        return _C._device_count() > 0
    except RuntimeError:
        return False


def is_initialized() -> bool:
    return _C._plugin_loaded()


def _is_in_bad_fork() -> bool:
    return False


def init() -> None:
    _C._device_count()


def device_count() -> int:
    try:
        return _C._device_count()
    except RuntimeError:
        return 0


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))


class device:
    """Context manager that makes ``device`` the current tpu device."""

    def __init__(self, device: _DeviceLike):
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)

    def __exit__(self, *exc: object) -> bool:
        if self.index >= 0:
            set_device(self.previous)
        return False


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for all work queued on the device; raises the first error of that work."""
    _C._synchronize(_index(device))


# ---- random -------------------------------------------------------------------------------------------

def _generator(device: _DeviceLike = None) -> torch.Generator:
    return _C._default_generator(_index(device))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    fresh = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(fresh)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = "tpu") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "tpu") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---- autocast -----------------------------------------------------------------------------------------

def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True


# ---- memory -------------------------------------------------------------------------------------------

def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes held by live device buffers."""
    return _C._memory_stats(_index(device))[0]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return _C._memory_stats(_index(device))[1]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory(_index(device))


def memory_stats(device: _DeviceLike = None) -> dict[str, int]:
    allocated, peak = _C._memory_stats(_index(device))
    return {"allocated_bytes.all.current": allocated, "allocated_bytes.all.peak": peak}


def _host_memory() -> tuple[int, int]:
    available = total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            if key == "MemTotal":
                total = int(value.split()[0]) * 1024
            elif key == "MemAvailable":
                available = int(value.split()[0]) * 1024
    return available, total


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes. On the CPU plugin device memory is host memory, so this reports the host's."""
    _index(device)
    if _C._plugin_info()["platform"] == "cpu":
        return _host_memory()
    raise NotImplementedError("mem_get_info is only implemented for the CPU plugin so far")


def empty_cache() -> None:
    """Buffers are freed as soon as their last tensor dies, so there is no cache to empty."""


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("os", "Any", "torch", "annotations")]
