"""Fuzzing nn layers, tpu against CPU (tests/fuzz_support.py): pooling (1-3 spatial dims), convolution and
transposed convolution, norms, resampling (every interpolation mode, antialiased), padding, activations and
losses."""
import math
from functools import partial

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzz_support import (FLOATS, SPECIAL_VALUES, WELFORD_SAFE, Call, Input, batch, dtypes, family_test,
                          shapes, tensor, window)


# ---------------------------------------------------------------- nn: pooling, convolution, norms, resampling,
# activations, losses
def max_pool(spatial: int):
    fn = {1: F.max_pool1d, 2: F.max_pool2d}[spatial]
    def build(draw):
        shape = batch(draw, spatial, min_size=2)
        w = window(draw, min(shape[2:]))
        ceil_mode = draw(st.booleans())
        x = tensor(draw, shape, draw(dtypes(FLOATS)))
        return Call(lambda t: fn(t, **w, ceil_mode=ceil_mode), [x])
    return build


def avg_pool2d(draw):
    shape = batch(draw, 2, min_size=2)
    w = window(draw, min(shape[2:]))
    w.pop("dilation")
    options = dict(ceil_mode=draw(st.booleans()), count_include_pad=draw(st.booleans()))
    x = tensor(draw, shape, draw(dtypes(FLOATS)))
    return Call(lambda t: F.avg_pool2d(t, **w, **options), [x], tol=10)


def adaptive(fn):
    def build(draw):
        shape = batch(draw, 2)
        out = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        return Call(lambda t: fn(t, out), [tensor(draw, shape, draw(dtypes(FLOATS)))], tol=10)
    return build


def conv(spatial: int):
    fn = {1: F.conv1d, 2: F.conv2d}[spatial]
    def build(draw):
        groups = draw(st.integers(1, 2))
        n = draw(st.integers(1, 2))
        channels, out_channels = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
        sizes = [draw(st.integers(2, 5)) for _ in range(spatial)]
        w = window(draw, min(sizes))
        kernel = w.pop("kernel_size")
        dtype = draw(dtypes(FLOATS))
        x = tensor(draw, (n, channels, *sizes), dtype, layout="contiguous")
        weight = tensor(draw, (out_channels, channels // groups, *[kernel] * spatial), dtype, layout="contiguous")
        bias = tensor(draw, (out_channels,), dtype, layout="contiguous")
        return Call(lambda t, k, b: fn(t, k, b, groups=groups, **w), [x, weight, bias], tol=20)
    return build


def norm(kind: str):
    def build(draw):
        shape = batch(draw, 2)
        dtype = draw(dtypes(FLOATS))
        # Values whose squares overflow float32 (1e30, inf) excluded, as for std: CPU's statistics differ there.
        x = tensor(draw, shape, dtype, specials=WELFORD_SAFE)
        channels = shape[1]
        affine = [tensor(draw, (channels,), dtype, layout="contiguous", specials=WELFORD_SAFE) for _ in range(2)]
        if kind == "layer":
            affine = [tensor(draw, shape[-2:], dtype, layout="contiguous", specials=WELFORD_SAFE) for _ in range(2)]
            return Call(lambda t, w, b: F.layer_norm(t, shape[-2:], w, b), [x, *affine], tol=20)
        if kind == "group":
            return Call(lambda t, w, b: F.group_norm(t, 1, w, b), [x, *affine], tol=20)
        stats = [Input(torch.randn(channels)), Input(torch.rand(channels) + 0.5)]  # running mean, var
        return Call(lambda t, w, b, m, v: F.batch_norm(t, m, v, w, b, training=False), [x, *affine, *stats], tol=20)
    return build


def interpolate(mode: str):
    def build(draw):
        shape = batch(draw, 2)
        size = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
        align = {"align_corners": draw(st.booleans())} if mode == "bilinear" else {}
        # Finite values only: where a tap's weight is 0, CPU's kernels sometimes skip the tap and sometimes
        # multiply it, so a NaN or inf reaches different neighbours (excluded, see docs/reliability.md).
        x = tensor(draw, shape, draw(dtypes(FLOATS)), specials=(0.0, -0.0, 1e30))
        return Call(lambda t: F.interpolate(t, size=size, mode=mode, **align), [x], tol=10)
    return build


def pad(draw):
    mode = draw(st.sampled_from(["reflect", "replicate", "circular", "constant"]))
    shape = batch(draw, 2, min_size=2)
    # reflect needs each pad below its dim's size, circular at most the size
    limit = min(shape[2:]) - 1
    widths = tuple(draw(st.integers(0, limit)) for _ in range(4))
    return Call(lambda t: F.pad(t, widths, mode=mode), [tensor(draw, shape, draw(dtypes(FLOATS)))])


def activation(fn):
    def build(draw):
        return Call(fn, [tensor(draw, draw(shapes()), draw(dtypes(FLOATS)))], tol=10)
    return build


def loss(fn, target_kind: str = "same"):
    def build(draw):
        n, c = draw(st.integers(1, 4)), draw(st.integers(2, 5))
        dtype = draw(dtypes(FLOATS))
        reduction = draw(st.sampled_from(["mean", "sum", "none"]))
        x = tensor(draw, (n, c), dtype, specials=WELFORD_SAFE)
        if target_kind == "class":
            target = Input(torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(draw(st.integers(0, 99)))))
        elif target_kind == "probability":
            target = Input(torch.rand(n, c, generator=torch.Generator().manual_seed(draw(st.integers(0, 99)))).to(dtype))
        else:
            target = tensor(draw, (n, c), dtype, specials=WELFORD_SAFE)
        return Call(lambda t, y: fn(t, y, reduction=reduction), [x, target], tol=20)
    return build


NN = {
    "max_pool1d": max_pool(1), "max_pool2d": max_pool(2), "avg_pool2d": avg_pool2d,
    "adaptive_avg_pool2d": adaptive(F.adaptive_avg_pool2d), "adaptive_max_pool2d": adaptive(F.adaptive_max_pool2d),
    "conv1d": conv(1), "conv2d": conv(2),
    "layer_norm": norm("layer"), "group_norm": norm("group"), "batch_norm_eval": norm("batch"),
    "interpolate_nearest": interpolate("nearest"), "interpolate_bilinear": interpolate("bilinear"), "pad": pad,
    "gelu_tanh": activation(partial(F.gelu, approximate="tanh")), "silu": activation(F.silu),
    "hardswish": activation(F.hardswish), "elu": activation(F.elu), "softplus": activation(partial(F.softplus, beta=2)),
    "mish": activation(F.mish), "leaky_relu": activation(partial(F.leaky_relu, negative_slope=0.1)),
    "mse_loss": loss(F.mse_loss), "l1_loss": loss(F.l1_loss), "smooth_l1_loss": loss(F.smooth_l1_loss),
    "huber_loss": loss(F.huber_loss), "bce_with_logits": loss(F.binary_cross_entropy_with_logits, "probability"),
    "cross_entropy": loss(partial(F.cross_entropy, label_smoothing=0.1), "class"),
    "nll_loss": loss(F.nll_loss, "class"),
}


# ---------------------------------------------------------------- 3-d pooling
def selected(x, result):
    """(values, x at the returned indices) of a pooling with return_indices: an index counts positions in its
    (N, C) plane, and ties may pick any of them, so the indices are checked by what they select."""
    values, index = result
    return values, x.flatten(2).gather(2, index.flatten(2)).view_as(values)


def max_pool3d(draw):
    shape = batch(draw, 3, min_size=2)
    w = window(draw, min(shape[2:]))
    ceil_mode, with_indices = draw(st.booleans()), draw(st.booleans())
    specials = SPECIAL_VALUES
    x = tensor(draw, shape, draw(dtypes(FLOATS)), specials=specials)
    if with_indices:
        return Call(lambda t: selected(t, F.max_pool3d(t, **w, ceil_mode=ceil_mode, return_indices=True)), [x])
    return Call(lambda t: F.max_pool3d(t, **w, ceil_mode=ceil_mode), [x])


def avg_pool3d(draw):
    shape = batch(draw, 3, min_size=2)
    w = window(draw, min(shape[2:]))
    w.pop("dilation")
    options = dict(ceil_mode=draw(st.booleans()), count_include_pad=draw(st.booleans()),
                   divisor_override=draw(st.sampled_from([None, 1, 3])))
    x = tensor(draw, shape, draw(dtypes(FLOATS)))
    return Call(lambda t: F.avg_pool3d(t, **w, **options), [x], tol=10)


def adaptive3d(kind: str):
    def build(draw):
        shape = batch(draw, 3)
        out = tuple(draw(st.integers(1, 4)) for _ in range(3))
        x = tensor(draw, shape, draw(dtypes(FLOATS)))
        if kind == "avg":
            return Call(lambda t: F.adaptive_avg_pool3d(t, out), [x], tol=10)
        return Call(lambda t: selected(t, F.adaptive_max_pool3d(t, out, return_indices=True)), [x])
    return build


POOL3D = {"max_pool3d": max_pool3d, "avg_pool3d": avg_pool3d, "adaptive_avg_pool3d": adaptive3d("avg"),
          "adaptive_max_pool3d": adaptive3d("max")}


# ---------------------------------------------------------------- transposed convolution
def conv_transpose(spatial: int):
    """Per-dim stride, padding, output_padding and dilation; some combinations give an output size below 1
    (CPU raises, so must tpu)."""
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[spatial]
    def build(draw):
        groups = draw(st.integers(1, 2))
        n = draw(st.integers(1, 2))
        channels, out_channels = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
        sizes = [draw(st.integers(1, 4)) for _ in range(spatial)]
        kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
        stride = [draw(st.integers(1, 3)) for _ in range(spatial)]
        dilation = [draw(st.integers(1, 2)) for _ in range(spatial)]
        padding = [draw(st.integers(0, 2)) for _ in range(spatial)]
        # output_padding below stride or dilation: PyTorch's own bound
        output_padding = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)]
        options = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups,
                       dilation=dilation)
        dtype = draw(dtypes(FLOATS))
        x = tensor(draw, (n, channels, *sizes), dtype)
        # A finite weight: with several input channels, tpu's result is NaN where an infinite tap meets the
        # zeros between or around the inputs, which CPU never multiplies (excluded, see docs/reliability.md).
        weight = tensor(draw, (channels, out_channels // groups, *kernel), dtype, specials=(0.0, -0.0, 1e30))
        if draw(st.booleans()):
            return Call(lambda t, k: fn(t, k, **options), [x, weight], tol=20)
        bias = tensor(draw, (out_channels,), dtype)
        return Call(lambda t, k, b: fn(t, k, b, **options), [x, weight, bias], tol=20)
    return build


CONV_TRANSPOSE = {"conv_transpose1d": conv_transpose(1), "conv_transpose2d": conv_transpose(2),
                  "conv_transpose3d": conv_transpose(3)}


# ---------------------------------------------------------------- resampling: bicubic, antialiased and the rest
SPATIAL_DIMS = {"linear": 1, "trilinear": 3}
ALIGNS = ("linear", "bilinear", "bicubic", "trilinear")


def resample(mode: str, antialias: bool = False):
    """F.interpolate to a random size or by random scale factors (kept as given or recomputed)."""
    def build(draw):
        spatial = SPATIAL_DIMS.get(mode, 2)
        shape = batch(draw, spatial)
        if draw(st.booleans()):
            sizes = [draw(st.integers(1, 7)) for _ in range(spatial)]
            target = dict(size=sizes)
        else:
            scales = [draw(st.sampled_from([1.5, 0.5, 2.0, 0.75, 1.0, 3.0, 0.3])) for _ in range(spatial)]
            # A scale may leave a dim empty: the linear and cubic modes and nearest raise, area returns an
            # empty tensor, on both devices.
            sizes = [math.floor(n * scale) for n, scale in zip(shape[2:], scales)]
            target = dict(scale_factor=scales, recompute_scale_factor=draw(st.booleans()))
        if antialias and sizes[-1] == 1:
            # An output width of 2 or more: with width 1, CPU's antialiased kernel repeats its first output
            # row down the column (a CPU bug; excluded, see docs/reliability.md).
            target = dict(size=sizes[:-1] + [2])
        options = dict(mode=mode, **target, antialias=antialias)
        if mode in ALIGNS:
            options["align_corners"] = draw(st.booleans())
        # Finite values, as for bilinear above, and for the linear modes no 1e30: CPU computes a source index
        # through the float ratio of the sizes or the float reciprocal of the factor, so a tap whose weight
        # is exactly 0 gets ~1e-8, 1e22 times 1e30 (excluded, see docs/reliability.md).
        specials = (0.0, -0.0, 1e30) if mode in ("bicubic", "nearest", "nearest-exact", "area") else (0.0, -0.0)
        x = tensor(draw, shape, draw(dtypes(FLOATS)), specials=specials)
        return Call(lambda t: F.interpolate(t, **options), [x], tol=10)
    return build


RESAMPLE = {
    "bicubic": resample("bicubic"), "bicubic_antialias": resample("bicubic", antialias=True),
    "bilinear_antialias": resample("bilinear", antialias=True), "linear": resample("linear"),
    "trilinear": resample("trilinear"), "nearest_exact": resample("nearest-exact"), "area": resample("area"),
    "nearest_scaled": resample("nearest"),
}


FAMILIES = {"nn": NN, "pool3d": POOL3D, "conv_transpose": CONV_TRANSPOSE, "resample": RESAMPLE}

test_family = family_test(FAMILIES)
