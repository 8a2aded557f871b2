"""Meta kernels for the aten ops tpu lowers that PyTorch ships without one.

The tpu kernel infers every output's shape and dtype by running the op on meta tensors, once per compiled
program. These few ops only have CPU and CUDA kernels, although their output shapes depend on the arguments
alone; registering their meta kernels here (for PyTorch as a whole, where they were simply missing) lets
them run natively.
"""
from __future__ import annotations

import torch

_LIBRARY = torch.library.Library("aten", "IMPL")


def _histogram_outputs(self: torch.Tensor, bins: int) -> tuple[torch.Tensor, torch.Tensor]:
    # Where CPU raises, the tpu kernel reruns the op on CPU to show CPU's own message.
    torch._check(self.dtype.is_floating_point, lambda: f"torch.histogram: {self.dtype} input is not supported")
    torch._check(bins > 0, lambda: "torch.histogram(): bins must be > 0, but got " + str(bins))
    return self.new_empty(bins), self.new_empty(bins + 1)


def _histogram_bin_count(self, bins=100, *, range=None, weight=None, density=False):
    if range is not None:
        torch._check(len(range) == 2, lambda: "torch.histogram(): range should have 2 elements")
        torch._check(range[0] <= range[1], lambda: f"torch.histogram(): min should not exceed max, but got "
                     f"min {range[0]} max {range[1]}")
    return _histogram_outputs(self, bins)


def _histogram_bin_edges(self, bins, *, weight=None, density=False):
    torch._check(bins.dtype == self.dtype, lambda: "torch.histogram: input and bins should have the same dtype")
    torch._check(bins.dim() == 1, lambda: f"torch.histogram(): bins tensor should have one dimension, but got "
                 f"{bins.dim()} dimensions in the bins tensor")
    return _histogram_outputs(self, bins.numel() - 1)


_LIBRARY.impl("histogram.bin_ct", _histogram_bin_count, "Meta")
_LIBRARY.impl("histogram.bins_tensor", _histogram_bin_edges, "Meta")
