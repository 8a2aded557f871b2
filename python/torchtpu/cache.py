"""The on-disk program cache (tier 2): compiled programs survive the process, so the next run of the same
workload loads them instead of compiling. See docs/cache.md.

Environment: ``TORCHTPU_CACHE_DIR`` (default ``$XDG_CACHE_HOME/torchtpu`` or ``~/.cache/torchtpu``),
``TORCHTPU_CACHE_MAX_BYTES`` (default 1 GiB, least recently used entries go first),
``TORCHTPU_DISK_CACHE=0`` to turn it off. Tier 1 (in memory) is bounded by ``TORCHTPU_CACHE_MAX_PROGRAMS``.
"""
from __future__ import annotations

from torchtpu import _C


def stats() -> dict:
    """Disk-cache figures: ``hits`` (programs this process loaded), ``misses`` (programs it compiled),
    ``writes``, ``rejected`` (unusable entries skipped with a warning), ``evictions``, and the directory's
    ``entries`` and ``bytes`` now, with its ``max_bytes`` bound; plus the in-memory tier's ``programs``,
    ``memory_evictions`` and ``max_programs``."""
    figures = dict(_C._disk_cache_stats())
    memory = _C._metrics()["program_cache"]
    figures.update(programs=memory["programs"], memory_evictions=memory["evictions"],
                   max_programs=memory["capacity"])
    return figures


def clear() -> None:
    """Removes every entry of the disk cache directory (programs already loaded stay usable)."""
    _C._clear_disk_cache()
