"""RMS normalization as Pallas kernels (forward and backward).

Computes ``y = x * rsqrt(mean(x**2, -1) + eps) * weight`` in float32 and
returns it in ``x.dtype``. The leading dimensions of ``x`` are flattened into
rows and the kernels are blocked over rows with the whole hidden dimension H in
each block: the reduction is along H, so a row block is independent of every
other block, fits in VMEM, and the grid axis can be split across cores.
Row counts that the row block does not divide are zero-padded (a zero row
normalizes to zero and contributes nothing to the weight gradient) and the
padding is sliced off again.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# 256 rows x H keeps a block well inside the default scoped VMEM for the usual
# hidden sizes while being a multiple of the (8, 128) / bf16 (16, 128) tile.
_BLOCK_ROWS = 256

_PARALLEL_ROWS = pltpu.CompilerParams(dimension_semantics=("parallel",))


def _rows_layout(x):
    """Flatten ``x`` to [rows, H], pad rows to a block multiple; return block size."""
    hidden = x.shape[-1]
    x2 = x.reshape(-1, hidden)
    rows = x2.shape[0]
    block_rows = min(rows, _BLOCK_ROWS)
    padded = pl.cdiv(rows, block_rows) * block_rows
    if padded != rows:
        x2 = jnp.pad(x2, ((0, padded - rows), (0, 0)))
    return x2, rows, block_rows


def _inv_rms(x, eps):
    return jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def _forward_kernel(x_ref, w_ref, y_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    w = w_ref[...].astype(jnp.float32)
    y_ref[...] = (x * _inv_rms(x, eps) * w).astype(y_ref.dtype)


def _backward_kernel(x_ref, w_ref, g_ref, dx_ref, dw_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    w = w_ref[...].astype(jnp.float32)
    g = g_ref[...].astype(jnp.float32)
    r = _inv_rms(x, eps)
    n = x * r
    gn = g * w
    # d/dx of n = x * r: r * (gn - n * mean(gn * n)), since dr/dx = -r^3 x / H.
    dx_ref[...] = (r * (gn - n * jnp.mean(gn * n, axis=-1, keepdims=True))).astype(
        dx_ref.dtype
    )
    # One partial weight gradient per row block; summed outside the kernel so
    # the row grid axis stays parallel.
    dw_ref[...] = jnp.sum(g * n, axis=0, keepdims=True)


def rms_norm(x, weight, *, eps: float, interpret: bool):
    """RMS norm of ``x`` ([..., H]) scaled by ``weight`` ([H]); returns x.dtype."""
    hidden = x.shape[-1]
    x2, rows, block_rows = _rows_layout(x)
    row_spec = pl.BlockSpec((block_rows, hidden), lambda i: (i, 0))
    y = pl.pallas_call(
        functools.partial(_forward_kernel, eps=eps),
        out_shape=jax.ShapeDtypeStruct(x2.shape, x.dtype),
        grid=(x2.shape[0] // block_rows,),
        in_specs=[row_spec, pl.BlockSpec((1, hidden), lambda i: (0, 0))],
        out_specs=row_spec,
        compiler_params=_PARALLEL_ROWS,
        interpret=interpret,
    )(x2, weight.reshape(1, hidden))
    return y[:rows].reshape(x.shape)


def rms_norm_backward(x, weight, grad_out, *, eps: float, interpret: bool):
    """Gradients of :func:`rms_norm` w.r.t. ``x`` and ``weight`` given ``grad_out``."""
    hidden = x.shape[-1]
    x2, rows, block_rows = _rows_layout(x)
    g2, _, _ = _rows_layout(grad_out)
    num_blocks = x2.shape[0] // block_rows
    row_spec = pl.BlockSpec((block_rows, hidden), lambda i: (i, 0))
    dx, dw_partial = pl.pallas_call(
        functools.partial(_backward_kernel, eps=eps),
        out_shape=(
            jax.ShapeDtypeStruct(x2.shape, x.dtype),
            jax.ShapeDtypeStruct((num_blocks, 1, hidden), jnp.float32),
        ),
        grid=(num_blocks,),
        in_specs=[
            row_spec,
            pl.BlockSpec((1, hidden), lambda i: (0, 0)),
            row_spec,
        ],
        out_specs=(
            row_spec,
            pl.BlockSpec((None, 1, hidden), lambda i: (i, 0, 0)),
        ),
        compiler_params=_PARALLEL_ROWS,
        interpret=interpret,
    )(x2, weight.reshape(1, hidden), g2)
    grad_weight = jnp.sum(dw_partial, axis=(0, 1)).astype(weight.dtype)
    return dx[:rows].reshape(x.shape), grad_weight
