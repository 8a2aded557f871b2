"""The per-device kernels of ``nn.SyncBatchNorm`` on ``tpu``.

``SyncBatchNorm`` accepts the PrivateUse1 device and, with a process group of several ranks, calls five ATen
ops that only CUDA (and a few GPU backends) implement: each rank's statistics (``batch_norm_stats``), their
combination across ranks (``batch_norm_gather_stats_with_counts``, which also updates the running
statistics), the normalization (``batch_norm_elemt``) and the two halves of the backward pass
(``batch_norm_backward_reduce``, ``batch_norm_backward_elemt``). On tpu the calls failed with "Could not run
'aten::batch_norm_stats' with arguments from the 'CPU' backend" (the CPU fallback has nothing to run).

Each is written here with ops tpu lowers, with CUDA kernels' math: statistics accumulate in float32 for 16-bit
inputs (and come back in float32), the combined variance is the counts-weighted within-rank variances plus
the spread of the rank means, and the running variance takes the unbiased estimate.
"""
from __future__ import annotations

import torch

_lib = None


def _reduced_dims(input: torch.Tensor) -> list[int]:
    return [0, *range(2, input.dim())]


def _per_channel(stat: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """A [C] statistic shaped to broadcast against ``input`` (channels in dim 1)."""
    return stat.reshape(1, -1, *([1] * (input.dim() - 2)))


def _stat_dtype(input: torch.Tensor) -> torch.dtype:
    return torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype


def batch_norm_stats(input, eps):
    var, mean = torch.var_mean(input.to(_stat_dtype(input)), _reduced_dims(input), correction=0)
    return mean, (var + eps).rsqrt()


def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts):
    counts = counts.to(mean.dtype).reshape(-1, 1)
    total = counts.sum()
    # A rank with no elements has no statistics (its invstd may be inf): it weighs nothing.
    present = counts > 0
    global_mean = torch.where(present, mean * counts, 0).sum(0) / total
    within = 1 / invstd.square() - eps
    m2 = torch.where(present, counts * (within + (mean - global_mean).square()), 0).sum(0)
    global_invstd = (m2 / total + eps).rsqrt()
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = m2 / (total - 1)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return global_mean, global_invstd


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    x = input.to(_stat_dtype(input))
    out = (x - _per_channel(mean, x)) * _per_channel(invstd, x)
    if weight is not None:
        out = out * _per_channel(weight.to(out.dtype), x)
    if bias is not None:
        out = out + _per_channel(bias.to(out.dtype), x)
    return out.to(input.dtype)


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    dtype = _stat_dtype(input)
    dy = grad_out.to(dtype)
    dims = _reduced_dims(input)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (input.to(dtype) - _per_channel(mean, dy))).sum(dims)
    empty = input.new_empty(0)
    param_dtype = weight.dtype if weight is not None else input.dtype
    grad_weight = (sum_dy_xmu * invstd).to(param_dtype) if weight_g else empty
    grad_bias = sum_dy.to(param_dtype) if bias_g else empty
    return (sum_dy if input_g else empty), (sum_dy_xmu if input_g else empty), grad_weight, grad_bias


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    dtype = _stat_dtype(input)
    total = count.to(dtype).sum()
    x = input.to(dtype)
    scale = _per_channel(invstd, x)
    if weight is not None:
        scale = scale * _per_channel(weight.to(dtype), x)
    xmu = x - _per_channel(mean, x)
    projection = xmu * _per_channel(invstd.square() * sum_dy_xmu / total, x)
    grad = (grad_out.to(dtype) - _per_channel(sum_dy / total, x) - projection) * scale
    return grad.to(input.dtype)


def install() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    for kernel in (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt,
                   batch_norm_backward_reduce, batch_norm_backward_elemt):
        _lib.impl(kernel.__name__, kernel, "PrivateUse1")
