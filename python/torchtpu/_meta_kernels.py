"""Meta kernels for the ATen ops that lowering rules serve but PyTorch gives none.

Every lowered op's output shapes and dtypes come from its Meta kernel (csrc/aten/op_kernel.cc); where
PyTorch lacks one, the call would run through the CPU fallback instead. Each kernel here only describes
its outputs, like PyTorch's own in torch/_meta_registrations.py.
"""
import torch

_library = torch.library.Library("aten", "IMPL")


def _logcumsumexp(self: torch.Tensor, dim: int) -> torch.Tensor:
    # The scan keeps the input's shape and dtype (logcumsumexp checks the dtype before calling this).
    torch._check(-max(self.dim(), 1) <= dim < max(self.dim(), 1), lambda: f"dim {dim} out of range")
    return torch.empty_like(self)


_library.impl("_logcumsumexp", _logcumsumexp, "Meta")
