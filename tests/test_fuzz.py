"""A small property-based fuzzer (hypothesis): random shapes (0-size and 0-dim included), dtypes, strided views
and argument values through some lowering rules, tpu against CPU. Derandomized and few examples, so CI stays
fast and repeatable; raise TORCHTPU_FUZZ_EXAMPLES for a longer run (docs/reliability.md)."""
from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchtpu  # noqa: F401

EXAMPLES = int(os.environ.get("TORCHTPU_FUZZ_EXAMPLES", "20"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

DTYPES = [torch.float32, torch.int32, torch.int64, torch.bfloat16]
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


def make(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-5, 6, shape, generator=g, dtype=dtype)


def check(fn, *cpu_args):
    expected = fn(*cpu_args)
    actual = fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in cpu_args])
    tol = {"atol": 1e-2, "rtol": 1e-2} if expected.dtype == torch.bfloat16 else {}
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tol)


UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "square": torch.square,
    "relu": torch.relu,
    "sign": torch.sign,
}
FLOAT_UNARY = {"sin": torch.sin, "exp": torch.exp, "sigmoid": torch.sigmoid, "tanh": torch.tanh}


@FUZZ
@given(shape=shapes, dtype=st.sampled_from(DTYPES), op=st.sampled_from(sorted(UNARY) + sorted(FLOAT_UNARY)),
       seed=st.integers(0, 2**16))
def test_unary(shape, dtype, op, seed):
    if op in FLOAT_UNARY and not dtype.is_floating_point:
        dtype = torch.float32
    check({**UNARY, **FLOAT_UNARY}[op], make(shape, dtype, seed))


BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum, "eq": torch.eq}


@FUZZ
@given(shape=shapes, drop=st.integers(0, 3), dtype=st.sampled_from(DTYPES), other=st.sampled_from(DTYPES),
       op=st.sampled_from(sorted(BINARY)), seed=st.integers(0, 2**16))
def test_binary_broadcast_and_promotion(shape, drop, dtype, other, op, seed):
    # The second operand broadcasts: trailing dims only, some set to 1.
    tail = tuple(1 if i % 2 else d for i, d in enumerate(shape[drop:]))
    if op == "maximum" and dtype != other:
        other = dtype  # maximum does not promote
    check(BINARY[op], make(shape, dtype, seed), make(tail, other, seed + 1))


@FUZZ
@given(shape=shapes, dtype=st.sampled_from(DTYPES), scalar=st.one_of(st.integers(-3, 3), st.floats(-2, 2)),
       seed=st.integers(0, 2**16))
def test_python_scalar_operands(shape, dtype, scalar, seed):
    check(lambda x: x * scalar + 1, make(shape, dtype, seed))


@FUZZ
@given(shape=shapes.filter(lambda s: len(s) > 0), keepdim=st.booleans(), data=st.data(),
       dtype=st.sampled_from([torch.float32, torch.int64]), seed=st.integers(0, 2**16))
def test_reductions_over_a_dim(shape, keepdim, data, dtype, seed):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = make(shape, dtype, seed)
    check(lambda t: t.sum(dim, keepdim=keepdim), x)
    if dtype.is_floating_point:
        check(lambda t: t.mean(dim, keepdim=keepdim), x)
    if x.shape[dim] > 0:
        check(lambda t: t.amax(dim, keepdim=keepdim), x)


@FUZZ
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=3).map(tuple), data=st.data(),
       seed=st.integers(0, 2**16))
def test_strided_views_read_and_write(shape, data, seed):
    dim = data.draw(st.integers(0, len(shape) - 1))
    start = data.draw(st.integers(0, shape[dim] - 1))
    step = data.draw(st.integers(1, 3))
    x = make(shape, torch.float32, seed)

    def read(t):
        return t.transpose(0, -1).narrow(-1 - dim if dim else -1, 0, 1).contiguous() * 2

    def write(t):
        t = t.clone()
        index = [slice(None)] * len(shape)
        index[dim] = slice(start, None, step)
        t[tuple(index)] += 1
        return t

    check(lambda t: t[..., ::step].flip(-1), x)
    check(read, x)
    check(write, x)
