"""What the fuzz_* test files share: strategies for random inputs, an entry's Call, the tolerances, and the
harness that runs a Call on CPU and on tpu and compares.

The fuzzer (hypothesis) drives the lowering table, tpu against CPU. Each family is a table of entries; an
entry draws its own inputs (random shapes with 0-size and 0-dim tensors, dtypes, strided views, argument
values) and returns a Call, which runs on CPU and on tpu. The results must match within the dtype's
tolerance; when CPU raises, tpu must raise too and stay usable. Derandomized with few examples per family,
so CI stays fast and repeatable; TORCHTPU_FUZZ_EXAMPLES raises the count (docs/reliability.md, "Fuzzing").
The families live in tests/test_fuzz_*.py, each exporting FAMILIES; test_fuzz_coverage.py runs every entry
once and checks the share of rule families they reach.
"""
from __future__ import annotations

import math
import os
from typing import Callable, NamedTuple

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import assert_usable

EXAMPLES = int(os.environ.get("TORCHTPU_FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

FLOATS = (torch.float32, torch.bfloat16)
ALL = (torch.float32, torch.int64, torch.bfloat16, torch.int32, torch.bool)
BITS = (torch.int64, torch.int32, torch.bool)
RAISES = (RuntimeError, IndexError, ValueError, TypeError)
# float32 tight (a few ulps of libm against XLA's approximations), bfloat16 loose (CPU rounds each op's
# float result to bf16, XLA may keep an intermediate in bf16), complex64 as float32. An entry may widen them
# by its `tol`.
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
             torch.complex64: {"rtol": 1e-5, "atol": 1e-5}}
SPECIAL_VALUES = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e30)
# CPU's std/var_mean accumulate in double with Welford's update: the std of values near 1e30 stays finite
# and an infinite input makes the mean NaN; tpu accumulates in float32 and sums (excluded, see
# docs/reliability.md).
WELFORD_SAFE = (math.nan, 0.0, -0.0)

# Hypothesis shrinks towards the first element of sampled_from, and its first example is the simplest one,
# so the order makes a 2x2 float32 contiguous tensor the case every entry is tried on first.
SIZES = st.sampled_from([2, 3, 1, 0, 4])


def shapes(min_rank: int = 0, max_rank: int = 4) -> st.SearchStrategy[tuple]:
    ranks = [r for r in (2, 1, 3, 0, 4) if min_rank <= r <= max_rank]
    return st.sampled_from(ranks).flatmap(lambda rank: st.tuples(*[SIZES] * rank))


class Input:
    """One tensor argument: a CPU storage and the view the op sees of it, rebuilt alike on each device."""

    def __init__(self, storage: torch.Tensor, view: Callable = lambda t: t, stays_on_cpu: bool = False):
        self.storage, self.view, self.stays_on_cpu = storage, view, stays_on_cpu

    def on(self, device: str) -> torch.Tensor:
        # A copy on CPU as well, so an in-place op on the CPU run leaves the tpu run's input alone.
        return self.view(self.storage.to("cpu" if self.stays_on_cpu else device, copy=True))


class Call(NamedTuple):
    fn: Callable  # takes the inputs' tensors (on one device), in order
    inputs: list
    tol: float = 1.0


def values(shape, dtype, seed: int, specials: tuple = ()) -> torch.Tensor:
    if dtype.is_complex:  # each part drawn as a float, the imaginary one from the next seed
        part = complex_part(dtype)
        return torch.complex(values(shape, part, seed, specials), values(shape, part, seed + 1, specials))
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(-5, 6, shape, generator=g, dtype=dtype)
    x = torch.randn(shape, generator=g) * 2
    if specials:
        picks = torch.randint(0, len(specials), shape, generator=g)
        where = torch.rand(shape, generator=g) < 0.25
        x = torch.where(where, torch.tensor(specials)[picks], x)
    return x.to(dtype)


def complex_part(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}[dtype]


def layouts(shape) -> list[str]:
    kinds = ["contiguous"]
    if len(shape) >= 1:
        kinds += ["stepped", "expanded"]
    if len(shape) >= 2:
        kinds.insert(1, "transposed")
    return kinds


def tensor(draw, shape, dtype, layout: str | None = None, specials: tuple = SPECIAL_VALUES) -> Input:
    """A random tensor of `shape` and `dtype`, as a contiguous, transposed, step-sliced (with a storage
    offset) or expanded view; floats are normal draws, with a quarter of them `specials` half the time."""
    layout = layout or draw(st.sampled_from(layouts(shape)))
    specials = draw(st.sampled_from([(), specials]))
    seed = draw(st.integers(0, 2**16))
    shape = tuple(shape)
    if layout == "transposed":
        order = tuple(reversed(range(len(shape))))
        return Input(values(shape[::-1], dtype, seed, specials), lambda t: t.permute(order))
    if layout == "stepped":
        storage = values(shape[:-1] + (2 * shape[-1] + 1,), dtype, seed, specials)
        return Input(storage, lambda t: t[..., 1::2])
    if layout == "expanded":
        return Input(values((1,) + shape[1:], dtype, seed, specials), lambda t: t.expand(shape))
    return Input(values(shape, dtype, seed, specials))


def dtypes(choices=ALL) -> st.SearchStrategy[torch.dtype]:
    return st.sampled_from(choices)


def dim_of(draw, shape) -> int:
    rank = max(len(shape), 1)  # a 0-dim tensor takes dim 0 or -1
    return draw(st.integers(-rank, rank - 1))


def size_at(shape, dim: int) -> int:
    return shape[dim] if shape else 1


@st.composite
def broadcast_shapes(draw, shape):
    """A shape that broadcasts with `shape`: a suffix of it with some dims 1 (or 3 where shape has 1),
    sometimes with a new leading dim."""
    drop = draw(st.integers(0, len(shape)))
    dims = [draw(st.sampled_from([d, 1, 3] if d == 1 else [d, 1])) for d in shape[drop:]]
    if draw(st.sampled_from([False, True])):
        dims.insert(0, 2)
    return tuple(dims)


python_scalars = st.one_of(st.integers(-3, 3), st.floats(-2.5, 2.5), st.booleans(),
                           st.sampled_from([math.inf, -math.inf, math.nan, -0.0]))
# Python exponents that float32 and bfloat16 hold exactly. tpu holds a Python number as a float32 operand;
# CPU's pow keeps a float32 tensor's exponent in double and rounds a bfloat16 tensor's to bfloat16, so for
# 1e-120 or 2.0078125 a negative base gives NaN on one and a number on the other (excluded, see
# docs/reliability.md).
exponents = st.one_of(st.integers(-3, 3), st.booleans(),
                      st.sampled_from([0.5, -0.5, 1.5, -2.5, 0.25, math.inf, -math.inf, math.nan, -0.0]))


def fill_values(dtype) -> st.SearchStrategy:
    """Python numbers written into a tensor of `dtype`. Integer tensors take finite ones: CPU raises for an
    infinite or NaN fill there, tpu converts (excluded, see docs/reliability.md)."""
    if dtype.is_floating_point:
        return python_scalars
    return st.one_of(st.integers(-3, 3), st.floats(-2.5, 2.5), st.booleans())


def indices(draw, size: int, shape, low: int = 0, unique_dim: int | None = None) -> Input:
    """int64 indices into a dim of `size`, in [low, size); one in eight sets carries an index out of range
    (CPU raises, so tpu must). With unique_dim, indices do not repeat along that dim."""
    shape = tuple(shape)
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    if unique_dim is None:
        index = torch.randint(low, max(size, 1), shape, generator=g) if size else torch.zeros(shape, dtype=torch.long)
    else:
        full = list(shape) or [1]
        full[unique_dim] = size
        count = shape[unique_dim] if shape else 1
        index = torch.rand(full, generator=g).argsort(unique_dim).narrow(unique_dim, 0, count)
        index = index.reshape(shape)
    if index.numel() and draw(st.integers(0, 7)) == 7:
        index.view(-1)[0] = size  # out of range: CPU raises
    return Input(index)


def elementwise(fn, choices=ALL, tol: float = 1.0, specials: tuple = SPECIAL_VALUES):
    """An entry with one tensor argument of any shape and layout."""
    def build(draw):
        return Call(fn, [tensor(draw, draw(shapes()), draw(dtypes(choices)), specials=specials)], tol)
    return build


# ---------------------------------------------------------------- nn inputs
def batch(draw, spatial: int, min_size: int = 1) -> tuple:
    """(N, C, *spatial sizes) of a small image-like batch."""
    return (draw(st.integers(1, 2)), draw(st.integers(1, 3)),
            *[draw(st.integers(min_size, 5)) for _ in range(spatial)])


def window(draw, size: int) -> dict:
    """Kernel, stride, padding and dilation that PyTorch accepts for an input of `size`."""
    dilation = draw(st.integers(1, 2))
    kernel = draw(st.integers(1, max(1, min(3, (size - 1) // dilation + 1))))
    return dict(kernel_size=kernel, stride=draw(st.integers(1, 2)), padding=draw(st.integers(0, kernel // 2)),
                dilation=dilation)


# ---------------------------------------------------------------- binary: broadcasting, promotion, scalars
def binary(fn, choices=ALL, tol: float = 1.0, reflect: bool = False, numbers=python_scalars):
    """An entry with a tensor and a second operand: a broadcasting tensor of any dtype, a Python number (from
    `numbers`) or a 0-dim CPU tensor (either side). `reflect` swaps the operands of the call, so a Python
    number comes first (`2 - x`, `2 ** x`)."""
    call = (lambda a, b: fn(b, a)) if reflect else fn
    def build(draw):
        shape = draw(shapes())
        x = tensor(draw, shape, draw(dtypes(choices)))
        kind = draw(st.sampled_from(["tensor", "python", "cpu_scalar"]))
        if kind == "python":
            number = draw(numbers)
            return Call(lambda a: call(a, number), [x], tol)
        if kind == "cpu_scalar":
            other = Input(values((), draw(dtypes(choices)), draw(st.integers(0, 2**16))), stays_on_cpu=True)
        else:
            other = tensor(draw, draw(broadcast_shapes(shape)), draw(dtypes(choices)))
        swap = draw(st.booleans())
        return Call(call, [other, x] if swap else [x, other], tol)
    return build


def scanned(x, dim, result):
    """(values, x at the returned indices) of a scan or sort: ties may pick any index."""
    values, index = result
    return values, x.gather(dim, index) if x.dim() else x.gather(0, index)


# ---------------------------------------------------------------- running a call on both devices
def to_cpu(result):
    if isinstance(result, torch.Tensor):
        return result.cpu()
    if isinstance(result, (tuple, list)):  # split's tuple, sort's (values, indices), ...
        return tuple(map(to_cpu, result))
    return result


def assert_matches(actual, expected, tol: float) -> None:
    if isinstance(expected, torch.Tensor):
        tolerance = {k: v * tol for k, v in TOLERANCE.get(expected.dtype, {"rtol": 0, "atol": 0}).items()}
        torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_matches(a, e, tol)
    else:
        assert actual == expected or (actual != actual and expected != expected)


def run(call: Call) -> None:
    try:
        expected = to_cpu(call.fn(*[i.on("cpu") for i in call.inputs]))
    except RAISES as error:
        survivor = torch.arange(6.0).view(2, 3)
        survivor = (survivor.to("tpu"), survivor)
        try:
            to_cpu(call.fn(*[i.on("tpu") for i in call.inputs]))
            torch.tpu.synchronize()  # reading an empty result reads no value, so it reports no value check
        except RAISES:
            pass
        else:
            # CPU lacks kernels for some dtypes (topk of bool, ...); tpu computing those is not a bug.
            assert "not implemented for" in str(error) or "on CPU" in str(error), f"CPU raised {error!r}, tpu did not"
        assert_usable(survivor)
        return
    actual = to_cpu(call.fn(*[i.on("tpu") for i in call.inputs]))
    torch.tpu.synchronize()  # a device-side check CPU did not make fails here, not in the next case
    assert_matches(actual, expected, call.tol)


def family_test(families: dict) -> Callable:
    """The test a fuzz file exports as `test_family`: per family, EXAMPLES derandomized cases, each drawing
    one of its entries."""
    @pytest.mark.parametrize("family", sorted(families))
    @FUZZ
    @given(data=st.data())
    def test_family(family, data):
        table = families[family]
        name = data.draw(st.sampled_from(sorted(table)), label="entry")
        run(table[name](data.draw))
    return test_family
