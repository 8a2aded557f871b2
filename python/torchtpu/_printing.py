"""Printing a tpu tensor formats a host copy.

PyTorch's formatter runs many small ops (abs, masked_select, ceil, ...) on the tensor's own device,
except for a fixed list of lazy devices. For ``tpu`` that would compile a dozen programs and take the
CPU fallback for data-dependent ops just to print, so the contents are formatted from one host copy;
PyTorch still writes the prefix and every suffix (device, dtype, grad_fn) itself.

A tensor large enough to be summarized ("...") shows only its corners, so only the corners are gathered
on the device and moved: the host copy is a zero tensor of the full shape with the corners filled in,
which is all the formatter reads.
"""
from __future__ import annotations

import torch
import torch._tensor_str as tensor_str

_original_str_intern = tensor_str._str_intern


def _host_copy(inp: torch.Tensor) -> torch.Tensor:
    inp = inp.detach()
    edge = tensor_str.PRINT_OPTS.edgeitems
    if inp.numel() <= tensor_str.PRINT_OPTS.threshold or inp.dim() == 0:
        return inp.to("cpu")
    # The positions the formatter shows along each dim: all of a short dim, else `edge` at each end.
    shown = [torch.arange(n) if n <= 2 * edge else torch.cat([torch.arange(edge), torch.arange(n - edge, n)])
             for n in inp.shape]
    grid = torch.meshgrid(*shown, indexing="ij")
    corners = inp[tuple(g.to(inp.device) for g in grid)].to("cpu")
    host = torch.zeros(inp.shape, dtype=inp.dtype)  # untouched pages of a zero tensor cost no memory
    host[grid] = corners
    return host


def _str_intern(inp, *, tensor_contents=None):
    if tensor_contents is None and inp.device.type == "tpu" and type(inp) in (torch.Tensor, torch.nn.Parameter):
        host = _host_copy(inp)
        if host.numel() > 0 or host.dim() == 1:
            tensor_contents = tensor_str._tensor_str(host, len("tensor("))
    return _original_str_intern(inp, tensor_contents=tensor_contents)


def install() -> None:
    tensor_str._str_intern = _str_intern
