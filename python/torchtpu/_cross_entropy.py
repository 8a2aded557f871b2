"""Class-weighted cross entropy with label smoothing, without a data-dependent shape.

PyTorch's ``cross_entropy`` with ``weight``, ``label_smoothing > 0`` and the mean reduction divides the smoothed
loss by the weights of the targets that are not ignored, which it gathers with ``masked_select``: a shape that
follows the count of ignored targets, so on ``tpu`` every step compiled new programs (and, in fused mode,
split the step at a host read). PyTorch takes a mask instead of the selection for tensor subclasses; the same
sum, ``weight[target]`` zeroed where the target is ignored, is computed here for tpu tensors. Every other case
runs PyTorch's own composite. Registered for ``AutogradPrivateUse1``: the ops below record autograd as usual.
"""
from __future__ import annotations

import torch

_lib = None
_MEAN = 1  # at::Reduction::Mean


def _smoothed_weighted_mean(input, target, weight, ignore_index, label_smoothing):
    class_dim = 0 if input.dim() == 1 else 1
    log_probs = torch.log_softmax(input, class_dim)
    nll = torch.ops.aten.nll_loss_nd(log_probs, target, weight, _MEAN, ignore_index)
    ignored = target == ignore_index
    per_class = weight.view([-1 if d == class_dim else 1 for d in range(input.dim())])
    smooth = -(log_probs * per_class).sum(class_dim).masked_fill(ignored, 0.0)
    target_weights = weight.gather(0, target.masked_fill(ignored, 0).flatten()).masked_fill(ignored.flatten(), 0)
    smooth_mean = smooth.sum() / target_weights.sum()
    return (1 - label_smoothing) * nll + smooth_mean * (label_smoothing / input.shape[class_dim])


def cross_entropy_loss(input, target, weight=None, reduction=_MEAN, ignore_index=-100, label_smoothing=0.0):
    if (weight is not None and label_smoothing > 0 and reduction == _MEAN and not target.is_floating_point()
            and input.dim() >= 1):
        return _smoothed_weighted_mean(input, target, weight, ignore_index, label_smoothing)
    return torch.ops.aten.cross_entropy_loss.default.decompose(input, target, weight, reduction, ignore_index,
                                                               label_smoothing)


def install() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("cross_entropy_loss", cross_entropy_loss, "AutogradPrivateUse1")
