"""``pickle`` of tpu tensors, storages and modules (``copy``, multiprocessing queues, Ray, ...).

PyTorch pickles a storage by writing it with ``torch.save``'s legacy format, which reads device memory through
a raw data pointer (``from_blob``); a tpu storage's data pointer names no host memory, so it failed with
"expected a tpu storage". A tpu storage is pickled through ``torch.save``'s default zipfile format instead,
which copies it through the device; unpickling is PyTorch's own (``torch.load`` reads either format) and
returns it on tpu, as a CUDA storage comes back on CUDA.
"""
from __future__ import annotations

import io

import torch


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


def install() -> None:
    for cls in (torch.UntypedStorage, torch.TypedStorage):
        original = cls.__reduce__
        if not getattr(original, "_torchtpu", False):
            cls.__reduce__ = _reduce_through_zipfile(original)
