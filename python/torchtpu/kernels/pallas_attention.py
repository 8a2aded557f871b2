"""Blocked (flash) scaled-dot-product attention as Pallas kernels.

Forward: ``out = softmax(scale * q @ k^T + mask) @ v`` per (batch, head), plus
the per-row ``lse = logsumexp(scale * q @ k^T + mask)`` the backward needs.
The kernels never materialize the [Lq, Lk] score matrix: the grid runs over
(batch * head, query block) and an inner loop walks key blocks, keeping a
FlashAttention-2 style online softmax (running max ``m``, running sum ``l``,
unnormalized accumulator) in float32. That bounds memory to one
[block_q, block_k] tile of scores and lets causal attention skip key blocks
that lie entirely above the diagonal.

Backward (FlashAttention-2): ``delta = rowsum(grad_out * out)`` is computed
with jnp, then one kernel gridded over key blocks loops over query blocks to
accumulate dk and dv, and one gridded over query blocks loops over key blocks
to accumulate dq; probabilities are recomputed from ``lse``.

Conventions and limits:
  * Causal masking is bottom-right aligned: query i attends key j iff
    ``j <= i + (Lk - Lq)`` (the usual ``j <= i`` when Lq == Lk). Causal with
    Lq > Lk is rejected, because the first rows would attend no key at all.
  * Blocks are ``min(block, L)`` and must divide the sequence length; nothing
    is padded. A ValueError is raised otherwise.
  * Per (batch, head) the whole K and V (forward, dq) or Q and grad_out (dk/dv)
    stay resident (double-buffered) in VMEM, which bounds the sequence length
    under the default scoped VMEM limit at D=128: about 8192 (bf16) / 4096
    (f32) on v4 and v5e, 16384 (bf16) / 8192 (f32) on v6e.
  * On TPU (interpret=False), block_q must be a multiple of 128 or equal Lq
    (lse is stored as a lane-major [1, block_q] row) and block_k a multiple of
    8 or equal Lk (sublane tiling); a ValueError is raised otherwise.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Finite so that exp(_MASK_VALUE - m) underflows to 0 instead of giving NaN.
_MASK_VALUE = -1e30

# dot_general dimension numbers for a @ b.T (contract the last dims).
_NT = (((1,), (1,)), ((), ()))

_PARALLEL_2D = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"))


def _blocks(q, k, v, *, causal, block_q, block_k, interpret):
    """Validate shapes and return the (block_q, block_k) actually used."""
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4:
        raise ValueError(
            f"expected q [B,H,Lq,D] and k, v [B,H,Lk,D]; got {q.shape}, {k.shape}, {v.shape}"
        )
    batch, heads, lq, dim = q.shape
    if (k.shape[0], k.shape[1], k.shape[3]) != (batch, heads, dim):
        raise ValueError(f"q {q.shape} and k/v {k.shape} disagree on B, H or D")
    lk = k.shape[2]
    if causal and lq > lk:
        raise ValueError(
            f"causal attention needs Lq <= Lk (bottom-right aligned mask); got Lq={lq}, Lk={lk}"
        )
    bq, bk = min(block_q, lq), min(block_k, lk)
    if lq % bq or lk % bk:
        raise ValueError(
            f"block sizes must divide the sequence lengths: Lq={lq} block_q={bq}, "
            f"Lk={lk} block_k={bk}"
        )
    if not interpret and ((bq % 128 and bq != lq) or (bk % 8 and bk != lk)):
        raise ValueError(
            f"TPU tiling needs block_q % 128 == 0 (or == Lq) and block_k % 8 == 0 "
            f"(or == Lk); got block_q={bq} (Lq={lq}), block_k={bk} (Lk={lk})"
        )
    return bq, bk


def _mask(s, q_start, k_start, offset, *, keys_major):
    """Apply the bottom-right causal mask to a score tile.

    ``s`` is [queries, keys], or [keys, queries] when ``keys_major``.
    """
    q_axis, k_axis = (1, 0) if keys_major else (0, 1)
    q_idx = q_start + lax.broadcasted_iota(jnp.int32, s.shape, q_axis)
    k_idx = k_start + lax.broadcasted_iota(jnp.int32, s.shape, k_axis)
    return jnp.where(k_idx <= q_idx + offset, s, _MASK_VALUE)


def _num_k_blocks(q_start, block_q, block_k, num_k, *, causal, offset):
    """Key blocks a query block needs: under causal, up to its last row's diagonal."""
    if not causal:
        return num_k
    # Lq <= Lk makes the last key index q_start + block_q - 1 + offset < Lk.
    return lax.div(q_start + block_q - 1 + offset, block_k) + 1


def _column_to_row(col):
    """[n, 1] -> [1, n] for storing lse lane-major.

    A plain reshape is a sublane->lane relayout that Mosaic lowers to a sublane
    gather, which older TPUs (v4) reject. Keeping the diagonal of the
    lane-broadcast column and reducing over sublanes works everywhere, at
    O(n^2) elementwise cost once per query block.
    """
    n = col.shape[0]
    eye = lax.broadcasted_iota(jnp.int32, (n, n), 0) == lax.broadcasted_iota(
        jnp.int32, (n, n), 1
    )
    return jnp.sum(jnp.where(eye, col, 0.0), axis=0, keepdims=True)


def _key_block_scores(q, k_ref, v_ref, j, q_start, *, causal, scale, block_k, offset):
    """Key block j's keys and values and the query block's scaled (and causally masked) scores against them."""
    k_start = pl.multiple_of(j * block_k, block_k)
    k = k_ref[pl.ds(k_start, block_k), :]
    v = v_ref[pl.ds(k_start, block_k), :]
    s = lax.dot_general(q, k, _NT, preferred_element_type=jnp.float32) * scale
    if causal:
        s = _mask(s, q_start, k_start, offset, keys_major=False)
    return k, v, s


def _forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, *, causal, scale, block_k, offset):
    block_q, dim = q_ref.shape
    q_start = pl.program_id(1) * block_q
    q = q_ref[...]

    def body(j, carry):
        m, l, acc = carry
        _, v, s = _key_block_scores(q, k_ref, v_ref, j, q_start, causal=causal, scale=scale, block_k=block_k,
                                    offset=offset)
        m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        # Rescale what was accumulated under the old max to the new one.
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new)
        l = alpha * l + jnp.sum(p, axis=1, keepdims=True)
        acc = alpha * acc + jnp.dot(
            p.astype(v.dtype), v, preferred_element_type=jnp.float32
        )
        return m_new, l, acc

    num_k = _num_k_blocks(
        q_start, block_q, block_k, k_ref.shape[0] // block_k, causal=causal, offset=offset
    )
    m, l, acc = lax.fori_loop(
        0,
        num_k,
        body,
        (
            jnp.full((block_q, 1), -jnp.inf, jnp.float32),
            jnp.zeros((block_q, 1), jnp.float32),
            jnp.zeros((block_q, dim), jnp.float32),
        ),
    )
    o_ref[...] = (acc / l).astype(o_ref.dtype)
    # Stored lane-major ([1, block_q]) so HBM holds Lq floats per head, not a
    # lane-padded [Lq, 1] column.
    lse_ref[...] = _column_to_row(m + jnp.log(l))


def _dkdv_kernel(
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref,
    *, causal, scale, block_q, offset,
):
    block_k, dim = k_ref.shape
    k_start = pl.program_id(1) * block_k
    k = k_ref[...]
    v = v_ref[...]

    # Work on transposed [keys, queries] tiles so lse and delta, stored as
    # per-query rows, broadcast over sublanes and dk/dv come out of plain dots.
    def body(i, carry):
        dk, dv = carry
        q_start = pl.multiple_of(i * block_q, block_q)
        q = q_ref[pl.ds(q_start, block_q), :]
        do = do_ref[pl.ds(q_start, block_q), :]
        lse = lse_ref[pl.ds(i, 1), :]
        delta = delta_ref[pl.ds(i, 1), :]
        s_t = lax.dot_general(k, q, _NT, preferred_element_type=jnp.float32) * scale
        if causal:
            s_t = _mask(s_t, q_start, k_start, offset, keys_major=True)
        p_t = jnp.exp(s_t - lse)
        dv = dv + jnp.dot(p_t.astype(do.dtype), do, preferred_element_type=jnp.float32)
        dp_t = lax.dot_general(v, do, _NT, preferred_element_type=jnp.float32)
        ds_t = p_t * (dp_t - delta)
        dk = dk + jnp.dot(ds_t.astype(q.dtype), q, preferred_element_type=jnp.float32)
        return dk, dv

    # Under causal, queries before k_start - offset see none of these keys.
    first_q = lax.div(jnp.maximum(k_start - offset, 0), block_q) if causal else 0
    zeros = jnp.zeros((block_k, dim), jnp.float32)
    dk, dv = lax.fori_loop(first_q, lse_ref.shape[0], body, (zeros, zeros))
    dk_ref[...] = (dk * scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _dq_kernel(
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref,
    *, causal, scale, block_k, offset,
):
    block_q, dim = q_ref.shape
    q_start = pl.program_id(1) * block_q
    q = q_ref[...]
    do = do_ref[...]
    lse = jnp.expand_dims(lse_ref[0], -1)
    delta = jnp.expand_dims(delta_ref[0], -1)

    def body(j, dq):
        k, v, s = _key_block_scores(q, k_ref, v_ref, j, q_start, causal=causal, scale=scale, block_k=block_k,
                                    offset=offset)
        p = jnp.exp(s - lse)
        dp = lax.dot_general(do, v, _NT, preferred_element_type=jnp.float32)
        ds = p * (dp - delta)
        return dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    num_k = _num_k_blocks(
        q_start, block_q, block_k, k_ref.shape[0] // block_k, causal=causal, offset=offset
    )
    dq = lax.fori_loop(0, num_k, body, jnp.zeros((block_q, dim), jnp.float32))
    dq_ref[...] = (dq * scale).astype(dq_ref.dtype)


def flash_attention(
    q, k, v, *, causal: bool, scale: float, block_q: int, block_k: int, interpret: bool
):
    """Attention of q [B,H,Lq,D] over k, v [B,H,Lk,D].

    Returns ``(out [B,H,Lq,D] in q.dtype, lse [B,H,Lq] float32)``.
    """
    bq, bk = _blocks(
        q, k, v, causal=causal, block_q=block_q, block_k=block_k, interpret=interpret
    )
    batch, heads, lq, dim = q.shape
    lk = k.shape[2]
    bh = batch * heads
    kernel = functools.partial(
        _forward_kernel, causal=causal, scale=scale, block_k=bk, offset=lk - lq
    )
    seq_q_spec = pl.BlockSpec((None, bq, dim), lambda b, i: (b, i, 0))
    full_k_spec = pl.BlockSpec((None, lk, dim), lambda b, i: (b, 0, 0))
    out, lse = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((bh, lq, dim), q.dtype),
            jax.ShapeDtypeStruct((bh, 1, lq), jnp.float32),
        ),
        grid=(bh, lq // bq),
        in_specs=[seq_q_spec, full_k_spec, full_k_spec],
        out_specs=(seq_q_spec, pl.BlockSpec((None, 1, bq), lambda b, i: (b, 0, i))),
        compiler_params=_PARALLEL_2D,
        interpret=interpret,
    )(q.reshape(bh, lq, dim), k.reshape(bh, lk, dim), v.reshape(bh, lk, dim))
    return out.reshape(q.shape), lse.reshape(batch, heads, lq)


def flash_attention_backward(
    q, k, v, out, lse, grad_out,
    *, causal: bool, scale: float, block_q: int, block_k: int, interpret: bool,
):
    """Gradients ``(dq, dk, dv)`` of :func:`flash_attention`'s ``out``, in input dtypes."""
    bq, bk = _blocks(
        q, k, v, causal=causal, block_q=block_q, block_k=block_k, interpret=interpret
    )
    batch, heads, lq, dim = q.shape
    lk = k.shape[2]
    bh = batch * heads
    offset = lk - lq
    q3 = q.reshape(bh, lq, dim)
    k3 = k.reshape(bh, lk, dim)
    v3 = v.reshape(bh, lk, dim)
    do3 = grad_out.reshape(bh, lq, dim)
    lse3 = lse.astype(jnp.float32).reshape(bh, 1, lq)
    delta3 = jnp.sum(
        grad_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1
    ).reshape(bh, 1, lq)

    # dk, dv: grid over key blocks; each loops over all query blocks, so the
    # per-query rows (lse, delta) come in as [num_q_blocks, block_q] and are
    # picked one row per iteration.
    num_q = lq // bq
    full_q_spec = pl.BlockSpec((None, lq, dim), lambda b, j: (b, 0, 0))
    k_block_spec = pl.BlockSpec((None, bk, dim), lambda b, j: (b, j, 0))
    q_rows_spec = pl.BlockSpec((None, num_q, bq), lambda b, j: (b, 0, 0))
    dk, dv = pl.pallas_call(
        functools.partial(
            _dkdv_kernel, causal=causal, scale=scale, block_q=bq, offset=offset
        ),
        out_shape=(
            jax.ShapeDtypeStruct(k3.shape, k.dtype),
            jax.ShapeDtypeStruct(v3.shape, v.dtype),
        ),
        grid=(bh, lk // bk),
        in_specs=[full_q_spec, k_block_spec, k_block_spec, full_q_spec, q_rows_spec, q_rows_spec],
        out_specs=(k_block_spec, k_block_spec),
        compiler_params=_PARALLEL_2D,
        interpret=interpret,
    )(q3, k3, v3, do3, lse3.reshape(bh, num_q, bq), delta3.reshape(bh, num_q, bq))

    # dq: grid over query blocks; each loops over the key blocks it attends.
    q_block_spec = pl.BlockSpec((None, bq, dim), lambda b, i: (b, i, 0))
    full_k_spec = pl.BlockSpec((None, lk, dim), lambda b, i: (b, 0, 0))
    row_spec = pl.BlockSpec((None, 1, bq), lambda b, i: (b, 0, i))
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, causal=causal, scale=scale, block_k=bk, offset=offset),
        out_shape=jax.ShapeDtypeStruct(q3.shape, q.dtype),
        grid=(bh, num_q),
        in_specs=[q_block_spec, full_k_spec, full_k_spec, q_block_spec, row_spec, row_spec],
        out_specs=q_block_spec,
        compiler_params=_PARALLEL_2D,
        interpret=interpret,
    )(q3, k3, v3, do3, lse3, delta3)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
