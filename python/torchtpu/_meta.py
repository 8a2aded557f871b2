"""Meta (shape and dtype) kernels for aten ops that torchtpu lowers but PyTorch ships without one.

The tpu kernel learns an op's output shapes and dtypes by running its meta kernel, once per compiled
program; without one the op would take the CPU fallback although its output shapes depend on the arguments
alone. Each kernel here is registered only while PyTorch lacks its own (or, for `_thnn_fused_lstm_cell`,
while PyTorch's rejects a cell without bias). Where CPU rejects arguments these
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


def _fused_adam_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, **kwargs):
    # In place (Adam and AdamW, float or tensor lr): the lists must agree, as the CPU kernel checks.
    for name, tensors in (("grads", grads), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs),
                          ("state_steps", state_steps)):
        torch._check(len(tensors) == len(self), lambda: f"_fused_adam_: self and {name} must have the same length")
    torch._check(not max_exp_avg_sqs or len(max_exp_avg_sqs) == len(self),
                 lambda: "_fused_adam_: max_exp_avg_sqs must be empty or as long as self")


def _fused_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, **kwargs):
    # The functional form torch.compile's graphs call: new parameters, grads and states.
    _fused_adam_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps)
    return tuple([t.new_empty(t.shape) for t in tensors] for tensors in (self, grads, exp_avgs, exp_avg_sqs,
                                                                           max_exp_avg_sqs))


def _fused_sgd(self, grads, momentum_buffer_list, **kwargs):
    _fused_sgd_(self, grads, momentum_buffer_list)
    return tuple([t.new_empty(t.shape) for t in tensors] for tensors in (self, grads, momentum_buffer_list))


def _check_cell_sizes(op, input_gates, hidden_gates, state, biases, gates_per_state):
    # The size checks of CUDA's fused cells, with an absent bias allowed.
    size = (state.size(0), gates_per_state * state.size(1))
    torch._check(input_gates.shape == hidden_gates.shape == size,
                 lambda: f"{op}: gates of shape {tuple(input_gates.shape)} and {tuple(hidden_gates.shape)} do not "
                         f"fit a state of shape {tuple(state.shape)}")
    for bias in biases:
        torch._check(bias is None or bias.shape == size[1:],
                     lambda: f"{op}: a bias of shape {tuple(bias.shape)} for gates of shape {size}")


def _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    _check_cell_sizes("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, (input_bias, hidden_bias), 4)
    hy, cy = (torch.empty_like(cx, memory_format=torch.contiguous_format) for _ in range(2))
    return hy, cy, torch.empty_like(input_gates, memory_format=torch.contiguous_format)


def _lstm_cell_meta_rejects_absent_bias() -> bool:
    # PyTorch's meta kernel reads the device of each bias, so a cell without bias (nn.LSTM(bias=False))
    # could not be shaped; it would take the CPU fallback, where the op has no kernel.
    gates, state = torch.empty(1, 4, device="meta"), torch.empty(1, 1, device="meta")
    try:
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, state)
    except AttributeError:
        return True
    return False


# GRU steps keep five [batch, hidden] blocks per row for the backward (reset, update and new gates, hx, the
# hidden part of the new gate), as CUDA's kernel does.
_GRU_WORKSPACE_BLOCKS = 5


def _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    _check_cell_sizes("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, (input_bias, hidden_bias), 3)
    workspace = input_gates.new_empty(hx.size(0), _GRU_WORKSPACE_BLOCKS * hx.size(1))
    return torch.empty_like(hx, memory_format=torch.contiguous_format), workspace


def _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    batch, hidden = workspace.size(0), workspace.size(1) // _GRU_WORKSPACE_BLOCKS
    torch._check(grad_hy.shape == (batch, hidden), lambda: "_thnn_fused_gru_cell_backward: grad_hy of shape "
                 f"{tuple(grad_hy.shape)} does not fit the workspace of shape {tuple(workspace.shape)}")
    grad_input_gates = workspace.new_empty(batch, 3 * hidden)
    grad_hidden_gates = workspace.new_empty(batch, 3 * hidden)
    grad_hx = workspace.new_empty(batch, hidden)
    grad_input_bias = workspace.new_empty(3 * hidden) if has_bias else None
    grad_hidden_bias = workspace.new_empty(3 * hidden) if has_bias else None
    return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias


_KERNELS = {
    "_fused_sgd_": _fused_sgd_,
    "_fused_sgd_.tensor_lr": _fused_sgd_,
    "_fused_sgd": _fused_sgd,
    "_fused_sgd.tensor_lr": _fused_sgd,
    "_fused_adam_.tensor_lr": _fused_adam_,
    "_fused_adamw_.tensor_lr": _fused_adam_,
    "_fused_adam.tensor_lr": _fused_adam,
    "_fused_adamw": _fused_adam,
    "_fused_adamw.tensor_lr": _fused_adam,
    "multi_margin_loss_backward": _like_self,  # grad_input has self's shape and dtype
    "_ctc_loss_backward": _like_self,  # the gradient of log_probs (the second argument)
    "multilabel_margin_loss_backward": _like_self,
    "_cummax_helper": _cumulative_extremum_helper,  # writes values and indices of self's shape
    "_cummin_helper": _cumulative_extremum_helper,
    "_logcumsumexp": _logcumsumexp,
    "histogram.bin_ct": _histogram_bin_count,
    "histogram.bins_tensor": _histogram_bin_edges,
    "_thnn_fused_gru_cell": _thnn_fused_gru_cell,
    "_thnn_fused_gru_cell_backward": _thnn_fused_gru_cell_backward,
}

for _name, _kernel in _KERNELS.items():
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + _name, "Meta"):
        _LIBRARY.impl(_name, _kernel, "Meta")
if _lstm_cell_meta_rejects_absent_bias():
    _LIBRARY.impl("_thnn_fused_lstm_cell", _thnn_fused_lstm_cell, "Meta")
