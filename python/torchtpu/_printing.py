"""Printing a tpu tensor formats a host copy.

PyTorch's formatter runs many small ops (abs, masked_select, ceil, ...) on the tensor's own device,
except for a fixed list of lazy devices. For ``tpu`` that would compile a dozen programs and take the
CPU fallback for data-dependent ops just to print, so the contents are formatted from one host copy;
PyTorch still writes the prefix and every suffix (device, dtype, grad_fn) itself.
"""
from __future__ import annotations

import torch
import torch._tensor_str as tensor_str

_original_str_intern = tensor_str._str_intern


def _str_intern(inp, *, tensor_contents=None):
    if tensor_contents is None and inp.device.type == "tpu" and type(inp) in (torch.Tensor, torch.nn.Parameter):
        host = inp.detach().to("cpu")
        if host.numel() > 0 or host.dim() == 1:
            tensor_contents = tensor_str._tensor_str(host, len("tensor("))
    return _original_str_intern(inp, tensor_contents=tensor_contents)


def install() -> None:
    tensor_str._str_intern = _str_intern
