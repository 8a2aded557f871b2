"""Meta (shape and dtype) kernels for aten ops that torchtpu lowers but PyTorch ships without one.

The tpu kernel learns an op's output shapes and dtypes by running its meta kernel, once per compiled
program; without one the op would take the CPU fallback although its output shapes depend on the arguments
alone. Each kernel here is registered only while PyTorch lacks its own. Where CPU rejects arguments these
kernels accept, the tpu kernel reruns the op on CPU stand-ins and raises CPU's own error.
"""
from __future__ import annotations

import torch

_LIBRARY = torch.library.Library("aten", "IMPL")


def _like_self(grad_output, self, *args, **kwargs):
    return torch.empty_like(self)


def _cumulative_extremum_helper(self, values, indices, dim):
    values.resize_(self.shape)
    indices.resize_(self.shape)


def _logcumsumexp(self, dim):
    torch._check(-max(self.dim(), 1) <= dim < max(self.dim(), 1), lambda: f"dim {dim} out of range")
    return torch.empty_like(self)  # the scan keeps the input's shape and dtype


def _histogram_outputs(self: torch.Tensor, bins: int) -> tuple[torch.Tensor, torch.Tensor]:
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


def _fused_sgd_(self, grads, momentum_buffer_list, **kwargs):
    # In place, no outputs: only the lists' agreement is checked, as the CPU kernel does.
    torch._check(len(grads) == len(self), lambda: "_fused_sgd_: self and grads must have the same length")
    torch._check(not momentum_buffer_list or len(momentum_buffer_list) == len(self),
                 lambda: "_fused_sgd_: momentum_buffer_list must be empty or as long as self")


_KERNELS = {
    "_fused_sgd_": _fused_sgd_,
    "_fused_sgd_.tensor_lr": _fused_sgd_,
    "multi_margin_loss_backward": _like_self,  # grad_input has self's shape and dtype
    "multilabel_margin_loss_backward": _like_self,
    "_cummax_helper": _cumulative_extremum_helper,  # writes values and indices of self's shape
    "_cummin_helper": _cumulative_extremum_helper,
    "_logcumsumexp": _logcumsumexp,
    "histogram.bin_ct": _histogram_bin_count,
    "histogram.bins_tensor": _histogram_bin_edges,
}

for _name, _kernel in _KERNELS.items():
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + _name, "Meta"):
        _LIBRARY.impl(_name, _kernel, "Meta")
