"""Pooling over 1-3 spatial dims, unfold/fold, max_unpool, interpolation, grid sampling, embedding_bag,
embedding_renorm, cdist/pdist and channel_shuffle (lowering/nn_pool.cc, upsample.cc, nn_distance.cc,
nn.cc) against CPU PyTorch: values, gradients, and no CPU fallback.

(Every grid_sample mode / padding / align_corners combination, in 2-d and 3-d, was also compared by hand
while writing the rules; the tests below cover each code path once to stay fast.)

Tolerances: float32 rtol=atol=1e-5 (interpolation weights and sums may round differently in the last
bit); bfloat16 rtol=atol=2e-2 (both sides round to bf16; tpu accumulates in float32). Integer results
(pooling indices, embedding_bag's max indices) and nearest-neighbour results are exact.
"""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

F32 = dict(rtol=1e-5, atol=1e-5)
BF16 = dict(rtol=2e-2, atol=2e-2)
DTYPES = [torch.float32, torch.bfloat16]


def check(fn, args, grad_args=(), dtype=torch.float32, tol=None):
    """fn on CPU and on tpu copies of args (floats cast to dtype): same outputs (every tensor of a tuple)
    and gradients of sum(out * weights) for args[i], i in grad_args; nothing fell back."""
    tol = tol or (F32 if dtype == torch.float32 else BF16)

    def prepare(device):
        prepared = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                a = (a.to(dtype) if a.is_floating_point() else a).detach().to(device)
                if i in grad_args:
                    a.requires_grad_()
            prepared.append(a)
        return prepared

    cpu_args, tpu_args = prepare("cpu"), prepare("tpu")
    expected = fn(*cpu_args)
    torchtpu.reset_metrics()
    actual = fn(*tpu_args)
    expected_all = expected if isinstance(expected, tuple) else (expected,)
    actual_all = actual if isinstance(actual, tuple) else (actual,)
    for e, a in zip(expected_all, actual_all):
        assert a.device.type == "tpu"
        assert_close(a.detach().cpu(), e.detach(), equal_nan=True, **tol)
    if grad_args:
        weights = torch.randn(expected_all[0].shape).to(expected_all[0].dtype)
        (expected_all[0] * weights).sum().backward()
        (actual_all[0] * weights.to("tpu")).sum().backward()
        for i in grad_args:
            assert_close(tpu_args[i].grad.cpu(), cpu_args[i].grad, **tol)
    assert not fallback_ops(), f"CPU fallbacks: {fallback_ops()}"


def randn(*shape):
    return torch.randn(shape)


# ---- pooling --------------------------------------------------------------------------------------------

POOLS = {
    "max3d": lambda x: F.max_pool3d(x, 3, 2, 1),
    "max3d_ceil_dilated": lambda x: F.max_pool3d(x, (2, 3, 2), (2, 1, 2), (1, 1, 0), dilation=(1, 2, 1), ceil_mode=True),
    "avg3d": lambda x: F.avg_pool3d(x, 3, 2, 1),
    "avg3d_ceil_exclude_pad": lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg3d_divisor": lambda x: F.avg_pool3d(x, 2, divisor_override=3),
    "adaptive_avg3d": lambda x: F.adaptive_avg_pool3d(x, (3, 2, 4)),
    "adaptive_max3d": lambda x: F.adaptive_max_pool3d(x, (3, 2, 4)),
    "adaptive_max2d": lambda x: F.adaptive_max_pool2d(x.flatten(1, 2), (4, 3)),
    "adaptive_max1d": lambda x: F.adaptive_max_pool1d(x.flatten(1, 3), 5),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pool(name):
    check(POOLS[name], [randn(2, 3, 7, 6, 5)], (0,))


@pytest.mark.parametrize("name", ["max3d", "avg3d_ceil_exclude_pad", "adaptive_max3d"])
def test_pool_bf16_unbatched(name):
    # avg_pool3d has no bfloat16 CPU kernel for some paths; max and adaptive max compare exactly.
    dtype = torch.float32 if name.startswith("avg") else torch.bfloat16
    check(POOLS[name], [randn(3, 7, 6, 5)], dtype=dtype)


@pytest.mark.parametrize("pool", ["max_pool3d", "adaptive_max_pool3d", "adaptive_max_pool2d"])
def test_max_pool_indices_first_max_and_nan(pool):
    # Ties (rounded values) must pick the first maximum; a NaN wins its window.
    x = (randn(2, 2, 6, 7, 5) * 2).round()
    x[0, 0, 1, 1, 1] = float("nan")
    if pool == "max_pool3d":
        fn = lambda t: F.max_pool3d(t, 2, 2, 1, return_indices=True)  # noqa: E731
    elif pool == "adaptive_max_pool3d":
        fn = lambda t: F.adaptive_max_pool3d(t, (4, 3, 2), return_indices=True)  # noqa: E731
    else:
        fn = lambda t: F.adaptive_max_pool2d(t.flatten(1, 2), (5, 3), return_indices=True)  # noqa: E731
    expected, actual = fn(x), fn(x.to("tpu"))
    assert_close(actual[0].cpu(), expected[0], equal_nan=True)
    assert torch.equal(actual[1].cpu(), expected[1])


@pytest.mark.parametrize("dims", [2, 3])
def test_fractional_max_pool(dims):
    # The random samples are passed in, so both sides pool the same windows.
    pool = getattr(F, f"fractional_max_pool{dims}d")
    x = (randn(2, 3, *(9, 8, 7)[:dims]) * 2).round()  # ties: the first maximum must win
    samples = torch.rand(2, 3, dims)
    fn = lambda t, s: pool(t, (2, 3, 2)[:dims], output_size=(4, 3, 5)[:dims], return_indices=True,  # noqa: E731
                           _random_samples=s)
    check(fn, [x, samples])
    check(fn, [x, samples], dtype=torch.bfloat16)
    if dims == 2:  # fractional_max_pool3d_backward has no meta kernel and falls back
        check(lambda t, s: fn(t, s)[0], [x, samples], (0,))


def test_unfold_fold():
    x = randn(2, 3, 7, 6)
    check(lambda t: F.unfold(t, (3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1)), [x], (0,))
    cols = randn(2, 3 * 4, 20)
    check(lambda c: F.fold(c, (7, 8), (2, 2), padding=1, stride=2), [cols], (0,))
    check(lambda t: F.unfold(t, 2), [randn(3, 5, 4)], (0,), dtype=torch.bfloat16)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_max_unpool(dims):
    pool = getattr(F, f"max_pool{dims}d")
    unpool = getattr(F, f"max_unpool{dims}d")
    x = randn(2, 3, *[6, 5, 4][:dims])
    out, indices = pool(x, 2, return_indices=True)
    check(lambda o, i: unpool(o, i, 2, output_size=x.shape[2:]), [out, indices], (0,))


# ---- interpolation --------------------------------------------------------------------------------------

INTERPOLATIONS = [
    ("nearest", (2, 3, 9), dict(scale_factor=1.7)),
    ("nearest", (2, 3, 5, 6), dict(size=(10, 4))),
    ("nearest", (1, 2, 3, 4, 5), dict(scale_factor=2)),
    ("nearest-exact", (2, 3, 5, 6), dict(scale_factor=0.6)),
    ("nearest-exact", (1, 2, 3, 4, 5), dict(size=(4, 7, 3))),
    ("linear", (2, 3, 9), dict(scale_factor=1.7)),
    ("linear", (2, 3, 9), dict(size=4, align_corners=True)),
    ("bilinear", (2, 3, 5, 6), dict(size=(11, 4))),
    ("bilinear", (2, 3, 5, 6), dict(scale_factor=2.5, align_corners=True)),
    ("bicubic", (2, 3, 5, 6), dict(size=(9, 13))),
    ("bicubic", (2, 3, 5, 6), dict(scale_factor=0.7, align_corners=True)),
    ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=(1.5, 2, 0.8))),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(5, 5, 5), align_corners=True)),
]


@pytest.mark.parametrize("mode,shape,kwargs", INTERPOLATIONS, ids=lambda v: str(v))
def test_interpolate(mode, shape, kwargs):
    check(lambda x: F.interpolate(x, mode=mode, **kwargs), [randn(*shape)], (0,))


@pytest.mark.parametrize("mode,shape,kwargs", INTERPOLATIONS[1::3], ids=lambda v: str(v))
def test_interpolate_bf16(mode, shape, kwargs):
    check(lambda x: F.interpolate(x, mode=mode, **kwargs), [randn(*shape)], dtype=torch.bfloat16)


@pytest.mark.parametrize("mode,shape,kwargs", [INTERPOLATIONS[5], INTERPOLATIONS[9], INTERPOLATIONS[11]],
                         ids=lambda v: str(v))
def test_interpolate_bf16_weights_like_cpu(mode, shape, kwargs):
    # CPU's linear1d, bicubic2d and trilinear3d kernels round their weights to bfloat16: matched bit for bit.
    check(lambda x: F.interpolate(x, mode=mode, **kwargs), [randn(*shape)], dtype=torch.bfloat16,
          tol=dict(rtol=0, atol=0))


@pytest.mark.parametrize("kwargs", [dict(size=(3, 13)), dict(scale_factor=0.37, align_corners=True)])
def test_interpolate_antialias(kwargs):
    check(lambda x: F.interpolate(x, mode="bilinear", antialias=True, **kwargs), [randn(2, 3, 11, 9)], (0,))


def test_interpolate_keeps_inf():
    # Gathered taps, not a dense weight matrix: an inf reaches only the outputs that read it.
    x = randn(1, 1, 4, 4)
    x[0, 0, 0, 0] = float("inf")
    check(lambda t: F.interpolate(t, size=(8, 8), mode="bilinear"), [x])
    check(lambda t: F.interpolate(t, scale_factor=3, mode="nearest"), [x])


def test_interpolate_bad_size_raises():
    x = randn(1, 1, 4, 4)
    with pytest.raises(RuntimeError, match="greater than 0"):
        F.interpolate(x, size=(0, 3), mode="bilinear")
    with pytest.raises(RuntimeError, match="greater than 0"):
        F.interpolate(x.to("tpu"), size=(0, 3), mode="bilinear")


# ---- grid sampling --------------------------------------------------------------------------------------


# One case per code path (see the module docstring): the bicubic backward alone compiles for seconds.
@pytest.mark.parametrize("mode,padding_mode,align_corners", [
    ("bilinear", "zeros", False), ("bilinear", "reflection", True), ("nearest", "border", False),
    ("bicubic", "reflection", False)])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    grid = torch.rand(2, 4, 3, 2) * 2.6 - 1.3  # reaches outside the input
    fn = lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)  # noqa: E731
    check(fn, [randn(2, 3, 5, 6), grid], (0, 1))


@pytest.mark.parametrize("mode,padding_mode", [("bilinear", "border"), ("nearest", "reflection")])
def test_grid_sample_3d(mode, padding_mode):
    grid = torch.rand(2, 3, 2, 4, 3) * 2.6 - 1.3
    fn = lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=False)  # noqa: E731
    check(fn, [randn(2, 3, 4, 5, 3), grid], (0, 1))


def test_grid_sample_bf16_and_input_grad_only():
    grid = torch.rand(1, 4, 4, 2) * 2 - 1
    fn = lambda x, g: F.grid_sample(x, g, align_corners=False)  # noqa: E731
    check(fn, [randn(1, 2, 5, 5), grid], dtype=torch.bfloat16)
    check(fn, [randn(1, 2, 5, 5), grid], (0,))


# ---- embedding_bag, distances, channel_shuffle ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag(mode, padding_idx, include_last_offset):
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 0, 2, 2])
    offsets = torch.tensor([0, 3, 3, 6, 8] + ([10] if include_last_offset else []))  # bag 1 is empty
    weight = randn(6, 3)
    weight[4, 1] = float("nan")  # max keeps a NaN only when it comes first
    weight[1, 0] = float("nan")

    def fn(w, i, o):
        return F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx, include_last_offset=include_last_offset)

    check(fn, [weight, indices, offsets], (0,))


def test_embedding_bag_per_sample_weights_and_scale_grad_by_freq():
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 0, 2, 2])
    offsets = torch.tensor([0, 3, 3, 6, 8])
    fn = lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p)  # noqa: E731
    check(fn, [randn(6, 3), indices, offsets, torch.rand(10)], (0, 3))
    # CPU divides the k-th distinct index's gradient by the count of the k-th smallest index; reproduced.
    fn = lambda w, i, o: F.embedding_bag(i, w, o, mode="mean", scale_grad_by_freq=True)  # noqa: E731
    check(fn, [randn(6, 3), indices, offsets], (0,))
    check(lambda w, i, o: F.embedding_bag(i, w, o), [randn(6, 3), indices, offsets], dtype=torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_max_norm(dtype):
    # embedding_renorm_: referenced rows above max_norm are scaled in place, bit for bit as on CPU.
    indices = torch.tensor([1, 2, 4, 4, 0, 2])
    for norm_type in (1.0, 2.0, float("inf")):
        fn = lambda w, i: (F.embedding(i, w, max_norm=1.5, norm_type=norm_type), w)  # noqa: E731
        check(fn, [randn(6, 4) * 2, indices], dtype=dtype, tol=dict(rtol=0, atol=0))
    fn = lambda w, i, o: F.embedding_bag(i, w, o, max_norm=1.0)  # noqa: E731
    check(fn, [randn(6, 4) * 2, indices, torch.tensor([0, 2])], dtype=dtype)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 3.0, float("inf")])
def test_cdist_pdist(p):
    a, b = randn(2, 1, 4, 3), randn(3, 5, 3)
    b[0, 0] = a[0, 0, 0]  # a zero distance: its gradient is 0
    check(lambda x, y: torch.cdist(x, y, p=p, compute_mode="donot_use_mm_for_euclid_dist"), [a, b], (0, 1),
          tol=dict(rtol=1e-4, atol=1e-4))
    x = randn(6, 3)
    x[3] = x[1]
    check(lambda t: F.pdist(t, p=p), [x], (0,), tol=dict(rtol=1e-4, atol=1e-4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_channel_shuffle(dtype):
    check(lambda x: F.channel_shuffle(x, 3), [randn(2, 6, 4, 3)], (0,) if dtype == torch.float32 else (), dtype)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool_index_of_an_all_minus_inf_window_is_its_first_element(ceil_mode):
    # Padding is -inf too; the index must point at the window's first input element, as on CPU.
    x = torch.full((1, 2, 5, 5), float("-inf"))
    x[0, 1, 2, 2] = 1.0
    fn = lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=ceil_mode, return_indices=True)  # noqa: E731
    expected, actual = fn(x), fn(x.to("tpu"))
    assert_close(actual[0].cpu(), expected[0])
    assert torch.equal(actual[1].cpu(), expected[1])


# ---- integer images ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, antialias, align_corners", [
    ("bilinear", False, False), ("bilinear", False, True), ("bilinear", True, False),
    ("bicubic", False, False), ("bicubic", False, True), ("nearest", False, None), ("nearest-exact", False, None)])
@pytest.mark.parametrize("size", [(4, 5), (11, 13)])
def test_uint8_images_interpolate_as_on_cpu(mode, antialias, align_corners, size):
    # CPU resamples uint8 one dim at a time in fixed point: tpu (float32 weights, rounding and clamping after
    # each dim) lands within 1 of it; the nearest modes copy and are exact.
    image = torch.randint(0, 256, (2, 3, 6, 7), dtype=torch.uint8)
    for layout in (torch.contiguous_format, torch.channels_last):
        x = image.contiguous(memory_format=layout)
        expected = F.interpolate(x, size=size, mode=mode, antialias=antialias, align_corners=align_corners)
        actual = F.interpolate(x.to("tpu"), size=size, mode=mode, antialias=antialias, align_corners=align_corners)
        assert actual.dtype == torch.uint8 and actual.stride() == expected.stride()
        assert (actual.cpu().int() - expected.int()).abs().max() <= (0 if "nearest" in mode else 1)
    assert fallback_ops() == {}


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64])
def test_integer_max_pool_is_exact(dtype):
    x = torch.randint(-100 if dtype.is_signed else 0, 100, (2, 3, 7, 8)).to(dtype)
    for kwargs in (dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)):
        expected, indices = F.max_pool2d(x, return_indices=True, **kwargs)
        actual, actual_indices = F.max_pool2d(x.to("tpu"), return_indices=True, **kwargs)
        assert torch.equal(actual.cpu(), expected) and torch.equal(actual_indices.cpu(), indices)


@pytest.mark.parametrize("op", [
    lambda t: F.interpolate(t.float().to(torch.int32), size=(3, 4), mode="bilinear"),
    lambda t: F.interpolate(t[:, :, 0], size=5, mode="linear"),
    lambda t: F.interpolate(t, size=(3, 4), mode="area"),
    lambda t: F.adaptive_avg_pool2d(t, 3),
    lambda t: F.adaptive_max_pool2d(t, 3),
    lambda t: F.avg_pool2d(t.to(torch.int32), 2),
], ids=["bilinear int32", "linear uint8", "area uint8", "adaptive_avg uint8", "adaptive_max uint8",
        "avg_pool int32"])
def test_integer_inputs_cpu_refuses_raise_cpus_error(op):
    x = torch.randint(0, 256, (1, 2, 6, 8), dtype=torch.uint8)
    with pytest.raises(NotImplementedError) as on_cpu:
        op(x)
    with pytest.raises(NotImplementedError) as on_tpu:
        op(x.to("tpu"))
    assert str(on_tpu.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
