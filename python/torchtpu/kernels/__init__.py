"""Custom kernels on ``tpu``: JAX/Pallas functions and StableHLO text as PyTorch ops (docs/kernels.md).

``jax_op`` and ``stablehlo_op`` make an op whose kernel is spliced into torchtpu's programs under every
driver (strict, fused, torch.compile). ``rms_norm`` and ``flash_attention`` are the two kernels torchtpu
ships built this way (Pallas; interpret mode off a TPU); inside ``with enabled():`` models use them, and
transformers' models take ``attn_implementation="tpu_pallas"`` once this package is imported.
"""
import importlib.util
from torchtpu.kernels._ops import KernelOp, interpret_mode, jax_op, stablehlo_op
from torchtpu.kernels._types import KernelError, TensorSpec
from torchtpu import _import_hooks

_BUILTIN = ("enabled", "flash_attention", "rms_norm")

__all__ = ["KernelError", "KernelOp", "TensorSpec", "interpret_mode", "jax_op", "stablehlo_op", *_BUILTIN]


def __getattr__(name: str):
    # The shipped kernels import JAX: only when asked for, so jax_op's clear error covers a missing JAX too.
    if name in _BUILTIN:
        from torchtpu.kernels import _jax, builtin
        _jax.jax()
        return getattr(builtin, name)
    raise AttributeError(f"module 'torchtpu.kernels' has no attribute {name!r}")


def _register_with_transformers(modeling_utils) -> None:
    from torchtpu.kernels import builtin
    builtin.register_with_transformers(modeling_utils)


if importlib.util.find_spec("jax") is not None:
    _import_hooks.after_import("transformers.modeling_utils", _register_with_transformers)
