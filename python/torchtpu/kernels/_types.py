"""What the kernel bridge passes around: a tensor's shape and dtype, and its one error type."""
from __future__ import annotations

from typing import NamedTuple

import torch


class KernelError(RuntimeError):
    """A custom kernel cannot be built or called for these arguments (the message says why)."""


class TensorSpec(NamedTuple):
    shape: tuple[int, ...]
    dtype: torch.dtype

    @staticmethod
    def of(t: torch.Tensor) -> "TensorSpec":
        # int() of a symbolic size (torch.compile with dynamic shapes) specializes the graph to it: a kernel
        # is built per shape, as torchtpu's compiled graphs are captured per shape.
        return TensorSpec(tuple(int(d) for d in t.shape), t.dtype)


def describe(specs: list[TensorSpec]) -> str:
    """``(float32[8, 128], int64[4])``, as messages name a kernel's inputs."""
    return "(" + ", ".join(f"{str(s.dtype).removeprefix('torch.')}{list(s.shape)}" for s in specs) + ")"
