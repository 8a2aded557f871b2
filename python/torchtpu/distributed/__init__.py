"""Distributed training on tpu (docs/distributed.md): single-controller SPMD over the process's devices
(``Mesh``, ``shard``: XLA's partitioner splits each program), and the ``torch.distributed`` backend
``"tpu_dist"``, registered by ``import torchtpu``, for one process per chip under ``torchrun`` (DDP, FSDP2,
transformers)."""
from torchtpu.distributed.process_group import BACKEND_NAME, ProcessGroupTPU, register
from torchtpu.distributed.spmd import Mesh, Sharding, shard, sharding

__all__ = ["BACKEND_NAME", "Mesh", "ProcessGroupTPU", "Sharding", "register", "shard", "sharding"]
