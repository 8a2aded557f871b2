"""histogram and histogramdd on tpu against CPU: equal-width bins over a range or the data, given edges,
weights, density, elements on edges, outside the range and NaN; bad arguments raise CPU's errors."""
import pytest
import torch
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops


def check(*args, **kwargs):
    expected = torch.histogram(*args, **kwargs)
    tpu_args = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args]
    tpu_kwargs = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    actual = torch.histogram(*tpu_args, **tpu_kwargs)
    assert_close(actual.hist.cpu(), expected.hist)
    assert_close(actual.bin_edges.cpu(), expected.bin_edges)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_histogram_matches_cpu(dtype):
    torchtpu.reset_metrics()
    x = torch.randn(4, 50, dtype=dtype)
    weight = torch.rand(4, 50, dtype=dtype)
    for bins in (1, 30):
        check(x, bins)
        check(x, bins, range=(-1.0, 0.5))
        check(x, bins, weight=weight, density=True)
    check(torch.full((5,), 3.0, dtype=dtype), 4)  # equal min and max widen by 0.5
    check(torch.empty(0, dtype=dtype), 4)
    # Elements exactly on edges, past the range, and NaN.
    on_edges = torch.tensor([0.0, 0.25, 0.5, 1.0, 1.5, -0.1, float("nan")], dtype=dtype)
    check(on_edges, 4, range=(0.0, 1.0))
    edges = torch.tensor([-2.0, -0.5, 0.0, 0.1, 3.0], dtype=dtype)
    check(x, edges)
    check(x, edges, weight=weight, density=True)
    assert fallback_ops() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_histogramdd_matches_cpu(dtype, metrics):
    def check_dd(x, bins, **kwargs):
        expected = torch.histogramdd(x, bins, **kwargs)
        tpu_bins = [b.to("tpu") for b in bins] if isinstance(bins, list) and isinstance(bins[0], torch.Tensor) \
            else bins
        tpu_kwargs = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        actual = torch.histogramdd(x.to("tpu"), tpu_bins, **tpu_kwargs)
        assert_close(actual.hist.cpu(), expected.hist)
        for got, want in zip(actual.bin_edges, expected.bin_edges):
            assert_close(got.cpu(), want)

    points = torch.randn(2, 40, 3, dtype=dtype)
    weight = torch.rand(2, 40, dtype=dtype)
    check_dd(points, [3, 4, 2])
    check_dd(points, [2, 5, 3], range=[-1.0, 1.0, 0.0, 2.0, -0.5, 0.5], weight=weight, density=True)
    check_dd(torch.full((6, 2), 1.0, dtype=dtype), [2, 2])  # equal min and max widen by 0.5
    check_dd(torch.empty(0, 2, dtype=dtype), [3, 3])
    with_nan = torch.tensor([[0.0, 0.5], [1.0, 1.0], [float("nan"), 0.2], [0.5, 2.0]], dtype=dtype)
    check_dd(with_nan, [2, 2], range=[0.0, 1.0, 0.0, 1.0])
    edges = [torch.tensor([-2.0, 0.0, 0.5, 3.0], dtype=dtype), torch.tensor([-1.0, 1.0], dtype=dtype),
             torch.tensor([-3.0, -1.0, 0.0, 1.0, 3.0], dtype=dtype)]
    check_dd(points, edges, weight=weight, density=True)
    assert fallback_ops() == {}


def test_histogram_bad_arguments():
    x = torch.randn(10, device="tpu")
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histogram(x, 0)
    with pytest.raises(RuntimeError):
        torch.histogram(x, 4, range=(1.0, 0.0))
    with pytest.raises(RuntimeError):
        torch.histogram(torch.arange(4, device="tpu"), 4)
    assert torch.histogram(x, 3).hist.sum().item() == 10  # the device is still usable


def test_bincount_matches_cpu_on_the_device():
    torchtpu.reset_metrics()
    pixels = torch.randint(0, 256, (1000,), dtype=torch.uint8)
    counts = torch.tensor([0, 1, 1, 5])
    for args, kwargs in [((pixels,), {}), ((counts,), {}), ((counts,), {"minlength": 10}),
                         ((counts.int(),), {"weights": torch.tensor([0.5, 0.25, 1.0, 2.0])}),
                         ((counts,), {"weights": torch.tensor([1, 2, 3, 4])}),
                         ((counts,), {"weights": torch.rand(4, dtype=torch.float64)}),
                         ((torch.tensor([], dtype=torch.long),), {"minlength": 3})]:
        expected = torch.bincount(*args, **kwargs)
        actual = torch.bincount(*[a.to("tpu") for a in args], **{k: v.to("tpu") if isinstance(v, torch.Tensor) else v
                                                                for k, v in kwargs.items()})
        assert actual.dtype == expected.dtype
        assert_close(actual.cpu(), expected)
    assert fallback_ops() == {}


@pytest.mark.parametrize("make, message", [
    (lambda d: torch.bincount(torch.tensor([-1, 2], device=d)), "non-negative"),
    (lambda d: torch.bincount(torch.tensor([[1]], device=d)), "1-d non-negative"),
    (lambda d: torch.bincount(torch.tensor([1], device=d), minlength=-1), "minlength should be >= 0"),
    (lambda d: torch.bincount(torch.tensor([1, 2], device=d), weights=torch.tensor([1.0], device=d)), "same length"),
    (lambda d: torch.bincount(torch.tensor([1.0], device=d)), "not implemented for 'Float'"),
])
def test_bincount_bad_input_raises_cpus_error(make, message):
    with pytest.raises(RuntimeError, match=message) as cpu_error:
        make("cpu")
    with pytest.raises(RuntimeError, match=message) as tpu_error:
        make("tpu")
    assert type(tpu_error.value) is type(cpu_error.value)
