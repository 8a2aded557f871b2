"""``pickle`` of tpu tensors, storages and modules (``copy``, multiprocessing queues, Ray, ...).

PyTorch pickles a storage by writing it with ``torch.save``'s legacy format, which reads device memory through
a raw data pointer (``from_blob``); a tpu storage's data pointer names no host memory, so it failed with
"expected a tpu storage". A tpu storage is pickled through ``torch.save``'s default zipfile format instead,
which copies it through the device; unpickling is PyTorch's own (``torch.load`` reads either format) and
returns it on tpu, as a CUDA storage comes back on CUDA.

Multiprocessing queues (DataLoader workers, ``torch.multiprocessing``) pickle with torch's own reducers,
which share a storage through a file descriptor and refuse any but a CPU or CUDA one: the worker printed
"_share_fd_: only available on CPU", dropped the batch and the main process waited forever. A tpu tensor
crosses a queue by value instead (its bytes inside the message, back on the same tpu device index in the
receiver); CUDA shares the memory itself, which a PJRT buffer cannot. The bytes travel in the message, not
through CPU shared memory: the host copy would be freed once pickled, before a spawned process's arguments
are read (the child failed with "unable to resize file").
"""
from __future__ import annotations

import io
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions


def _reduce_through_zipfile(original):
    def __reduce__(self):
        untyped = getattr(self, "_untyped_storage", self)  # a TypedStorage's own .device warns it is deprecated
        if untyped.device.type != "tpu":
            return original(self)
        buffer = io.BytesIO()
        torch.save(self, buffer)
        return (torch.storage._load_from_bytes, (buffer.getvalue(),))

    __reduce__._torchtpu = True
    return __reduce__


def _rebuild_from_bytes(data: bytes, index: int, requires_grad: bool, parameter: bool) -> torch.Tensor:
    host = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    tensor = host.to(torch.device("tpu", index))
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad)


def _reduce_for_queue(tensor: torch.Tensor):
    if tensor.device.type != "tpu":
        return reductions.reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        # torch's own rule for any device: autograd history cannot cross processes
        return reductions.reduce_tensor(tensor)
    data = io.BytesIO()
    torch.save(tensor.detach().cpu(), data)
    return (_rebuild_from_bytes, (data.getvalue(), tensor.device.index, tensor.requires_grad,
                                  isinstance(tensor, torch.nn.Parameter)))


def install() -> None:
    for cls in (torch.UntypedStorage, torch.TypedStorage):
        original = cls.__reduce__
        if not getattr(original, "_torchtpu", False):
            cls.__reduce__ = _reduce_through_zipfile(original)
    ForkingPickler.register(torch.Tensor, _reduce_for_queue)
    ForkingPickler.register(torch.nn.Parameter, _reduce_for_queue)
