"""``torch.tpu``: the device module, shaped like ``torch.cuda``.

Memory numbers are real: bytes held by live PJRT buffers on the device. There is no caching allocator (a
buffer is freed when its last tensor dies), so "reserved" equals "allocated".
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
from typing import Any

import torch

from torchtpu import _C

_DeviceLike = Any  # int, str, torch.device or None


def _index(device: _DeviceLike = None) -> int:
    """The index of an existing tpu device (the current one for None); RuntimeError for one that does not exist."""
    if device is None:
        return current_device()
    if not isinstance(device, int):
        device = torch.device(device)
        if device.type != "tpu":
            raise ValueError(f"Expected a tpu device, got {device}")
        device = current_device() if device.index is None else device.index
    _C._check_device_index(device)
    return device


def is_available() -> bool:
    """Whether a PJRT plugin is installed. Does not initialise the device (so a later ``fork`` stays safe)."""
    return _C._is_available()


def is_initialized() -> bool:
    return _C._plugin_loaded()


def __getattr__(name: str):
    # ``torch.cuda._initialized`` is a flag PyTorch reads by name: torch.utils.checkpoint saves and restores the
    # device's random state only when it is true, so dropout under activation checkpointing replays the same
    # mask in the recomputation. Answered live here, as the plugin loads lazily.
    if name == "_initialized":
        return is_initialized()
    # One generator per device, as ``torch.cuda.default_generators``; made when the plugin loads.
    if name == "default_generators":
        return tuple(_generator(i) for i in range(device_count()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_in_bad_fork() -> bool:
    """True in a child forked after the parent initialised the device: the device cannot be used there."""
    return _C._is_in_bad_fork()


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
    """Makes ``device`` current; a negative index changes nothing, as CUDA's."""
    if isinstance(device, int) and device < 0:
        return
    _C._set_device(_index(device))


class device:
    """Context manager that makes ``device`` the current tpu device."""

    def __init__(self, device: _DeviceLike):
        self.index = -1 if device is None or device == -1 else _index(device)  # -1: no change, as CUDA's
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)

    def __exit__(self, *exc: object) -> bool:
        if self.index >= 0:
            set_device(self.previous)
        return False


class device_of(device):
    """Context manager that makes the device of tensor ``obj`` current; a CPU tensor changes nothing."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else -1)


def get_device_name(device: _DeviceLike = None) -> str:
    """What the PJRT plugin calls the device: "TPU v5 lite", "TPU v6 lite", "cpu" on the CPU plugin."""
    return _C._device_kind(_index(device))


@dataclasses.dataclass(frozen=True)
class _TpuDeviceProperties:
    """``torch.tpu.get_device_properties``: the fields of CUDA's that a tpu device has."""
    name: str
    platform: str
    total_memory: int
    index: int


def get_device_properties(device: _DeviceLike = None) -> _TpuDeviceProperties:
    index = _index(device)
    return _TpuDeviceProperties(name=get_device_name(index), platform=_C._plugin_info()["platform"],
                                total_memory=mem_get_info(index)[1], index=index)


def get_device_capability(device: _DeviceLike = None) -> dict[str, Any]:
    """``torch.accelerator.get_device_capability``'s answer (the dtypes a tpu tensor holds). TPUs have no CUDA
    compute capability (major, minor)."""
    return torch.accelerator.get_device_capability(torch.device("tpu", _index(device)))


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
    return _C._memory_stats(_index(device))["allocated"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    """Peak of ``memory_allocated`` since the start or the last ``reset_peak_memory_stats``."""
    return _C._memory_stats(_index(device))["peak"]


def memory_reserved(device: _DeviceLike = None) -> int:
    """Bytes the process holds on the device: the same as ``memory_allocated`` (no caching allocator)."""
    return memory_allocated(device)


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory(_index(device))


def reset_max_memory_allocated(device: _DeviceLike = None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_accumulated_memory(_index(device))


def memory_stats(device: _DeviceLike = None) -> dict[str, int]:
    """CUDA's key names for the figures the device keeps (``torch.cuda.memory_stats``)."""
    raw = _C._memory_stats(_index(device))
    stats: dict[str, int] = collections.OrderedDict()
    for prefix in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        stats[f"{prefix}.all.current"] = raw["allocated"]
        stats[f"{prefix}.all.peak"] = raw["peak"]
        stats[f"{prefix}.all.allocated"] = raw["allocated_total"]
        stats[f"{prefix}.all.freed"] = raw["freed_total"]
    stats["allocation.all.allocated"] = raw["allocations"]
    stats["allocation.all.freed"] = raw["frees"]
    stats["allocation.all.current"] = raw["allocations"] - raw["frees"]
    stats["num_ooms"] = raw["ooms"]
    stats["num_alloc_retries"] = 0
    stats["num_device_alloc"] = raw["allocations"]
    stats["num_device_free"] = raw["frees"]
    if raw["limit"] >= 0:
        stats["limit_bytes"] = raw["limit"]
    return stats


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    stats = memory_stats(device)
    lines = [f"tpu:{_index(device)} memory (no caching allocator: reserved = allocated)"]
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "allocated_bytes.all.allocated",
                "allocated_bytes.all.freed", "allocation.all.current", "num_ooms"):
        lines.append(f"  {key:32s} {stats[key]}")
    return "\n".join(lines)


def set_per_process_memory_fraction(fraction: float, device: _DeviceLike = None) -> None:
    """Caps this process's live device bytes at ``fraction`` of the device's memory; a larger request raises
    ``torch.OutOfMemoryError`` before it runs. ``fraction=1`` (or more) removes the cap."""
    if not 0 <= fraction:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    index = _index(device)
    _C._set_memory_limit(index, -1 if fraction >= 1 else int(fraction * mem_get_info(index)[1]))


def get_per_process_memory_fraction(device: _DeviceLike = None) -> float:
    """The cap ``set_per_process_memory_fraction`` set, as a fraction of the device's memory (1.0: none)."""
    index = _index(device)
    limit = _C._memory_stats(index)["limit"]
    return 1.0 if limit < 0 else limit / mem_get_info(index)[1]


def memory_stats_as_nested_dict(device: _DeviceLike = None) -> dict[str, Any]:
    """``memory_stats`` with its dotted keys as nested dicts, as ``torch.cuda.memory_stats_as_nested_dict``."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        level = nested
        for part in path:
            level = level.setdefault(part, {})
        level[last] = value
    return nested


OutOfMemoryError = torch.OutOfMemoryError  # what an allocation past the device's memory raises, as on CUDA


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes, as ``torch.accelerator.get_memory_info``. On the CPU plugin device memory is host
    memory, so this reports the host's."""
    return torch.accelerator.get_memory_info(torch.device("tpu", _index(device)))


def empty_cache() -> None:
    """Buffers are freed as soon as their last tensor dies, so there is no cache to empty."""


# At exit, wait for queued work and park threads still dispatching, so none is inside torch or the plugin
# while the interpreter tears down (docs/reliability.md). Registered at import, so it runs after the exit
# handlers of everything imported later, which may still use the device.
atexit.register(_C._prepare_exit)


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("os", "Any", "torch", "annotations", "atexit", "collections", "dataclasses")]


# Streams and events (FSDP2 and other libraries written for CUDA use them). A tpu device runs its programs in
# one in-order queue, so every stream is that queue: work on any stream is ordered after everything enqueued
# before it, and waiting on a stream or an event orders nothing more.
class Stream(torch.Stream):
    def __new__(cls, device: _DeviceLike = None, priority: int = 0):
        return super().__new__(cls, device=torch.device("tpu", _index(device)), priority=priority)


class Event(torch.Event):
    """A point in the device's queue, as ``torch.cuda.Event``: ``query()`` tells whether the work launched
    before ``record()`` has finished, ``synchronize()`` waits for it, and with ``enable_timing=True``
    ``elapsed_time(end)`` gives the milliseconds between two such points (docs/device.md)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, device=torch.device("tpu", current_device()), enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def elapsed_time(self, end_event: torch.Event) -> float:
        return _C._event_elapsed_time(self, end_event)


def current_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(torch.device("tpu", _index(device)))


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    return current_stream(device)


def set_stream(stream: torch.Stream) -> None:
    """Makes the stream's device current, as CUDA's does; each device has one queue, so no queue changes."""
    if stream is not None:
        set_device(stream.device_index)


class StreamContext:
    """``with torch.tpu.StreamContext(s):`` — the stream's device is current inside, as with CUDA's; work runs on
    that device's one queue, as all its work does. ``None`` changes nothing."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self._device = device(None if stream is None else stream.device_index)

    def __enter__(self) -> None:
        self._device.__enter__()

    def __exit__(self, *exc: object) -> bool:
        return self._device.__exit__(*exc)


def stream(stream: torch.Stream | None) -> StreamContext:
    """``with torch.tpu.stream(s):``, as ``torch.cuda.stream``."""
    return StreamContext(stream)
