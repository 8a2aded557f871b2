"""Ops with data-dependent shapes (aten/data_dependent.cc): nonzero, argwhere, masked_select, x[mask],
x[mask] = v, unique and unique_consecutive (with and without a dim) run on the device against CPU, in strict
and fused mode.

Each call reads back exactly one integer (the count): one device-to-host transfer, and in fused mode one
flush under the reason "data-dependent shape". The compaction programs take the count rounded up to a
power of two, so they compile once per power of two, not once per count."""

import pytest
import torch

import torchtpu
from torchtpu.metrics import fallback_ops

MODES = ["strict", "fused"]
SHAPES = [(0,), (1,), (7,), (3, 4), (2, 3, 4), (2, 0, 3)]
DTYPES = [torch.float32, torch.int64, torch.bool, torch.bfloat16]


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def assert_same(tpu_result, cpu_result):
    for got, want in zip(as_tuple(tpu_result), as_tuple(cpu_result), strict=True):
        assert got.device.type == "tpu"
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


def run_on_both(fn, *inputs, mode):
    """fn on CPU and on tpu; the tpu call must make exactly one host read (the count)."""
    cpu_result = fn(*inputs)
    tpu_inputs = [t.to("tpu") for t in inputs]
    with torchtpu.eager_mode(mode):
        before = torchtpu.metrics()["transfers"]["to_host"]
        tpu_result = fn(*tpu_inputs)
        reads = torchtpu.metrics()["transfers"]["to_host"] - before
        assert_same(tpu_result, cpu_result)
    return reads


def values(shape, dtype, density=0.5):
    """Random values where about `density` of them are nonzero (some repeated, for unique)."""
    keep = torch.rand(shape) < density
    if dtype == torch.bool:
        return keep
    return (torch.randint(1, 4, shape) * keep).to(dtype)


def masks(shape):
    return {"random": torch.rand(shape) < 0.5, "all_true": torch.ones(shape, dtype=torch.bool),
            "all_false": torch.zeros(shape, dtype=torch.bool)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [()])
def test_nonzero_and_argwhere(shape, dtype, mode, metrics):
    for density in (0.5, 1.0, 0.0):
        x = values(shape, dtype, density)
        assert run_on_both(torch.nonzero, x, mode=mode) == 1
        assert run_on_both(torch.argwhere, x, mode=mode) == 1
        assert run_on_both(lambda t: torch.nonzero(t, as_tuple=True), x, mode=mode) == 1
    assert fallback_ops() == {}


def test_nonzero_out(metrics):
    x = values((4, 5), torch.float32)
    out = torch.empty(0, dtype=torch.long, device="tpu")
    torch.nonzero(x.to("tpu"), out=out)
    assert_same(out, torch.nonzero(x))
    with pytest.raises(RuntimeError, match="Expected out tensor to have scalar type Long"):
        torch.nonzero(x.to("tpu"), out=torch.empty(0, device="tpu"))
    assert fallback_ops() == {}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_masked_select_and_mask_index(shape, dtype, mode, metrics):
    x = torch.randn(shape).mul(10).to(dtype)
    for mask in masks(shape).values():
        assert run_on_both(torch.masked_select, x, mask, mode=mode) == 1
        assert run_on_both(lambda t, m: t[m], x, mask, mode=mode) == 1
    assert fallback_ops() == {}


@pytest.mark.parametrize("mode", MODES)
def test_mask_index_forms(mode, metrics):
    x = torch.randn(3, 4, 5)
    assert run_on_both(lambda t, m: torch.masked_select(t, m), x, torch.rand(4, 1) < 0.5, mode=mode) == 1  # broadcast
    assert run_on_both(lambda t, m: t[:, m], x, torch.rand(4) < 0.5, mode=mode) == 1  # after a full slice
    assert run_on_both(lambda t, m: t[:, m], x, torch.rand(4, 5) < 0.5, mode=mode) == 1  # two dims, last
    assert run_on_both(lambda t, m: t[m, 1:], x, torch.rand(3) < 0.5, mode=mode) == 1
    # With an integer index the mask's indices broadcast against it: still one read (the device nonzero).
    assert run_on_both(lambda t, m: t[m, torch.tensor([0, 2], device=t.device)], x,
                       torch.tensor([True, False, True]), mode=mode) == 1
    mask = torch.rand(4) < 0.5
    assert run_on_both(lambda t, m: t[:, m].view(-1), x, mask, mode=mode) == 1  # contiguous, as on CPU
    assert fallback_ops() == {}


def test_mask_index_errors():
    x = torch.randn(3, 4, device="tpu")
    with pytest.raises(IndexError, match="The shape of the mask"):
        x[torch.ones(4, dtype=torch.bool, device="tpu")]
    with pytest.raises(RuntimeError, match="expected BoolTensor for mask"):
        torch.masked_select(x, torch.ones(3, 4, device="tpu"))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(0,), (6,), (3, 4)])
def test_mask_put(shape, mode, metrics):
    x = torch.randn(shape)
    for mask in masks(shape).values():
        count = int(mask.sum())
        v = torch.arange(count, dtype=torch.float32) + 100

        def put(t, m, v=v):
            t = t.clone()
            t[m] = v.to(t.device)
            return t

        def accumulate(t, m, v=v):
            return t.index_put((m,), v.to(t.device), accumulate=True)

        def fill(t, m):  # a value that does not depend on the count: a select, no read
            t = t.clone()
            t[m] = 5.0
            return t

        assert run_on_both(put, x, mask, mode=mode) == 1
        assert run_on_both(accumulate, x, mask, mode=mode) == 1
        assert run_on_both(fill, x, mask, mode=mode) == 0
    assert fallback_ops() == {}


def test_mask_put_shape_mismatch():
    x = torch.zeros(4, device="tpu")
    with pytest.raises((IndexError, RuntimeError), match="shape mismatch"):
        x[torch.tensor([True, False, True, False], device="tpu")] = torch.ones(3, device="tpu")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES + [torch.int32])
@pytest.mark.parametrize("shape", SHAPES + [()])
def test_unique(shape, dtype, mode, metrics):
    x = values(shape, dtype)
    for return_inverse in (False, True):
        for return_counts in (False, True):
            def unique(t):
                return torch.unique(t, sorted=True, return_inverse=return_inverse, return_counts=return_counts)

            def consecutive(t):
                return torch.unique_consecutive(t, return_inverse=return_inverse, return_counts=return_counts)

            reads = 1 if x.numel() else 0  # an empty input needs no count
            assert run_on_both(unique, x, mode=mode) == reads
            assert run_on_both(consecutive, x, mode=mode) == reads
    assert fallback_ops() == {}


def test_unique_nan_and_unsorted(metrics):
    x = torch.tensor([3.0, float("nan"), 1.0, 3.0, float("nan"), -1.0, 1.0])
    assert run_on_both(lambda t: torch.unique(t, return_inverse=True, return_counts=True), x, mode="strict") == 1
    # sorted=False may return any order; tpu's is sorted, which CPU's order is too for these values.
    y = torch.tensor([5, 1, 5, 2, 2, 9])
    assert run_on_both(lambda t: torch.unique(t, sorted=False, return_inverse=True), y, mode="strict") == 1
    assert fallback_ops() == {}


@pytest.mark.parametrize("mode", MODES)
def test_unique_along_a_dim(mode, metrics):
    # Repeated slices along each dim, in no order: rows of a matrix, columns, and slices of a 3-d tensor.
    rows = torch.tensor([[2, 1, 0], [1, 1, 1], [2, 1, 0], [0, 5, 5], [1, 1, 1], [2, 1, 0]])
    cube = torch.randint(0, 2, (3, 4, 2)).repeat(1, 2, 1)
    floats = torch.tensor([[1.5, -2.0], [1.5, -2.0], [0.0, 3.0], [1.5, -3.0]])
    for x, dims in ((rows, (0, 1)), (cube, (0, 1, 2, -1)), (floats, (0, 1))):
        for dim in dims:
            def unique(t):
                return torch.unique(t, dim=dim, return_inverse=True, return_counts=True)

            def consecutive(t):
                return torch.unique_consecutive(t, dim=dim, return_inverse=True, return_counts=True)

            assert run_on_both(unique, x, mode=mode) == 1
            assert run_on_both(consecutive, x, mode=mode) == 1
    assert fallback_ops() == {}


def test_fused_flush_reason(metrics):
    with torchtpu.eager_mode("fused"):
        x = torch.arange(10.0, device="tpu") * 2  # pending in the trace
        result = torch.nonzero(x > 5)
        assert metrics()["fused"]["flushes"].get("data-dependent shape") == 1
        assert_same(result, torch.nonzero(torch.arange(10.0) * 2 > 5))


def test_compaction_compiles_per_power_of_two(metrics):
    x = torch.zeros(16, device="tpu")
    for count in range(1, 17):
        x[count - 1] = 1.0
        assert torch.nonzero(x).shape == (count, 1)
    # Counts 1..16 take programs of 1, 2, 4, 8 and 16 rows.
    assert metrics()["ops"]["aten::nonzero_static"]["compiles"] == 5


@pytest.mark.parametrize("mode", MODES)
def test_autograd(mode, metrics):
    x = torch.randn(3, 4)
    mask = torch.rand(3, 4) < 0.5
    row_mask = torch.tensor([True, False, True])
    weights = torch.randn(int(mask.sum()))

    def losses(device):
        leaf = x.to(device, copy=True).requires_grad_()
        m, r = mask.to(device), row_mask.to(device)
        loss = (torch.masked_select(leaf, m) * weights.to(device)).sum() + (leaf[r] ** 2).sum()
        loss = loss + leaf[:, torch.tensor([False, True, True, False], device=device)].sum()
        loss.backward()
        return loss.detach().cpu(), leaf.grad.cpu()

    cpu_loss, cpu_grad = losses("cpu")
    with torchtpu.eager_mode(mode):
        tpu_loss, tpu_grad = losses("tpu")
    torch.testing.assert_close(tpu_loss, cpu_loss)
    torch.testing.assert_close(tpu_grad, cpu_grad)
    assert fallback_ops() == {}
