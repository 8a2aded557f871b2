"""Captures every distinct program torchtpu builds while recording, with the ops that built it.

A program is recorded when it is built, that is on a program-cache miss: record from the start of a fresh
process (as ``python -m torchtpu.aot check`` does) to see everything a workload emits. A program already in
the in-memory cache when recording starts is not rebuilt, so it is not seen.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from typing import Iterator

from torchtpu import _C


@dataclasses.dataclass
class Program:
    text: str  # the StableHLO module, exactly as compiled for the device
    ops: list[str]  # the ops that built this exact text, first builder first
    builds: int = 1
    partitions: int = 1  # an SPMD program spans this many devices (torchtpu.distributed.shard)

    @property
    def op(self) -> str:
        return self.ops[0]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


class Recording:
    """What one ``record()`` block captured; ``programs`` is filled when the block ends."""

    def __init__(self) -> None:
        self.programs: list[Program] = []

    def snapshot(self) -> list[Program]:
        """The programs recorded so far (also inside the block)."""
        return [Program(text, list(ops), builds, partitions) for text, ops, builds, partitions in _C._aot_recorded()]


@contextlib.contextmanager
def record() -> Iterator[Recording]:
    """``with torchtpu.aot.record() as rec: ...`` then ``rec.programs``. Not reentrant."""
    recording = Recording()
    _C._aot_clear_recorded()
    _C._aot_set_recording(True)
    try:
        yield recording
    finally:
        _C._aot_set_recording(False)
        recording.programs = recording.snapshot()
        _C._aot_clear_recorded()
