"""Order statistics (kthvalue, median, nanmedian, mode) and searching (isin, bucketize, searchsorted, histc)
on tpu against CPU PyTorch, with no CPU fallback.

Values and dtypes must match exactly. Indices must match CPU's where CPU's choice is specified (mode: the
last occurrence; NaN: the first NaN); for kthvalue/median with repeated values CPU's unstable selection
picks an unspecified one of them (PyTorch documents it as implementation specific), so there the test
checks that the index holds the value.
"""
import pytest
import torch
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

NAN = float("nan")
DTYPES = [torch.float32, torch.bfloat16, torch.int64]


def on_tpu(fn, *args):
    torchtpu.reset_metrics()
    result = fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args])
    assert not fallback_ops(), fallback_ops()
    return result


def check(fn, *args, **kwargs):
    expected = fn(*args)
    actual = on_tpu(fn, *args)
    if not isinstance(expected, tuple):
        expected, actual = (expected,), (actual,)
    for e, a in zip(expected, actual):
        assert a.device.type == "tpu"
        assert_close(a.cpu(), e, equal_nan=True, **kwargs)


def check_selection(fn, x, dim, keepdim=False):
    """values exactly as CPU; indices point at an element equal to the value (NaN at NaN)."""
    expected = fn(x, dim, keepdim)
    actual = on_tpu(fn, x, dim, keepdim)
    assert_close(actual.values.cpu(), expected.values, equal_nan=True)
    assert actual.indices.dtype == torch.int64 and actual.indices.shape == expected.indices.shape
    indices = actual.indices.cpu() if keepdim else actual.indices.cpu().unsqueeze(dim)
    values = expected.values if keepdim else expected.values.unsqueeze(dim)
    assert_close(x.gather(dim, indices), values, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kthvalue_median_unique_values(dtype):
    # Distinct values: the indices are determined and must equal CPU's.
    x = torch.randperm(40).reshape(5, 8).to(dtype)
    for k in (1, 3, 8):
        check(lambda t: tuple(torch.kthvalue(t, k, 1)), x)
    check(lambda t: tuple(torch.kthvalue(t, 2, 0, keepdim=True)), x)
    check(lambda t: tuple(torch.median(t, 1)), x)
    check(lambda t: tuple(torch.median(t, 0, keepdim=True)), x)
    check(torch.median, x)
    check(lambda t: tuple(torch.nanmedian(t, 1)), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kthvalue_median_repeated_values(dtype):
    x = torch.randint(0, 3, (6, 9)).to(dtype)
    check_selection(lambda t, d, k: torch.kthvalue(t, 4, d, k), x, 1)
    check_selection(torch.median, x, 1, True)
    check_selection(torch.median, x, 0)


def test_median_nan():
    x = torch.tensor([[1.0, NAN, 2, NAN, 0], [3, 1, 2, 0, 4], [NAN, NAN, NAN, NAN, NAN], [5, NAN, 4, 3, 2]])
    # median: a slice with NaN gives NaN at its first NaN; nanmedian skips NaNs. For an all-NaN slice
    # CPU's nanmedian index is an artifact of std::nth_element: any index is a NaN there.
    check(lambda t: tuple(torch.median(t, 1)), x)
    check_selection(torch.nanmedian, x, 1)
    check(lambda t: tuple(torch.nanmedian(t, 1)), x[[0, 1, 3]])
    check_selection(lambda t, d, k: torch.kthvalue(t, 4, d, k), x, 1)
    check(torch.median, x)
    check(torch.nanmedian, x)
    check(torch.nanmedian, torch.tensor([NAN, 2.0, 1.0, NAN]))
    check(lambda t: tuple(torch.median(t, 0)), torch.tensor(3.0))


@pytest.mark.parametrize("op", [torch.median, torch.nanmedian], ids=["median", "nanmedian"])
def test_median_along_an_empty_dim_raises_cpus_index_error(op):
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        op(torch.zeros(0, 3, device="tpu"), 0)
    # The device stays usable, and empty slices along the other dim are fine, as on CPU.
    check(lambda t: tuple(op(t, 0)), torch.zeros(3, 0))
    check(op, torch.zeros(0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mode(dtype):
    # The smallest of the most frequent values, at its last position.
    x = torch.randint(0, 4, (5, 12)).to(dtype)
    check(lambda t: tuple(torch.mode(t, 1)), x)
    check(lambda t: tuple(torch.mode(t, 0, keepdim=True)), x)
    check(lambda t: tuple(torch.mode(t)), torch.tensor([2.0, 1, 2, 1, 5]))
    check(lambda t: tuple(torch.mode(t, 0)), torch.tensor(7.0))


def test_mode_signed_zero_and_bool():
    # -0.0 == 0.0: the value is the one stored at the returned (last) position.
    check(lambda t: tuple(torch.mode(t, 1)), torch.tensor([[1.0, -0.0, 0.0], [-0.0, 0.0, -0.0], [2, 2, -0.0]]))
    check(lambda t: tuple(torch.mode(t, 1)), torch.tensor([[True, False, True], [False, False, True]]))


@pytest.mark.parametrize("fn", [lambda t: torch.kthvalue(t, 1), torch.median, lambda t: torch.nanmedian(t, 0),
                                lambda t: torch.bucketize(t, t), lambda t: torch.searchsorted(t, t)],
                         ids=["kthvalue", "median", "nanmedian", "bucketize", "searchsorted"])
def test_bool_input_raises_like_cpu(fn):
    x = torch.tensor([True, False, True])
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        fn(x)
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        fn(x.to("tpu"))


@pytest.mark.parametrize("dtype", DTYPES + [torch.int32], ids=str)
def test_median_of_empty(dtype):
    check(torch.median, torch.empty(0, dtype=dtype))
    check(torch.nanmedian, torch.empty(2, 0, dtype=dtype))


def test_median_bad_dim_raises_like_cpu():
    with pytest.raises(IndexError):
        torch.median(torch.ones(2, 3, device="tpu"), 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_isin(dtype):
    elements = torch.randint(0, 10, (4, 5)).to(dtype)
    tests = torch.tensor([1, 3, 3, 8]).to(dtype)
    check(torch.isin, elements, tests)
    check(lambda e, t: torch.isin(e, t, invert=True), elements, tests)
    check(lambda e: torch.isin(e, 3), elements)
    check(lambda t: torch.isin(8, t), tests)


def test_isin_promotes_and_never_matches_nan():
    check(torch.isin, torch.tensor([1, 2, 3]), torch.tensor([2.0, 3.5]))
    check(torch.isin, torch.tensor([NAN, 1.0]), torch.tensor([NAN, 1.0]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("right", [False, True])
def test_bucketize_searchsorted(right, dtype):
    boundaries = torch.tensor([1, 3, 3, 5, 9]).to(dtype)
    x = torch.randint(0, 11, (3, 7)).to(dtype)
    check(lambda v, b: torch.bucketize(v, b, right=right), x, boundaries)
    check(lambda v, b: torch.bucketize(v, b, right=right, out_int32=True), x, boundaries)
    check(lambda b, v: torch.searchsorted(b, v, right=right), boundaries, x)
    # A sorted sequence per row, searched by the matching row of values.
    rows = torch.sort(torch.randint(0, 11, (3, 6)), dim=1).values.to(dtype)
    check(lambda b, v: torch.searchsorted(b, v, side="right" if right else "left"), rows, x)


def test_searchsorted_sorter_scalar_and_nan():
    sequence = torch.tensor([[5.0, 1, 3, 9], [2, 8, 4, 6]])
    sorter = torch.argsort(sequence, dim=1)
    values = torch.tensor([[0.0, 3, 10], [4, 5, NAN]])
    check(lambda s, v, o: torch.searchsorted(s, v, sorter=o), sequence, values, sorter)
    check(lambda s: torch.searchsorted(s, 4.0), torch.tensor([1.0, 3, 5]))
    check(lambda v, b: torch.bucketize(v, b), torch.tensor([NAN, 2.0]), torch.tensor([1.0, 3.0]))


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("boundaries", [[1.0, 2, NAN], [1.0, NAN, 3], [1.0, 2, 3, NAN, NAN], [3.0, 1, 2], [],
                                        [1.0, 1, 2, 2, 2, 3]], ids=str)
def test_search_answers_as_cpus_binary_search_on_unsorted_boundaries(boundaries, right):
    """NaN among the boundaries (or any unsorted sequence) answers as CPU's binary search does, step for step."""
    values = torch.tensor([0.0, 1, 1.5, 2, 2.5, 3, 4, NAN])
    check(lambda b, v: torch.searchsorted(b, v, right=right), torch.tensor(boundaries), values)
    check(lambda v, b: torch.bucketize(v, b, right=right), values, torch.tensor(boundaries))


def test_search_of_empty_sequences_puts_every_value_first():
    check(lambda s, v: torch.searchsorted(s, v), torch.empty(3, 0), torch.randn(3, 4))
    check(lambda s, v: torch.searchsorted(s, v, right=True), torch.empty(0), torch.randn(5))


@pytest.mark.parametrize("length", [1, 2, 7, 8, 9, 1000])
def test_searchsorted_of_long_sequences_per_row(length):
    sequence = torch.sort(torch.randn(3, length), dim=1).values
    check(lambda s, v: torch.searchsorted(s, v), sequence, torch.randn(3, 17))
    check(lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True), sequence[0], torch.randn(2, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_histc(dtype):
    x = (torch.randn(200) * 2).to(dtype)
    check(lambda t: torch.histc(t, 10, -2, 2), x)  # values outside [-2, 2] are not counted
    check(lambda t: torch.histc(t, 7), x)  # min == max: the data's range
    check(lambda t: torch.histc(t, 4, 0, 5), torch.tensor([0.0, 1, 2, 3, 4, 5, -1, 6, NAN]).to(dtype))
    check(lambda t: torch.histc(t, 3), torch.tensor([1.0, 1.0]).to(dtype))  # empty range widened by 1


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_of_integers_counts_as_cuda(dtype):
    # CPU refuses integer histc; CUDA counts in integer arithmetic into the input's dtype, and transformers'
    # MoE routing relies on that on every accelerator.
    x = torch.tensor([0, 1, 3, 3, 2, 7, 7, 5]).to(dtype)
    for args in [(4,), (4, 0, 7), (3, 1, 6), (5, 2, 2)]:
        counts = torch.histc(x.to("tpu"), *args).cpu()
        assert counts.dtype == dtype
        assert torch.equal(counts, torch.histc(x.float(), *args).to(dtype))


def test_histc_bad_bins_raises_like_cpu():
    with pytest.raises(RuntimeError):
        torch.histc(torch.ones(3, device="tpu"), -1)


def test_mode_of_a_slice_of_nans_is_nan_at_index_0():
    # No value of such a slice is counted; it gave -0.0 at index -1 (no element).
    nan = float("nan")
    x = torch.tensor([[nan, nan, nan], [1.0, 2.0, 2.0]])
    values, indices = x.to("tpu").mode(1)
    expected_values, expected_indices = x.mode(1)
    assert_close(values.cpu(), expected_values, equal_nan=True)
    assert torch.equal(indices.cpu(), expected_indices)
