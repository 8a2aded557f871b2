"""Indexing and copy-producing shape ops (lowering/indexing.cc, lowering/shape.cc), index_reduce and
take/put against CPU PyTorch:
values, dtypes, in-place variants, gradients through autograd, and no CPU fallback for any of them."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torch.testing import assert_close
from torchtpu.metrics import fallback_ops

DTYPES = [torch.float32, torch.int64, torch.bool]


def tpu(t):
    return t.to("tpu")


def to_tpu(value):
    if isinstance(value, torch.Tensor):
        return tpu(value)
    if isinstance(value, (list, tuple)):
        return type(value)(to_tpu(v) for v in value)
    return value


def sample(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-50, 50, shape, dtype=dtype)


def check(fn, *cpu_args):
    """fn on CPU arguments and on their tpu copies: same values and dtype, and nothing fell back."""
    expected = fn(*cpu_args)
    torchtpu.reset_metrics()
    actual = fn(*to_tpu(cpu_args))
    assert fallback_ops() == {}
    assert actual.device.type == "tpu"
    assert actual.dtype == expected.dtype
    assert_close(actual.cpu(), expected, equal_nan=True)


def check_grad(fn, *cpu_args):
    """Gradients of sum(fn(x, ...) * weights) with respect to the first (float) argument."""
    x = cpu_args[0].detach().requires_grad_()
    out = fn(x, *cpu_args[1:])
    weights = torch.randn(out.shape)
    (out * weights).sum().backward()
    torchtpu.reset_metrics()
    xt = tpu(cpu_args[0]).detach().requires_grad_()
    out_t = fn(xt, *to_tpu(cpu_args[1:]))
    (out_t * tpu(weights)).sum().backward()
    assert fallback_ops() == {}
    assert_close(out_t.detach().cpu(), out.detach())
    assert_close(xt.grad.cpu(), x.grad)


# ---- shape.cc ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dtype, dim):
    check(lambda a, b, c: torch.cat([a, b, c], dim), sample((2, 3, 4), dtype), sample((2, 3, 4), dtype),
          sample((2, 3, 4), dtype))


def test_cat_promotes_and_skips_legacy_empty():
    check(lambda a, b: torch.cat([a, b], 0), sample((2, 3), torch.int64), sample((1, 3), torch.float32))
    check(lambda a, b, c: torch.cat([a, b, c], 1), sample((2, 3), torch.float32), torch.empty(0),
          sample((2, 2), torch.float32))
    check(lambda a, b: torch.cat([a, b], 0), sample((0, 3), torch.float32), sample((2, 3), torch.float32))


def test_cat_out_and_grad():
    check(lambda a, b: torch.cat([a, b], 1, out=torch.empty(0, device=a.device)), torch.randn(2, 3),
          torch.randn(2, 1))
    check_grad(lambda x: torch.cat([x, x * 2, x[:, :1]], 1), torch.randn(3, 4))


@pytest.mark.parametrize("pad", [(1, 2), (0, 1, 2, 0), (-1, 2), (1, -2, -1, 1), (1, 1, 1, 1, 1, 1)])
def test_constant_pad_nd(pad):
    check(lambda x: F.pad(x, pad, value=1.5), torch.randn(3, 4, 5))
    check(lambda x: F.pad(x, pad), sample((3, 4, 5), torch.int64))
    check_grad(lambda x: F.pad(x, pad, value=-2.0), torch.randn(3, 4, 5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip(dtype):
    check(lambda x: x.flip(0), sample((3, 4, 5), dtype))
    check(lambda x: x.flip(-1, 1), sample((3, 4, 5), dtype))
    check(lambda x: x.flip(0), sample((), dtype))


def test_flip_grad():
    check_grad(lambda x: x.flip(1, 0), torch.randn(3, 4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_roll(dtype):
    x = sample((3, 4, 5), dtype)
    check(lambda x: x.roll(2), x)
    check(lambda x: x.roll(-7), x)
    check(lambda x: x.roll(1, 0), x)
    check(lambda x: x.roll((2, -1), (-1, 1)), x)
    check(lambda x: x.roll(9, 2), x)


def test_roll_grad():
    check_grad(lambda x: x.roll((1, 2), (0, 1)), torch.randn(3, 4))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("diagonal", [0, 1, -1, 5, -5])
def test_tril_triu(dtype, diagonal):
    x = sample((2, 4, 5), dtype)
    check(lambda x: x.tril(diagonal), x)
    check(lambda x: x.triu(diagonal), x)


def test_tril_triu_inplace_and_grad():
    check(lambda x: x.clone().tril_(1), torch.randn(4, 4))
    check_grad(lambda x: x.triu(1), torch.randn(4, 5))
    check_grad(lambda x: x.tril(-1), torch.randn(4, 5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeat(dtype):
    check(lambda x: x.repeat(2, 3), sample((2, 3), dtype))
    check(lambda x: x.repeat(2, 1, 3), sample((2, 3), dtype))
    check(lambda x: x.repeat(0, 2), sample((2, 3), dtype))


def test_repeat_grad():
    check_grad(lambda x: x.repeat(3, 1, 2), torch.randn(2, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_scatter(dtype):
    x = sample((6, 7), dtype)
    check(lambda x, s: torch.slice_scatter(x, s, 0, 1, 4), x, sample((3, 7), dtype))
    check(lambda x, s: torch.slice_scatter(x, s, 1, 1, 7, 2), x, sample((6, 3), dtype))
    check(lambda x, s: torch.slice_scatter(x, s, 1, -3, None, 1), x, sample((6, 3), dtype))
    check(lambda x, s: torch.slice_scatter(x, s, 0, 5, 2), x, sample((0, 7), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_select_scatter(dtype):
    x = sample((4, 5), dtype)
    check(lambda x, s: torch.select_scatter(x, s, 0, 2), x, sample((5,), dtype))
    check(lambda x, s: torch.select_scatter(x, s, 1, -1), x, sample((4,), dtype))


@pytest.mark.parametrize("offset", [0, 1, -2, 3])
def test_diagonal_scatter(offset):
    x = torch.randn(4, 5)
    n = torch.diagonal(x, offset).shape[-1]
    check(lambda x, s: torch.diagonal_scatter(x, s, offset), x, torch.randn(n))
    y = torch.randn(3, 4, 5)
    n = torch.diagonal(y, offset, 2, 0).shape[-1]
    check(lambda y, s: torch.diagonal_scatter(y, s, offset, 2, 0), y, torch.randn(4, n))


def test_scatter_family_grad():
    src = torch.randn(2, 7)
    check_grad(lambda x, s: torch.slice_scatter(x, s, 0, 1, 5, 2), torch.randn(6, 7), src)
    check_grad(lambda x, s: torch.select_scatter(x, s, 1, 3), torch.randn(6, 7), torch.randn(6))
    check_grad(lambda x, s: torch.diagonal_scatter(x, s, 1), torch.randn(4, 5), torch.randn(4))


def test_as_strided_scatter_decomposes():
    # No rule: PyTorch's decomposition (clone + as_strided + copy_) runs on tpu and is exact for any layout.
    check(lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (4, 1), 1), torch.randn(3, 4), torch.randn(2, 2))
    check(lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 3), 1), torch.randn(3, 4).t(), torch.randn(2, 2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_fill(dtype):
    x = sample((3, 4), dtype)
    mask = torch.rand(3, 4) > 0.5
    value = True if dtype == torch.bool else 7
    check(lambda x, m: x.masked_fill(m, value), x, mask)
    check(lambda x, m: x.masked_fill(m, value), x, mask[0])  # mask broadcasts
    check(lambda x, m, v: x.masked_fill(m, v), x, mask, torch.tensor(value, dtype=dtype))
    check(lambda x, m: x.clone().masked_fill_(m, value), x, mask)


def test_masked_fill_on_view_and_grad():
    def fn(x, m):
        y = x.clone()
        y[1:].masked_fill_(m, -1.0)
        return y
    check(fn, torch.randn(4, 3), torch.rand(3, 3) > 0.5)
    check(lambda x, m: x.masked_fill(m, float("-inf")), torch.randn(3, 3), torch.rand(3, 3) > 0.5)
    check_grad(lambda x, m: x.masked_fill(m, 2.0), torch.randn(3, 4), torch.rand(3, 4) > 0.5)


# ---- indexing.cc ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(dtype, dim):
    x = sample((4, 5, 6), dtype)
    index = torch.tensor([3, 1, 0, 0])  # PyTorch rejects negative indices here (index/index_put wrap them)
    check(lambda x, i: x.index_select(dim, i), x, index)
    check(lambda x, i: x.index_select(dim, i), x, index.int())
    check(lambda x, i: x.index_select(dim, i), x, torch.tensor(2))
    check(lambda x, i: x.index_select(dim, i), x, torch.tensor([], dtype=torch.long))


def test_index_select_grad():
    check_grad(lambda x, i: x.index_select(1, i), torch.randn(3, 5), torch.tensor([4, 0, 4, 1]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dtype, dim):
    x = sample((4, 5, 6), dtype)
    size = x.shape[dim]
    index = torch.randint(0, size, (3, 4, 2))
    check(lambda x, i: torch.gather(x, dim, i), x, index)
    shape = [1, 5, 6]
    shape[dim] = 3
    check(lambda x, i: torch.take_along_dim(x, i, dim), x, torch.randint(0, size, shape))  # broadcasts


def test_gather_grad():
    check_grad(lambda x, i: torch.gather(x, 1, i), torch.randn(3, 5), torch.randint(0, 5, (3, 7)))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter(dtype):
    x = sample((4, 6), dtype)
    src = sample((4, 6), dtype)
    # Distinct targets per row: scatter with duplicates is nondeterministic in PyTorch too.
    index = torch.stack([torch.randperm(6)[:3] for _ in range(3)])
    check(lambda x, i, s: x.scatter(1, i, s), x, index, src)
    check(lambda x, i: x.scatter(1, i, 5), x, index)
    check(lambda x, i, s: x.clone().scatter_(1, i, s), x, index, src)
    dup = torch.randint(0, 4, (5, 6))
    check(lambda x, i, s: x.scatter_add(0, i, s), x, dup, sample((5, 6), dtype))
    check(lambda x, i, s: x.scatter(0, i, s, reduce="add"), x, dup, sample((5, 6), dtype))
    check(lambda x, i, s: x.scatter(0, i, s, reduce="multiply"), x, dup, sample((5, 6), dtype))
    check(lambda x, i: x.scatter(0, i, 2, reduce="multiply"), x, dup)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(dtype, reduce, include_self):
    x = sample((5, 4), dtype)
    src = sample((6, 4), dtype)
    index = torch.randint(0, 3, (6, 4))  # rows 3 and 4 receive nothing
    check(lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self), x, index, src)


def test_scatter_grad():
    index = torch.stack([torch.randperm(6)[:3] for _ in range(4)])
    check_grad(lambda x, i, s: x.scatter(1, i, s), torch.randn(4, 6), index, torch.randn(4, 3))
    check_grad(lambda s, x, i: x.scatter_add(1, i, s), torch.randn(4, 3), torch.randn(4, 6), index)


INDEX_CASES = {
    "rows": lambda x, i, j: x[i],
    "columns": lambda x, i, j: x[:, i],
    "last": lambda x, i, j: x[..., j],
    "pair_broadcast": lambda x, i, j: x[i.view(-1, 1), j % 4],
    "adjacent_middle": lambda x, i, j: x[:, i, j],
    "separated": lambda x, i, j: x[i, :, j],
    "scalar_index": lambda x, i, j: x[i[0], :, j],
    "matrix_index": lambda x, i, j: x[:, i.view(2, 2)],
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_index(dtype, case):
    i = torch.tensor([2, -1, 0, 2])
    j = torch.tensor([4, 0, -5, 1])
    check(INDEX_CASES[case], sample((3, 4, 5), dtype), i, j)


def test_index_cpu_indices_and_int32():
    x = torch.randn(3, 4)
    torchtpu.reset_metrics()
    actual = tpu(x)[torch.tensor([1, 1, -3])]  # CPU index tensor on a tpu tensor, as CUDA allows
    assert fallback_ops() == {}
    assert_close(actual.cpu(), x[torch.tensor([1, 1, -3])])
    check(lambda x, i: x[:, i], x, torch.tensor([3, 0], dtype=torch.int32))


@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_index_grad_accumulates_duplicates(case):
    i = torch.tensor([2, -1, 0, 2])
    j = torch.tensor([4, 0, -5, 4])
    check_grad(INDEX_CASES[case], torch.randn(3, 4, 5), i, j)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(dtype, accumulate):
    x = sample((3, 4, 5), dtype)
    i = torch.tensor([2, -1, 0])
    j = torch.tensor([4, 0, -5])
    check(lambda x, i, v: x.index_put((i,), v, accumulate), x, i, sample((3, 4, 5), dtype))
    check(lambda x, i, v: torch.ops.aten.index_put(x, [None, i], v, accumulate), x, i, sample((3, 1, 5), dtype))
    check(lambda x, i, j, v: torch.ops.aten.index_put(x, [i, None, j], v, accumulate), x, i, j,
          sample((3, 4), dtype))
    check(lambda x, i, j, v: x.index_put((i.view(3, 1), j % 4), v, accumulate), x, i, j,
          sample((3, 3, 5), dtype))
    check(lambda x, i, v: x.index_put((i,), v, accumulate), x, i, sample((), dtype))
    check(lambda x, i, v: x.clone().index_put_((i,), v, accumulate), x, i, sample((5,), dtype))


def test_index_put_accumulates_duplicates():
    x = torch.randn(5, 3)
    i = torch.tensor([1, 1, -4, 0, 1])
    check(lambda x, i, v: x.index_put((i,), v, accumulate=True), x, i, torch.randn(5, 3))
    check(lambda x, i, v: x.index_put((i,), v, accumulate=True), x.long(), i, torch.randint(0, 9, (5, 3)))


def test_setitem():
    def assign(x, i, v):
        y = x.clone()
        y[i] = v
        y[:, i[1:]] += 1
        y[1:][i[1:2]] = -v[0]  # through a view
        return y
    check(assign, torch.randn(4, 3), torch.tensor([3, 0, -1]), torch.randn(3, 3))
    check_grad(lambda x, i, v: x.index_put((i,), v, accumulate=True), torch.randn(4, 3), torch.tensor([1, 1]),
               torch.randn(2, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_setitem_bool_mask_is_static_select(dtype):
    # x[mask] = v is static when v does not depend on how many elements the mask selects.
    x = sample((3, 4, 5), dtype)
    value = sample((), dtype)

    def assign(x, m, v):
        y = x.clone()
        y[m] = v
        return y
    check(assign, x, torch.rand(3, 4, 5) > 0.5, value)
    check(assign, x, torch.rand(3, 4) > 0.5, sample((5,), dtype))
    check(lambda x, m, v: torch.ops.aten.index_put(x, [None, m], v), x, torch.rand(4, 5) > 0.5, value)
    if dtype != torch.bool:
        check(lambda x, m, v: x.index_put((m,), v, accumulate=True), x, torch.rand(3, 4) > 0.5, sample((1, 5), dtype))


def test_bool_mask_data_dependent_shapes(metrics):
    x_cpu = torch.randn(3, 4)
    x = tpu(x_cpu)
    mask = x > 0
    # The result's size depends on the data: the device counts, the host reads the count, the device
    # selects (tests/test_data_dependent.py has the rest).
    assert_close(x[mask].cpu(), x_cpu[x_cpu > 0])
    x[mask] = tpu(torch.arange(12.0))[: int(mask.sum())]
    x_cpu[x_cpu > 0] = torch.arange(12.0)[: int((x_cpu > 0).sum())]
    assert_close(x.cpu(), x_cpu)
    assert fallback_ops() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_add_copy_fill(dtype):
    x = sample((4, 5), dtype)
    index = torch.tensor([1, 4, 1])
    source = sample((4, 3), dtype)
    alpha = 2.5 if dtype.is_floating_point else 3
    check(lambda x, i, s: x.index_add(1, i, s), x, index, source)
    check(lambda x, i, s: x.index_add(1, i, s, alpha=alpha), x, index, source)
    check(lambda x, i, s: x.clone().index_add_(0, i % 4, s), x, index, sample((3, 5), dtype))
    distinct = torch.tensor([4, 0, 2])
    check(lambda x, i, s: x.index_copy(1, i, s), x, distinct, source)
    check(lambda x, i: x.index_fill(1, i, 7), x, torch.tensor([1, -1]))  # index_fill does wrap
    check(lambda x, i, v: x.index_fill(0, i % 4, v), x, index, torch.tensor(-2, dtype=dtype))
    check(lambda x, i: x.clone().index_fill_(1, i, 0), x, torch.tensor(2))


def test_index_add_grad():
    check_grad(lambda x, i, s: x.index_add(0, i, s, alpha=2.0), torch.randn(4, 3), torch.tensor([0, 0, 3]),
               torch.randn(3, 3))
    check_grad(lambda s, x, i: x.index_add(0, i, s), torch.randn(3, 3), torch.randn(4, 3), torch.tensor([0, 0, 3]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(dtype, reduce, include_self):
    x = sample((5, 4), dtype)
    source = sample((5, 6), dtype)
    index = torch.tensor([0, 3, 0, 1, 3, 3])  # column 2 receives nothing
    check(lambda x, i, s: x.index_reduce(1, i, s, reduce, include_self=include_self), x, index, source)


def test_index_reduce_grad():
    check_grad(lambda x, i, s: x.index_reduce(0, i, s, "amax"), torch.randn(4, 3), torch.tensor([0, 2, 2]),
               torch.randn(3, 3))
    check_grad(lambda s, x, i: x.index_reduce(0, i, s, "mean"), torch.randn(3, 3), torch.randn(4, 3),
               torch.tensor([0, 2, 2]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_take_put(dtype):
    x = sample((3, 4), dtype)
    index = torch.tensor([[0, -1], [5, 11]])  # negative indices count from the end, as in PyTorch
    check(lambda x, i: torch.take(x, i), x, index)
    check(lambda x, i: torch.take(x, i), sample((), dtype), torch.tensor([0, -1]))
    distinct = torch.tensor([7, 0, -2])
    check(lambda x, i, s: x.put(i, s), x, distinct, sample((3,), dtype))
    check(lambda x, i, s: x.clone().put_(i, s), x, distinct, sample((3,), dtype))
    if dtype != torch.bool:
        repeated = torch.tensor([[1, 1], [2, -12]])
        check(lambda x, i, s: x.put(i, s, accumulate=True), x, repeated, sample((2, 2), dtype))


def test_take_put_grad():
    check_grad(lambda x, i: torch.take(x, i), torch.randn(3, 4), torch.tensor([0, 5, 5, -1]))
    check_grad(lambda s, x, i: x.put(i, s, accumulate=True), torch.randn(4), torch.randn(3, 4),
               torch.tensor([0, 5, 5, -1]))


def test_index_reduce_bad_reduce_raises():
    x, index, source = torch.randn(3, 4), torch.tensor([0, 1]), torch.randn(2, 4)
    with pytest.raises(RuntimeError, match="reduce"):
        x.index_reduce(0, index, source, "sum")
    with pytest.raises(RuntimeError, match="reduce"):
        tpu(x).index_reduce(0, tpu(index), tpu(source), "sum")


def test_edge_cases():
    check(lambda x, i: x[i], torch.randn(5), torch.tensor(-2))  # 0-d index on a vector
    check(lambda x, i: x[i], torch.randn(5), torch.tensor([[0, 4], [-1, 1]]))
    check(lambda x, i: torch.gather(x, 0, i), torch.tensor(3.0), torch.tensor(0))  # 0-d self
    check(lambda x, i: x.t()[i, 1:], torch.randn(4, 6), torch.tensor([5, 0]))  # strided input view
    check(lambda x, i: x[i], torch.randn(3, 4), torch.tensor([], dtype=torch.long))
    check(lambda x, i, v: x.index_put((i,), v), torch.randn(3, 4), torch.tensor([], dtype=torch.long),
          torch.randn(0, 4))
    check(lambda x, i, s: x.scatter_add(1, i, s), torch.randn(3, 4).bfloat16(), torch.randint(0, 4, (3, 6)),
          torch.randn(3, 6).bfloat16())
    check(lambda a, b: torch.cat([a, b], 0), torch.randn(2, 3).bfloat16(), torch.randn(1, 3).bfloat16())


def test_out_of_range_index_raises():  # a device-side value check; tests/test_value_checks.py has them all
    x = tpu(torch.randn(3, 4))
    with pytest.raises((IndexError, RuntimeError)):
        x[tpu(torch.tensor([3]))].cpu()
