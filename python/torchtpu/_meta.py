"""Meta (shape and dtype) kernels for aten ops that torchtpu lowers but PyTorch ships without one.

The tpu kernel learns an op's output shapes and dtypes by running its meta kernel; without one the op
would take the CPU fallback. Each kernel here is registered only while PyTorch lacks its own.
"""
import torch

_LIBRARY = torch.library.Library("aten", "IMPL")


def _like_self(grad_output, self, *args, **kwargs):
    return torch.empty_like(self)


def _cumulative_extremum_helper(self, values, indices, dim):
    values.resize_(self.shape)
    indices.resize_(self.shape)


_KERNELS = {
    "multi_margin_loss_backward": _like_self,  # grad_input has self's shape and dtype
    "multilabel_margin_loss_backward": _like_self,
    "_cummax_helper": _cumulative_extremum_helper,  # writes values and indices of self's shape
    "_cummin_helper": _cumulative_extremum_helper,
}

for _name, _kernel in _KERNELS.items():
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + _name, "Meta"):
        _LIBRARY.impl(_name, _kernel, "Meta")
