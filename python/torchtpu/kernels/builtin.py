"""The kernels torchtpu ships, built with ``jax_op`` from Pallas: a fused RMSNorm and blocked (flash) attention,
each with a Pallas backward. Off a TPU they run in Pallas interpret mode (plain StableHLO loops); on a TPU they
lower to Mosaic.

Call them directly (``rms_norm``, ``flash_attention``), or let models use them: inside ``with
torchtpu.kernels.enabled():`` every ``F.scaled_dot_product_attention`` and ``F.rms_norm`` (``nn.RMSNorm``) on
tpu that the kernels support goes to them, and any other call to the native lowering.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from torchtpu.kernels import pallas_attention, pallas_rms_norm
from torchtpu.kernels._ops import interpret_mode, jax_op

# The attention kernel's tile sizes: TPU-friendly (lane-width) and small enough for VMEM.
BLOCK_Q = 128
BLOCK_K = 128
_DTYPES = (torch.float32, torch.bfloat16)


def _rms_norm(x, weight, eps=1e-6):
    return pallas_rms_norm.rms_norm(x, weight, eps=eps, interpret=interpret_mode())


def _rms_norm_backward(x, weight, grad, eps=1e-6):
    return pallas_rms_norm.rms_norm_backward(x, weight, grad, eps=eps, interpret=interpret_mode())


_rms_norm_backward_op = jax_op("torchtpu::rms_norm_backward", _rms_norm_backward, num_outputs=2,
                               differentiable=False)


def _rms_norm_setup(ctx, inputs, output):
    x, weight, ctx.eps = inputs
    ctx.save_for_backward(x, weight)


def _rms_norm_grad(ctx, grad):
    x, weight = ctx.saved_tensors
    grad_x, grad_weight = _rms_norm_backward_op(x, weight, grad, eps=ctx.eps)
    return grad_x, grad_weight, None


rms_norm_op = jax_op("torchtpu::rms_norm", _rms_norm, backward=_rms_norm_grad, setup_context=_rms_norm_setup)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x * rsqrt(mean(x^2, -1) + eps) * weight`` over the last dim, in float32 inside, as one kernel."""
    return rms_norm_op(x, weight, eps=eps)


def _attention(q, k, v, causal=True, scale=1.0, block_q=BLOCK_Q, block_k=BLOCK_K):
    return pallas_attention.flash_attention(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                                            interpret=interpret_mode())


def _attention_backward(q, k, v, out, lse, grad, causal=True, scale=1.0, block_q=BLOCK_Q, block_k=BLOCK_K):
    return pallas_attention.flash_attention_backward(q, k, v, out, lse, grad, causal=causal, scale=scale,
                                                     block_q=block_q, block_k=block_k, interpret=interpret_mode())


_attention_backward_op = jax_op("torchtpu::flash_attention_backward", _attention_backward, num_outputs=3,
                                differentiable=False)


def _attention_setup(ctx, inputs, output):
    q, k, v, *ctx.statics = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)


def _attention_grad(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    causal, scale, block_q, block_k = ctx.statics
    dq, dk, dv = _attention_backward_op(q, k, v, out, lse, grad_out, causal=causal, scale=scale,
                                        block_q=block_q, block_k=block_k)
    return dq, dk, dv, None, None, None, None


attention_op = jax_op("torchtpu::flash_attention", _attention, num_outputs=2, backward=_attention_grad,
                      setup_context=_attention_setup)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """Attention of q [B, H, Lq, D] over k, v [B, H, Lk, D] without the [Lq, Lk] score matrix (blocked, online
    softmax). Causal masking is aligned bottom-right (query i sees keys j <= i + Lk - Lq), as SDPA's is for
    Lq == Lk. Sequence lengths must be multiples of the block (or shorter than it)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    block_q, block_k = min(BLOCK_Q, q.shape[2]), min(BLOCK_K, k.shape[2])
    return attention_op(q, k, v, causal=causal, scale=float(scale), block_q=block_q, block_k=block_k)[0]


def attention_fits(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False) -> bool:
    """Whether an SDPA call can run as the attention kernel: 4-d tpu float32/bfloat16 tensors of one dtype, as
    many key heads as query heads, no mask or dropout, lengths the blocks divide, a square causal mask, more
    than one query (not a decode step). (A
    grouped-query call, ``enable_gqa=True``, has its key heads repeated first.)"""
    tensors = (q, k, v)
    if attn_mask is not None or dropout_p or any(t.device.type != "tpu" or t.dim() != 4 for t in tensors):
        return False
    if len({t.dtype for t in tensors}) != 1 or q.dtype not in _DTYPES:
        return False
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        return False
    if q.shape[2] == 1:
        return False  # a decode step: the native path reads a growing cache without a program per length
    if is_causal and q.shape[2] != k.shape[2]:
        return False  # SDPA aligns a non-square causal mask top-left; the kernel aligns it bottom-right
    return all(length % min(block, length) == 0 for length, block in ((q.shape[2], BLOCK_Q), (k.shape[2], BLOCK_K)))


class _KernelMode(TorchFunctionMode):
    """Sends the calls the kernels support to them; everything else runs as it would."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k, v, *rest = args
            options = dict(zip(("attn_mask", "dropout_p", "is_causal"), rest), **kwargs)
            scale = options.pop("scale", None)
            if options.pop("enable_gqa", False) and k.dim() == 4 and q.shape[1] != k.shape[1] \
                    and q.shape[1] % k.shape[1] == 0:
                # Grouped-query attention: each key head serves q_heads / kv_heads query heads.
                k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
            if attention_fits(q, k, v, **options):
                return flash_attention(q, k, v, causal=bool(options.get("is_causal", False)), scale=scale)
        elif func is F.rms_norm:
            x, shape, *rest = args
            options = dict(zip(("weight", "eps"), rest), **kwargs)
            weight, eps = options.get("weight"), options.get("eps")
            if (x.device.type == "tpu" and weight is not None and len(shape) == 1 and x.dtype in _DTYPES
                    and weight.dtype == x.dtype):
                return rms_norm(x, weight, torch.finfo(x.dtype).eps if eps is None else eps)
        return func(*args, **kwargs)


@contextlib.contextmanager
def enabled():
    """Inside this block, attention and RMSNorm on tpu run as torchtpu's kernels where they fit."""
    with _KernelMode():
        yield


def _attention_for_transformers(module, query, key, value, attention_mask, **kwargs):
    """transformers' attention implementation "tpu_pallas": its SDPA path, with the kernel where it fits."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    with enabled():
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def register_with_transformers(modeling_utils) -> None:
    """Makes ``attn_implementation="tpu_pallas"`` available to transformers' models (masks as for "sdpa");
    ``modeling_utils`` is transformers' module of that name. (A name with "flash" in it would make
    transformers look for a flash-attention package.)"""
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    modeling_utils.AttentionInterface.register("tpu_pallas", _attention_for_transformers)
    AttentionMaskInterface.register("tpu_pallas", sdpa_mask)
