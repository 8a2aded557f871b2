"""Counters of what the tpu device did: compiles, cache hits, executions and CPU fallbacks per op,
and host<->device transfers."""
from __future__ import annotations

from torchtpu import _C


def metrics() -> dict:
    """``{"ops": {op: {"compiles", "cache_hits", "executions", "fallbacks"}}, "transfers": {...},
    "program_cache": {"programs", "evictions", "capacity"}, "fused": {"ops_recorded", "programs_run",
    "compiles", "op_by_op_runs", "flushes"}, "compiled": {"captures", "replays"}}`` (fused: docs/modes.md;
    compiled: torch.compile graphs captured and replayed, docs/compile.md). Program-cache figures are not
    reset."""
    return _C._metrics()


def reset_metrics() -> None:
    _C._reset_metrics()


def fallback_ops() -> dict[str, int]:
    """Ops that ran through the CPU fallback, with their counts."""
    return {op: c["fallbacks"] for op, c in metrics()["ops"].items() if c["fallbacks"]}
