"""DLPack export of tpu tensors is refused.

A tpu tensor's data pointer is synthetic (tpu memory is a PJRT buffer, not an address): ``to_dlpack`` and
``Tensor.__dlpack__`` wrapped it without asking about the device, and a consumer that read it crashed. CUDA
exports real device pointers; a PJRT buffer has none to give, so every export path raises ``BufferError`` (the
error DLPack's protocol names for a tensor that cannot be exported) and says to export ``tensor.cpu()``.
"""
from __future__ import annotations

import functools

import torch
import torch.utils.dlpack


def _refusing_tpu(export):
    @functools.wraps(export)
    def guarded(tensor, *args, **kwargs):
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "tpu":
            raise BufferError("a tpu tensor cannot be exported through DLPack: its memory is a PJRT buffer "
                              "with no address to share; export tensor.cpu() instead")
        return export(tensor, *args, **kwargs)

    return guarded


def install() -> None:
    torch.utils.dlpack.to_dlpack = _refusing_tpu(torch.utils.dlpack.to_dlpack)
    torch.to_dlpack = _refusing_tpu(torch.to_dlpack)
    torch.Tensor.__dlpack__ = _refusing_tpu(torch.Tensor.__dlpack__)
