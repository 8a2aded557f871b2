"""Custom kernels on ``tpu``: JAX/Pallas functions and StableHLO text as PyTorch ops (docs/kernels.md).

``jax_op`` and ``stablehlo_op`` make an op whose kernel is spliced into torchtpu's programs under every
driver (strict, fused, torch.compile). ``rms_norm`` and ``flash_attention`` are the two kernels torchtpu
ships built this way (Pallas; interpret mode off a TPU).
"""
from torchtpu.kernels._ops import KernelOp, interpret_mode, jax_op, stablehlo_op
from torchtpu.kernels._types import KernelError, TensorSpec

__all__ = ["KernelError", "KernelOp", "TensorSpec", "interpret_mode", "jax_op", "stablehlo_op"]
