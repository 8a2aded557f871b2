"""DLPack export of tpu tensors is refused, as ``Tensor.__dlpack__`` already refuses it.

``torch.utils.dlpack.to_dlpack`` asks no device question: it wrapped a tpu tensor's data pointer, which is
synthetic (tpu memory is a PJRT buffer, not an address), and a consumer that read it crashed. CUDA exports
real device pointers; a PJRT buffer has none to give, so the export raises and says to move the tensor to the
CPU first.
"""
from __future__ import annotations

import torch
import torch.utils.dlpack


def install() -> None:
    export = torch.utils.dlpack.to_dlpack

    def to_dlpack(tensor: torch.Tensor):
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "tpu":
            raise BufferError("a tpu tensor cannot be exported through DLPack: its memory is a PJRT buffer "
                              "with no address to share; export tensor.cpu() instead")
        return export(tensor)

    to_dlpack.__doc__ = export.__doc__
    torch.utils.dlpack.to_dlpack = to_dlpack
