"""Reductions, scans, sort and topk against CPU PyTorch: values, dtypes (float32, bfloat16, int64, bool),
keepdim, out= variants, gradients, and that no op falls back to the CPU."""
import math

import pytest
import torch
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops


def tpu(t):
    return t.to("tpu")


def check(fn, *cpu_args, **kwargs):
    """Runs fn on CPU tensors and on their tpu copies; compares values and dtypes, and that it ran on tpu."""
    expected = fn(*cpu_args)
    torchtpu.reset_metrics()
    actual = fn(*[tpu(a) if isinstance(a, torch.Tensor) else a for a in cpu_args])
    assert fallback_ops() == {}
    if not isinstance(expected, tuple):
        expected, actual = (expected,), (actual,)
    for e, a in zip(expected, actual):
        assert a.device.type == "tpu"
        assert_close(a.cpu(), e, **kwargs)


def check_grad(fn, x, **kwargs):
    """Gradient of fn(x).sum() on tpu against CPU."""
    cpu = x.clone().requires_grad_()
    fn(cpu).sum().backward()
    dev = tpu(x).requires_grad_()
    fn(dev).sum().backward()
    assert_close(dev.grad.cpu(), cpu.grad, **kwargs)


def sample(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype == torch.int64:
        return torch.randint(-3, 4, shape)
    return torch.randn(shape).to(dtype)


FLOATS = [torch.float32, torch.bfloat16]
ALL = [torch.float32, torch.bfloat16, torch.int64, torch.bool]


# ---- prod, any/all, nansum ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_prod(dtype):
    x = sample((3, 4), dtype)
    if dtype.is_floating_point:
        x = x.float().uniform_(0.5, 1.5).to(dtype)
    check(torch.prod, x)
    check(lambda t: torch.prod(t, 1), x)
    check(lambda t: torch.prod(t, 0, keepdim=True), x)
    check(lambda t: torch.prod(t, -1, dtype=torch.float64), x)


def test_prod_grad():
    check_grad(lambda t: t.prod(1), torch.rand(3, 4) + 0.5)


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.int64, torch.uint8], ids=str)
@pytest.mark.parametrize("op", [torch.any, torch.all], ids=lambda f: f.__name__)
def test_any_all(op, dtype):
    x = (torch.rand(4, 5) > 0.3).to(dtype)
    check(op, x)
    check(lambda t: op(t, 1), x)
    check(lambda t: op(t, 0, keepdim=True), x)
    check(lambda t: op(t, dim=(0, 1)), x)
    check(lambda t: op(t, dim=()), x)  # an empty dim list reduces nothing
    check(lambda t: torch.stack([op(t, 1), op(t, 1)]), x)


def test_any_all_edge_rows():
    x = torch.tensor([[True, True], [False, False], [True, False]])
    check(lambda t: (t.any(1), t.all(1)), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_nansum(dtype):
    x = torch.randn(4, 5)
    x[0, 1] = x[2, 3] = float("nan")
    x = x.to(dtype)
    check(torch.nansum, x)
    check(lambda t: torch.nansum(t, 1, keepdim=True), x)


@pytest.mark.parametrize("dims", [[], ()], ids=["list", "tuple"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_nansum_nanmean_over_an_empty_dim_list_reduce_everything(dims, keepdim):
    # CPU reduces over every dim; PyTorch's meta kernel reduces over none (its shape failed to compile).
    x = torch.tensor([[1.0, float("nan")], [2.0, 3.0]])
    check(lambda t: torch.nansum(t, dims, keepdim=keepdim), x)
    check(lambda t: torch.nanmean(t, dims, keepdim=keepdim), x)
    check(lambda t: torch.nansum(t, dims), torch.tensor([[1, 2], [3, 4]], dtype=torch.int16))


# ---- var/std --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", [torch.var, torch.std, torch.var_mean, torch.std_mean], ids=lambda f: f.__name__)
def test_var_std(op, dtype):
    x = (torch.randn(4, 6) * 3 + 10).to(dtype)
    check(op, x)
    check(lambda t: op(t, 1), x)
    check(lambda t: op(t, (0, 1), keepdim=True), x)
    check(lambda t: op(t, 0, correction=0), x)
    check(lambda t: op(t, 1, correction=2.5), x)
    check(lambda t: op(t, 0, unbiased=False), x)


def test_var_short_rows():
    # N - correction <= 0 gives inf/NaN like CPU.
    check(lambda t: (torch.var(t, 1), torch.std(t, 1, correction=2)), torch.randn(3, 1),
          equal_nan=True)


@pytest.mark.parametrize("op", [torch.var, torch.std], ids=lambda f: f.__name__)
def test_var_std_grad(op):
    check_grad(lambda t: op(t, 1), torch.randn(3, 5))


# ---- logsumexp, norms -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_logsumexp(dtype):
    x = (torch.randn(4, 5) * 30).to(dtype)
    check(lambda t: torch.logsumexp(t, 1), x)
    check(lambda t: torch.logsumexp(t, (0, 1), keepdim=True), x)
    inf = float("inf")
    check(lambda t: torch.logsumexp(t, 1), torch.tensor([[-inf, -inf], [inf, 1.0], [0.0, -inf]]))
    check(lambda t: torch.logsumexp(t, 0), torch.arange(6))  # int input gives float


def test_logsumexp_grad():
    check_grad(lambda t: torch.logsumexp(t, 1), torch.randn(3, 5))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("ord", [2, 1, 0, math.inf, -math.inf, 3, 0.5, -1.5])
def test_vector_norm(ord, dtype):
    x = torch.randn(4, 5)
    x[1, 2] = 0
    x = x.to(dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    check(lambda t: torch.linalg.vector_norm(t, ord), x, **tol)
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=1, keepdim=True), x, **tol)
    check(lambda t: torch.linalg.vector_norm(t, ord, dim=(0, 1), dtype=torch.float32), x, **tol)


def test_norm_bf16_accumulates_in_float32():
    # 4096 ones: a bf16 running sum of squares would stall at 256.
    check(lambda t: torch.linalg.vector_norm(t), torch.ones(4096, dtype=torch.bfloat16))


def test_norm_method_and_grad():
    x = torch.randn(3, 4)
    check(lambda t: t.norm(), x)
    check(lambda t: t.norm(dim=1), x)
    check_grad(lambda t: torch.linalg.vector_norm(t, dim=1), x)


# ---- cumsum/cumprod -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("op", [torch.cumsum, torch.cumprod], ids=lambda f: f.__name__)
def test_cumulative(op, dtype):
    x = sample((3, 5), dtype)
    if dtype.is_floating_point and op is torch.cumprod:
        x = x.float().uniform_(0.5, 1.5).to(dtype)
    check(lambda t: op(t, 1), x)
    check(lambda t: op(t, 0), x)
    check(lambda t: op(t, -1, dtype=torch.float64), x)
    check(lambda t: op(t, 0), sample((), dtype))


def test_cumsum_long_and_inplace():
    check(lambda t: torch.cumsum(t, 0), torch.randn(300), rtol=1e-5, atol=1e-4)
    check(lambda t: t.clone().cumsum_(1), torch.randn(2, 7))
    out = tpu(torch.empty(0))
    torch.cumsum(tpu(torch.arange(6.0)), 0, out=out)
    assert_close(out.cpu(), torch.arange(6.0).cumsum(0))


@pytest.mark.parametrize("op", [torch.cumsum, torch.cumprod], ids=lambda f: f.__name__)
def test_cumulative_grad(op):
    check_grad(lambda t: op(t, 1), torch.rand(3, 5) + 0.5)


# ---- sort, argsort, topk --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort(dtype, descending):
    x = sample((4, 7), dtype)  # ints and bools have ties: stable order is checked too
    check(lambda t: torch.sort(t, stable=True, descending=descending), x)
    check(lambda t: torch.sort(t, dim=0, stable=True, descending=descending), x)
    check(lambda t: torch.argsort(t, stable=True, descending=descending), x)
    if dtype.is_floating_point:  # no ties: the unstable overload must agree too
        check(lambda t: torch.sort(t, descending=descending), torch.randperm(28).reshape(4, 7).to(dtype))


def test_sort_nan_and_signed_zero():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([3.0, nan, -inf, 0.0, -0.0, inf, nan, 1.0])
    for descending in (False, True):
        check(lambda t: torch.sort(t, stable=True, descending=descending), x, equal_nan=True)


def test_sort_out_and_scalar():
    values, indices = tpu(torch.empty(0)), tpu(torch.empty(0, dtype=torch.long))
    x = torch.randn(5)
    torch.sort(tpu(x), out=(values, indices))
    assert_close(values.cpu(), x.sort().values)
    assert_close(indices.cpu(), x.sort().indices)
    check(lambda t: torch.sort(t), torch.tensor(2.0))


def test_sort_grad():
    check_grad(lambda t: torch.sort(t, 1).values * torch.arange(5.0, device=t.device), torch.randn(3, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("largest", [True, False])
def test_topk(dtype, largest):
    x = torch.randperm(40).reshape(5, 8).to(dtype)  # distinct values: indices are unambiguous
    check(lambda t: torch.topk(t, 3, largest=largest), x)
    check(lambda t: torch.topk(t, 2, dim=0, largest=largest), x)
    check(lambda t: torch.topk(t, 8, largest=largest), x)


def test_topk_nan_and_grad():
    x = torch.tensor([1.0, float("nan"), 3.0, 2.0])
    check(lambda t: torch.topk(t, 2), x, equal_nan=True)
    check(lambda t: torch.topk(t, 2, largest=False), x)
    check_grad(lambda t: torch.topk(t, 2).values, torch.randn(4, 6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.bool],
                         ids=str)
def test_hash_tensor_matches_cpu_bits(dtype):
    x = (torch.randn(3, 4) * 100).to(dtype)
    for dims in ([], [1], [0, 1]):
        assert torch.equal(torch.hash_tensor(x.to("tpu"), dims).cpu(), torch.hash_tensor(x, dims))
    assert torch.equal(torch.hash_tensor(x.to("tpu"), [0], keepdim=True).cpu(), torch.hash_tensor(x, [0], keepdim=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin], ids=["cummax", "cummin"])
def test_cummax_cummin(fn, dtype):
    # Small integers make ties common: an equal value moves the index forward, as on CPU.
    x = torch.randint(-3, 4, (4, 9)).to(dtype)
    for dim in (0, 1, -1):
        check(lambda t: tuple(fn(t, dim)), x)


def test_cummax_cummin_nan_and_grad():
    nan = float("nan")
    x = torch.tensor([1.0, 3, 3, nan, 2, nan, 5])
    check(lambda t: tuple(torch.cummax(t, 0)), x, equal_nan=True)
    check(lambda t: tuple(torch.cummin(t, 0)), x, equal_nan=True)
    check(lambda t: tuple(torch.cummax(t, 0)), torch.tensor(2.0))
    check_grad(lambda t: torch.cummax(t, 1).values, torch.randn(3, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_aminmax_count_nonzero_trace(dtype):
    x = torch.randint(-2, 3, (4, 5)).to(dtype)
    check(lambda t: tuple(torch.aminmax(t)), x)
    check(lambda t: tuple(torch.aminmax(t, dim=1, keepdim=True)), x)
    check(lambda t: torch.count_nonzero(t, dim=(0, 1)), x)
    check(lambda t: torch.count_nonzero(t, dim=1), x)
    check(torch.trace, x)
    check(torch.trace, x.T[:3])


def test_trace_rejects_non_matrix_like_cpu():
    with pytest.raises(RuntimeError, match="expected a matrix"):
        torch.trace(torch.ones(2, 2, 2, device="tpu"))


SEGMENT_REDUCTIONS = ["sum", "mean", "max", "min", "prod"]


@pytest.mark.parametrize("reduce", SEGMENT_REDUCTIONS)
@pytest.mark.parametrize("initial", [None, 2.0])
def test_segment_reduce(reduce, initial):
    # An empty segment gives the initial value or the reduction's identity (mean: NaN).
    data = torch.tensor([[1.0, 2], [3, 4], [5, 0], [-1, 2], [3, 3], [0, 6], [2, 2]])
    lengths = torch.tensor([2, 0, 3, 2])
    offsets = torch.tensor([0, 2, 2, 5, 7])
    check(lambda d, l: torch.segment_reduce(d, reduce, lengths=l, initial=initial), data, lengths, equal_nan=True)
    check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, initial=initial), data, offsets, equal_nan=True)
    # Along axis 1, with lengths per row.
    rows = torch.tensor([[1.0, 2, 3, 4], [4, 5, 6, 0]])
    check(lambda d, l: torch.segment_reduce(d, reduce, lengths=l, axis=1, initial=initial), rows,
          torch.tensor([[1, 3], [2, 2]]), equal_nan=True)


@pytest.mark.parametrize("reduce", SEGMENT_REDUCTIONS)
def test_segment_reduce_grad(reduce):
    # Ties share a max/min gradient; a zero gets the product of the other elements.
    data = torch.tensor([3.0, 1, 3, 0, 2, 5, -1, 5, 0.5])
    lengths = torch.tensor([3, 3, 3])
    check_grad(lambda d: torch.segment_reduce(d, reduce, lengths=lengths.to(d.device)), data)
    check_grad(lambda d: torch.segment_reduce(d, reduce, lengths=lengths.to(d.device), initial=1.5), data)


def test_segment_reduce_bf16():
    data = torch.randn(6, 3).to(torch.bfloat16)
    lengths = torch.tensor([1, 3, 2])
    for reduce in SEGMENT_REDUCTIONS:
        check(lambda d, l: torch.segment_reduce(d, reduce, lengths=l), data, lengths, rtol=2e-2, atol=2e-2)


def test_segment_reduce_bad_lengths_raise_like_cpu():
    with pytest.raises(RuntimeError):
        torch.segment_reduce(torch.ones(4, 2, device="tpu"), "sum", lengths=torch.tensor([1, 2], device="tpu"), axis=1)


@pytest.mark.parametrize("fn", [lambda t: torch.amax(t, 1), lambda t: torch.amin(t, 0), torch.max, torch.min,
                                lambda t: tuple(torch.aminmax(t, dim=1)),
                                lambda t: torch.linalg.vector_norm(t, math.inf, 1),
                                lambda t: torch.linalg.vector_norm(t, -math.inf, 0)],
                         ids=["amax", "amin", "max", "min", "aminmax", "norm_inf", "norm_-inf"])
def test_max_and_min_reductions_propagate_nan(fn):
    # XLA's CPU compiler reduces with a fast max that keeps the accumulator where the element is NaN.
    x = torch.tensor([[1.0, float("nan"), 3.0], [float("inf"), 2.0, -1.0], [0.0, -2.0, float("nan")]])
    check(fn, x, equal_nan=True)


def test_topk_of_a_0_dim_tensor_with_k_0_gives_the_element():
    check(lambda t: tuple(torch.topk(t, 0)), torch.tensor(3.0))


@pytest.mark.parametrize("op", [torch.std, torch.var, torch.std_mean, torch.var_mean])
def test_std_and_var_of_integers_raise_cpus_error(op):
    x = torch.tensor([1, 2, 4])
    with pytest.raises(RuntimeError) as on_cpu:
        op(x)
    with pytest.raises(RuntimeError) as on_tpu:
        op(x.to("tpu"))
    assert str(on_tpu.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
