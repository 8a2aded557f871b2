"""Distributed training on tpu (docs/distributed.md): the ``torch.distributed`` backend ``"tpu_dist"``,
registered by ``import torchtpu``, for one process per chip under ``torchrun`` (DDP, FSDP2, transformers)."""
from torchtpu.distributed.process_group import BACKEND_NAME, ProcessGroupTPU, register

__all__ = ["BACKEND_NAME", "ProcessGroupTPU", "register"]
