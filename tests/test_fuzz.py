"""A property-based fuzzer (hypothesis) over the lowering table, tpu against CPU.

Each family is a table of entries; an entry draws its own inputs (random shapes with 0-size and 0-dim
tensors, dtypes, strided views, argument values) and returns a Call, which runs on CPU and on tpu. The
results must match within the dtype's tolerance; when CPU raises, tpu must raise too and stay usable.
Derandomized with few examples per family, so CI stays fast and repeatable; TORCHTPU_FUZZ_EXAMPLES raises
the count (docs/reliability.md, "Fuzzing").
"""
from __future__ import annotations

import math
import operator
import os
from functools import partial
from typing import Callable, NamedTuple

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchtpu
from helpers import assert_usable

EXAMPLES = int(os.environ.get("TORCHTPU_FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

FLOATS = (torch.float32, torch.bfloat16)
ALL = (torch.float32, torch.int64, torch.bfloat16, torch.int32, torch.bool)
BITS = (torch.int64, torch.int32, torch.bool)
RAISES = (RuntimeError, IndexError, ValueError, TypeError)
# float32 tight (a few ulps of libm against XLA's approximations), bfloat16 loose (CPU rounds each op's
# float result to bf16, XLA may keep an intermediate in bf16). An entry may widen both by its `tol`.
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2}}
SPECIAL_VALUES = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e30)

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


def elementwise(fn, choices=ALL, tol: float = 1.0):
    """An entry with one tensor argument of any shape and layout."""
    def build(draw):
        return Call(fn, [tensor(draw, draw(shapes()), draw(dtypes(choices)))], tol)
    return build


# ---------------------------------------------------------------- unary elementwise
special = torch.special
UNARY = {
    "abs": elementwise(torch.abs), "neg": elementwise(torch.neg), "sign": elementwise(torch.sign),
    "sgn": elementwise(torch.sgn), "square": elementwise(torch.square), "relu": elementwise(torch.relu),
    "ceil": elementwise(torch.ceil), "floor": elementwise(torch.floor), "round": elementwise(torch.round),
    "round_decimals": elementwise(partial(torch.round, decimals=1), FLOATS), "trunc": elementwise(torch.trunc),
    "frac": elementwise(torch.frac, FLOATS), "reciprocal": elementwise(torch.reciprocal),
    "sqrt": elementwise(torch.sqrt), "rsqrt": elementwise(torch.rsqrt), "exp": elementwise(torch.exp),
    "exp2": elementwise(torch.exp2), "expm1": elementwise(torch.expm1), "log": elementwise(torch.log),
    "log2": elementwise(torch.log2), "log10": elementwise(torch.log10), "log1p": elementwise(torch.log1p),
    "sin": elementwise(torch.sin), "cos": elementwise(torch.cos), "tan": elementwise(torch.tan),
    "asin": elementwise(torch.asin), "acos": elementwise(torch.acos), "atan": elementwise(torch.atan),
    "sinh": elementwise(torch.sinh), "cosh": elementwise(torch.cosh), "tanh": elementwise(torch.tanh),
    "asinh": elementwise(torch.asinh), "acosh": elementwise(torch.acosh), "atanh": elementwise(torch.atanh),
    "sigmoid": elementwise(torch.sigmoid), "erf": elementwise(torch.erf), "erfc": elementwise(torch.erfc),
    "erfinv": elementwise(torch.erfinv), "lgamma": elementwise(torch.lgamma), "digamma": elementwise(torch.digamma),
    # Floats only: at the poles (non-positive integers) CPU returns a large finite number, tpu inf (excluded,
    # see docs/reliability.md).
    "polygamma_1": elementwise(partial(torch.polygamma, 1), FLOATS), "i0": elementwise(torch.i0),
    "sinc": elementwise(torch.sinc), "logit": elementwise(torch.logit),
    "logit_eps": elementwise(partial(torch.logit, eps=0.1)), "angle": elementwise(torch.angle),
    "isnan": elementwise(torch.isnan), "isinf": elementwise(torch.isinf), "isposinf": elementwise(torch.isposinf),
    "isneginf": elementwise(torch.isneginf), "isfinite": elementwise(torch.isfinite),
    "signbit": elementwise(torch.signbit), "nan_to_num": elementwise(torch.nan_to_num),
    "nan_to_num_values": elementwise(partial(torch.nan_to_num, nan=1.5, posinf=9.0, neginf=-9.0)),
    "bitwise_not": elementwise(torch.bitwise_not, BITS), "frexp": elementwise(torch.frexp, FLOATS),
    "logical_not": elementwise(torch.logical_not),
    "pow_2": elementwise(partial(torch.pow, exponent=2)), "pow_3": elementwise(partial(torch.pow, exponent=3)),
    "pow_half": elementwise(partial(torch.pow, exponent=0.5)),
    "pow_negative": elementwise(partial(torch.pow, exponent=-1.5)),
    "scalar_pow": elementwise(partial(torch.pow, 2)),
    "clamp": elementwise(partial(torch.clamp, min=-1, max=1.5)),
    "clamp_inverted": elementwise(partial(torch.clamp, min=1, max=-1)),
    "clamp_min": elementwise(partial(torch.clamp_min, min=-0.5)),
    "clamp_max": elementwise(partial(torch.clamp_max, max=0.5)),
    "ndtri": elementwise(special.ndtri), "log_ndtr": elementwise(special.log_ndtr),
    "ndtr": elementwise(special.ndtr), "erfcx": elementwise(special.erfcx), "i0e": elementwise(special.i0e),
    "i1": elementwise(special.i1), "i1e": elementwise(special.i1e), "entr": elementwise(special.entr),
    "bessel_j0": elementwise(special.bessel_j0), "bessel_j1": elementwise(special.bessel_j1),
    "bessel_y0": elementwise(special.bessel_y0), "bessel_y1": elementwise(special.bessel_y1),
    "modified_bessel_i0": elementwise(special.modified_bessel_i0),
    "modified_bessel_i1": elementwise(special.modified_bessel_i1),
    "modified_bessel_k0": elementwise(special.modified_bessel_k0),
    "modified_bessel_k1": elementwise(special.modified_bessel_k1),
    "scaled_modified_bessel_k0": elementwise(special.scaled_modified_bessel_k0),
    "scaled_modified_bessel_k1": elementwise(special.scaled_modified_bessel_k1),
    "spherical_bessel_j0": elementwise(special.spherical_bessel_j0),
    "gelu": elementwise(F.gelu), "gelu_tanh": elementwise(partial(F.gelu, approximate="tanh")),
    "silu": elementwise(F.silu), "mish": elementwise(F.mish), "softplus": elementwise(F.softplus),
    "softplus_beta": elementwise(partial(F.softplus, beta=2.0, threshold=1.0)), "elu": elementwise(F.elu),
    "elu_alpha": elementwise(partial(F.elu, alpha=0.5)), "selu": elementwise(F.selu), "celu": elementwise(F.celu),
    "leaky_relu": elementwise(partial(F.leaky_relu, negative_slope=0.1)),
    "hardtanh": elementwise(partial(F.hardtanh, min_val=-0.5, max_val=0.5)),
    "hardswish": elementwise(F.hardswish), "hardsigmoid": elementwise(F.hardsigmoid),
    "hardshrink": elementwise(partial(F.hardshrink, lambd=0.5)),
    "softshrink": elementwise(partial(F.softshrink, lambd=0.5)), "tanhshrink": elementwise(F.tanhshrink),
    "logsigmoid": elementwise(F.logsigmoid), "relu6": elementwise(F.relu6),
    "threshold": elementwise(partial(F.threshold, threshold=0.5, value=-1.0)),
}


# ---------------------------------------------------------------- binary: broadcasting, promotion, scalars
def binary(fn, choices=ALL, tol: float = 1.0, reflect: bool = False):
    """An entry with a tensor and a second operand: a broadcasting tensor of any dtype, a Python number or
    a 0-dim CPU tensor (either side). `reflect` swaps the operands of the call, so a Python number comes
    first (`2 - x`, `2 ** x`)."""
    call = (lambda a, b: fn(b, a)) if reflect else fn
    def build(draw):
        shape = draw(shapes())
        x = tensor(draw, shape, draw(dtypes(choices)))
        kind = draw(st.sampled_from(["tensor", "python", "cpu_scalar"]))
        if kind == "python":
            number = draw(python_scalars)
            return Call(lambda a: call(a, number), [x], tol)
        if kind == "cpu_scalar":
            other = Input(values((), draw(dtypes(choices)), draw(st.integers(0, 2**16))), stays_on_cpu=True)
        else:
            other = tensor(draw, draw(broadcast_shapes(shape)), draw(dtypes(choices)))
        swap = draw(st.booleans())
        return Call(call, [other, x] if swap else [x, other], tol)
    return build


BINARY = {
    "add": binary(torch.add), "add_alpha": binary(partial(torch.add, alpha=2)),
    "sub": binary(torch.sub), "sub_alpha": binary(partial(torch.sub, alpha=-3)), "rsub": binary(torch.rsub),
    "mul": binary(torch.mul), "div": binary(torch.div),
    "div_trunc": binary(partial(torch.div, rounding_mode="trunc")),
    "div_floor": binary(partial(torch.div, rounding_mode="floor")),
    "floor_divide": binary(torch.floor_divide), "remainder": binary(torch.remainder),
    "fmod": binary(torch.fmod),
    "pow": binary(torch.pow), "atan2": binary(torch.atan2), "maximum": binary(torch.maximum),
    "minimum": binary(torch.minimum), "fmax": binary(torch.fmax), "fmin": binary(torch.fmin),
    "hypot": binary(torch.hypot), "copysign": binary(torch.copysign), "logaddexp": binary(torch.logaddexp),
    "logaddexp2": binary(torch.logaddexp2), "nextafter": binary(torch.nextafter), "xlogy": binary(torch.xlogy),
    "xlog1py": binary(special.xlog1py), "zeta": binary(special.zeta), "igamma": binary(torch.igamma),
    "igammac": binary(torch.igammac), "heaviside": binary(torch.heaviside),
    "bitwise_and": binary(torch.bitwise_and, BITS), "bitwise_or": binary(torch.bitwise_or, BITS),
    "bitwise_xor": binary(torch.bitwise_xor, BITS), "logical_and": binary(torch.logical_and),
    "logical_or": binary(torch.logical_or), "logical_xor": binary(torch.logical_xor),
    "eq": binary(torch.eq), "ne": binary(torch.ne), "lt": binary(torch.lt), "le": binary(torch.le),
    "gt": binary(torch.gt), "ge": binary(torch.ge),
    "reflected_sub": binary(operator.sub, reflect=True), "reflected_div": binary(operator.truediv, reflect=True),
    "reflected_floordiv": binary(operator.floordiv, reflect=True),
    "reflected_mod": binary(operator.mod, reflect=True), "reflected_pow": binary(operator.pow, reflect=True),
    "chebyshev_t": binary(special.chebyshev_polynomial_t), "chebyshev_u": binary(special.chebyshev_polynomial_u),
    "hermite_h": binary(special.hermite_polynomial_h), "hermite_he": binary(special.hermite_polynomial_he),
    "laguerre_l": binary(special.laguerre_polynomial_l), "legendre_p": binary(special.legendre_polynomial_p),
}


# ---------------------------------------------------------------- pointwise with three operands
def ternary(fn, choices=FLOATS, scalar_last: bool = False, tol: float = 1.0):
    """An entry with a tensor and two broadcasting operands; the last may be a Python number."""
    def build(draw):
        shape = draw(shapes())
        dtype = draw(dtypes(choices))
        x = tensor(draw, shape, dtype)
        b = tensor(draw, draw(broadcast_shapes(shape)), draw(dtypes(choices)))
        if scalar_last and draw(st.booleans()):
            number = draw(python_scalars)
            return Call(lambda p, q: fn(p, q, number), [x, b], tol)
        c = tensor(draw, draw(broadcast_shapes(shape)), draw(dtypes(choices)))
        return Call(fn, [x, b, c], tol)
    return build


def where(draw):
    shape = draw(shapes())
    cond = tensor(draw, draw(broadcast_shapes(shape)), torch.bool)
    x = tensor(draw, shape, draw(dtypes()))
    if draw(st.booleans()):
        number = draw(python_scalars)
        return Call(lambda c, a: torch.where(c, a, number), [cond, x])
    return Call(torch.where, [cond, x, tensor(draw, draw(broadcast_shapes(shape)), draw(dtypes()))])


POINTWISE = {
    "clamp_tensors": ternary(torch.clamp, ALL), "lerp": ternary(torch.lerp, scalar_last=True),
    "addcmul": ternary(partial(torch.addcmul, value=0.5), ALL),
    "addcdiv": ternary(partial(torch.addcdiv, value=-2), ALL), "where": where,
    "clamp_min_only": binary(lambda a, b: torch.clamp(a, min=b)),
    "clamp_max_only": binary(lambda a, b: torch.clamp(a, max=b)),
}


# ---------------------------------------------------------------- reductions
def reduce_dims(draw, shape, kind: str):
    """The dim argument of a reduction: one dim, a list of distinct dims (maybe empty), or None."""
    if kind.endswith("or_none") and draw(st.integers(0, 3)) == 0:
        return None
    if kind.startswith("one"):
        return dim_of(draw, shape)
    picked = draw(st.lists(st.integers(0, max(len(shape), 1) - 1), unique=True, max_size=max(len(shape), 1),
                           min_size=1 if kind.startswith("nonempty") else 0))
    return [d - len(shape) if draw(st.booleans()) and shape else d for d in picked]


def reduction(fn, dims: str = "list_or_none", choices=ALL, extra=st.none(), tol: float = 10.0,
              specials: tuple = SPECIAL_VALUES):
    """fn(x, dim, keepdim, extra); reductions sum in another order than CPU, hence the wider tolerance."""
    def build(draw):
        shape = draw(shapes())
        x = tensor(draw, shape, draw(dtypes(choices)), specials=specials)
        dim, keepdim, argument = reduce_dims(draw, shape, dims), draw(st.booleans()), draw(extra)
        return Call(lambda t: fn(t, dim, keepdim, argument), [x], tol)
    return build


# CPU's std/var_mean accumulate in double with Welford's update: the std of values near 1e30 stays finite
# and an infinite input makes the mean NaN; tpu accumulates in float32 and sums (excluded, see
# docs/reliability.md).
WELFORD_SAFE = (math.nan, 0.0, -0.0)


def picked(x, dim, keepdim, result):
    """(values, x at the returned indices): ties may pick any index, so the indices are checked by what they
    select."""
    values, index = result
    if x.dim() and not keepdim:
        index = index.unsqueeze(dim)
    chosen = x.gather(dim, index) if x.dim() else x.gather(0, index)
    return values, chosen.squeeze(dim) if x.dim() and not keepdim else chosen


def all_dims_if_none(dim):
    return () if dim is None else dim


REDUCTIONS = {
    "sum": reduction(lambda x, d, k, _: torch.sum(x, d, keepdim=k)),
    "sum_dtype": reduction(lambda x, d, k, _: torch.sum(x, d, keepdim=k, dtype=torch.float32)),
    # nansum and nanmean take no empty dim list: CPU then reduces every dim, the meta kernel none, so tpu's
    # result has the wrong shape (excluded, see docs/reliability.md).
    "nansum": reduction(lambda x, d, k, _: torch.nansum(x, d, keepdim=k), "nonempty_list_or_none", FLOATS),
    "mean": reduction(lambda x, d, k, _: torch.mean(x, d, keepdim=k)),
    "nanmean": reduction(lambda x, d, k, _: torch.nanmean(x, d, keepdim=k), "nonempty_list_or_none", FLOATS),
    "amax": reduction(lambda x, d, k, _: torch.amax(x, all_dims_if_none(d), k)),
    "amin": reduction(lambda x, d, k, _: torch.amin(x, all_dims_if_none(d), k)),
    "prod": reduction(lambda x, d, k, _: torch.prod(x) if d is None else torch.prod(x, d, keepdim=k), "one_or_none"),
    "argmax": reduction(lambda x, d, k, _: torch.argmax(x, d, keepdim=k), "one_or_none"),
    "argmin": reduction(lambda x, d, k, _: torch.argmin(x, d, keepdim=k), "one_or_none"),
    "max_dim": reduction(lambda x, d, k, _: picked(x, d, k, torch.max(x, d, keepdim=k)), "one"),
    "min_dim": reduction(lambda x, d, k, _: picked(x, d, k, torch.min(x, d, keepdim=k)), "one"),
    "max": reduction(lambda x, d, k, _: torch.max(x), "none"),
    "aminmax": reduction(lambda x, d, k, _: torch.aminmax(x, dim=d, keepdim=k), "one_or_none"),
    "var": reduction(lambda x, d, k, c: torch.var(x, d, correction=c, keepdim=k), choices=FLOATS,
                     extra=st.sampled_from([1, 0, 2])),
    "std": reduction(lambda x, d, k, c: torch.std(x, d, correction=c, keepdim=k), choices=FLOATS,
                     extra=st.sampled_from([1, 0, 2]), specials=WELFORD_SAFE),
    "var_mean": reduction(lambda x, d, k, c: torch.var_mean(x, d, correction=c, keepdim=k), choices=FLOATS,
                          extra=st.sampled_from([1, 0]), specials=WELFORD_SAFE),
    "std_mean": reduction(lambda x, d, k, c: torch.std_mean(x, d, correction=c, keepdim=k), choices=FLOATS,
                          extra=st.sampled_from([1, 0]), specials=WELFORD_SAFE),
    # An empty dim list is left out: CPU then raises on its own broadcast of the result (excluded, see
    # docs/reliability.md).
    "logsumexp": reduction(lambda x, d, k, _: torch.logsumexp(x, d, keepdim=k), "nonempty_list"),
    "vector_norm": reduction(lambda x, d, k, p: torch.linalg.vector_norm(x, p, d, k), choices=FLOATS,
                             extra=st.sampled_from([2, 1, math.inf, -math.inf, 0, 3, 0.5])),
    "norm": reduction(lambda x, d, k, p: torch.norm(x, p, d, k), choices=FLOATS,
                      extra=st.sampled_from([2, 1, math.inf, 3])),
    "all": reduction(lambda x, d, k, _: torch.all(x, all_dims_if_none(d), keepdim=k), "list"),
    "any": reduction(lambda x, d, k, _: torch.any(x, all_dims_if_none(d), keepdim=k), "list"),
    "count_nonzero": reduction(lambda x, d, k, _: torch.count_nonzero(x, d)),
    "median": reduction(lambda x, d, k, _: torch.median(x) if d is None else picked(x, d, k, torch.median(x, d, k)),
                        "one_or_none"),
    "nanmedian": reduction(lambda x, d, k, _: torch.nanmedian(x) if d is None
                           else picked(x, d, k, torch.nanmedian(x, d, k)), "one_or_none", FLOATS),
    # No NaN: CPU's mode of a slice holding NaN depends on its sort's order of NaN (excluded, see
    # docs/reliability.md).
    "mode": reduction(lambda x, d, k, _: torch.mode(x, d, k), "one", specials=(math.inf, -math.inf, 0.0, -0.0)),
    "kthvalue": reduction(lambda x, d, k, kth: picked(x, d, k, torch.kthvalue(x, kth, d, k)), "one",
                          extra=st.sampled_from([1, 2, 3, 5])),
}


# ---------------------------------------------------------------- cumulative
def cumulative(fn, choices=ALL, tol: float = 10.0):
    def build(draw):
        shape = draw(shapes())
        x = tensor(draw, shape, draw(dtypes(choices)))
        dim = dim_of(draw, shape)
        return Call(lambda t: fn(t, dim), [x], tol)
    return build


def scanned(x, dim, result):
    values, index = result
    return values, x.gather(dim, index) if x.dim() else x.gather(0, index)


CUMULATIVE = {
    "cumsum": cumulative(torch.cumsum),
    "cumsum_dtype": cumulative(partial(torch.cumsum, dtype=torch.float32)),
    "cumprod": cumulative(torch.cumprod),
    "cummax": cumulative(lambda x, d: scanned(x, d, torch.cummax(x, d))),
    "cummin": cumulative(lambda x, d: scanned(x, d, torch.cummin(x, d))),
    "logcumsumexp": cumulative(torch.logcumsumexp, FLOATS),
}


# ---------------------------------------------------------------- shape and view ops
def shaped(make):
    """An entry whose op `make(draw, shape)` builds for a tensor of random shape, dtype and layout."""
    def build(draw):
        shape = draw(shapes())
        x = tensor(draw, shape, draw(dtypes()))
        return Call(make(draw, shape), [x])
    return build


def reshape(draw, shape):
    numel = math.prod(shape)
    target = draw(st.sampled_from([shape[::-1], (-1,), (1, -1), (numel, 1), shape + (1,), (2, -1)]))
    return lambda x: x.reshape(target)


def view(draw, shape):
    target = draw(st.sampled_from([(-1,), shape[::-1], (1,) + shape]))
    return lambda x: x.view(target)


def permute(draw, shape):
    order = draw(st.permutations(range(len(shape))))
    return lambda x: x.permute(order)


def transpose(draw, shape):
    a, b = dim_of(draw, shape), dim_of(draw, shape)
    return lambda x: x.transpose(a, b)


def expand(draw, shape):
    target = (draw(SIZES),) + tuple(draw(st.sampled_from([d, 3])) if d == 1 else d for d in shape)
    return lambda x: x.expand(target)


def narrow(draw, shape):
    dim = dim_of(draw, shape)
    start = draw(st.integers(0, size_at(shape, dim)))
    length = draw(st.integers(0, size_at(shape, dim) - start))
    return lambda x: x.narrow(dim, start, length)


def select(draw, shape):
    dim = dim_of(draw, shape)
    index = draw(st.integers(-size_at(shape, dim) - 1, size_at(shape, dim)))  # one past each end: IndexError
    return lambda x: x.select(dim, index)


def step_slice(draw, shape):
    dim = dim_of(draw, shape)
    start, stop = draw(st.integers(-5, 5)), draw(st.one_of(st.none(), st.integers(-5, 5)))
    step = draw(st.integers(1, 3))
    index = (slice(None),) * (dim % max(len(shape), 1)) + (slice(start, stop, step),)
    return lambda x: x[index]


def flip(draw, shape):
    dims = draw(st.lists(st.integers(0, max(len(shape), 1) - 1), unique=True, max_size=len(shape)))
    return lambda x: x.flip(dims)


def roll(draw, shape):
    shift = draw(st.integers(-5, 5))
    if draw(st.booleans()) or not shape:
        return lambda x: x.roll(shift)
    dims = draw(st.lists(st.integers(0, max(len(shape), 1) - 1), unique=True, min_size=1, max_size=len(shape)))
    shifts = [shift + i for i in range(len(dims))]
    return lambda x: x.roll(shifts, dims)


def split(draw, shape):
    dim = dim_of(draw, shape)
    if draw(st.booleans()):
        size = draw(st.integers(1, 3))
        return lambda x: x.split(size, dim)
    first = draw(st.integers(0, size_at(shape, dim)))
    return lambda x: x.split([first, x.shape[dim] - first], dim)


def chunk(draw, shape):
    chunks, dim = draw(st.integers(1, 4)), dim_of(draw, shape)
    return lambda x: x.chunk(chunks, dim)


def unsqueeze_squeeze(draw, shape):
    dim = dim_of(draw, shape)
    return lambda x: x.unsqueeze(dim).squeeze()


def diagonal(draw, shape):
    offset = draw(st.integers(-2, 2))
    return lambda x: x.diagonal(offset, 0, -1) if x.dim() >= 2 else x.diagonal(offset)


def triangle(fn):
    def make(draw, shape):
        diagonal_index = draw(st.integers(-2, 2))
        return lambda x: fn(x, diagonal_index)
    return make


def repeat(draw, shape):
    times = tuple(draw(st.integers(0, 2)) for _ in range(len(shape) + draw(st.integers(0, 1))))
    return lambda x: x.repeat(times)


def unfold(draw, shape):
    dim, size, step = dim_of(draw, shape), draw(st.integers(0, 3)), draw(st.integers(1, 2))
    return lambda x: x.unfold(dim, size, step) * 1


def pad(draw, shape):
    pads = [draw(st.integers(-1, 2)) for _ in range(2 * draw(st.integers(0, min(len(shape), 2))))]
    value = draw(st.sampled_from([0, 1.5]))
    return lambda x: F.pad(x, pads, value=value)


def movedim(draw, shape):
    source, destination = dim_of(draw, shape), dim_of(draw, shape)
    return lambda x: torch.movedim(x, source, destination).contiguous()


def flatten(draw, shape):
    start = dim_of(draw, shape)
    return lambda x: x.flatten(start)


def joined(draw):
    """cat or stack of 1-3 tensors that agree except (for cat) along the dim; dtypes may differ."""
    shape = draw(shapes(min_rank=1))
    dim = dim_of(draw, shape)
    stack = draw(st.booleans())
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        part = list(shape)
        if not stack:
            part[dim] = draw(SIZES)
        parts.append(tensor(draw, part, draw(dtypes())))
    if not stack and draw(st.integers(0, 3)) == 0:
        parts.append(Input(torch.empty(0)))  # the legacy empty 1-D tensor that cat skips
    return Call(lambda *ts: torch.stack(ts, dim) if stack else torch.cat(ts, dim), parts)


SHAPE = {
    "reshape": shaped(reshape), "view": shaped(view), "permute": shaped(permute), "transpose": shaped(transpose),
    "expand": shaped(expand), "narrow": shaped(narrow), "select": shaped(select), "step_slice": shaped(step_slice),
    "flip": shaped(flip), "roll": shaped(roll), "split": shaped(split), "chunk": shaped(chunk),
    "unsqueeze_squeeze": shaped(unsqueeze_squeeze), "diagonal": shaped(diagonal), "tril": shaped(triangle(torch.tril)),
    "triu": shaped(triangle(torch.triu)),
    "repeat": shaped(repeat), "unfold": shaped(unfold), "pad": shaped(pad), "movedim": shaped(movedim),
    "flatten": shaped(flatten), "cat_stack": joined,
    "contiguous": shaped(lambda draw, shape: lambda x: x.contiguous()),
    "clone": shaped(lambda draw, shape: torch.clone),
}


# ---------------------------------------------------------------- indexing
def gather(draw):
    shape = draw(shapes())
    x = tensor(draw, shape, draw(dtypes()))
    dim = dim_of(draw, shape)
    index_shape = [draw(st.integers(0, d)) for d in shape]
    if shape:
        index_shape[dim] = draw(st.integers(0, 4)) if shape[dim] else 0
    return Call(lambda t, i: torch.gather(t, dim, i), [x, indices(draw, size_at(shape, dim), index_shape)])


def scatter(reduce_kind: str):
    """scatter (src, unique indices so the result is defined), scatter with a value, scatter_add and
    scatter_reduce (repeated indices)."""
    def build(draw):
        shape = draw(shapes())
        dtype = draw(dtypes(ALL if reduce_kind in ("src", "value") else (torch.float32, torch.int64, torch.bfloat16)))
        x = tensor(draw, shape, dtype)
        dim = dim_of(draw, shape)
        index_shape = [draw(st.integers(0, d)) for d in shape]
        unique = reduce_kind in ("src", "value")
        if shape and not unique:
            index_shape[dim] = draw(st.integers(0, 4)) if shape[dim] else 0
        unique_dim = dim % max(len(shape), 1) if unique else None
        index = indices(draw, size_at(shape, dim), index_shape, unique_dim=unique_dim)
        if reduce_kind == "value":
            number = draw(fill_values(dtype))
            return Call(lambda t, i: torch.scatter(t, dim, i, number), [x, index])
        src = tensor(draw, index_shape, dtype, layout="contiguous")
        if reduce_kind == "src":
            return Call(lambda t, i, s: torch.scatter(t, dim, i, s), [x, index, src])
        if reduce_kind == "add":
            return Call(lambda t, i, s: torch.scatter_add(t, dim, i, s), [x, index, src], tol=10)
        include_self = draw(st.booleans())
        return Call(lambda t, i, s: torch.scatter_reduce(t, dim, i, s, reduce_kind, include_self=include_self),
                    [x, index, src], tol=10)
    return build


def index_select(draw):
    shape = draw(shapes())
    dim = dim_of(draw, shape)
    index = indices(draw, size_at(shape, dim), (draw(SIZES),) if shape[dim:] else ())
    return Call(lambda t, i: torch.index_select(t, dim, i), [tensor(draw, shape, draw(dtypes())), index])


def index_update(kind: str):
    """index_add / index_copy (unique indices) / index_fill along a dim."""
    def build(draw):
        shape = draw(shapes(min_rank=1))
        dtype = draw(dtypes())
        dim = dim_of(draw, shape)
        count = draw(st.integers(0, shape[dim]))
        index = indices(draw, shape[dim], (count,), unique_dim=0 if kind == "copy" else None)
        x = tensor(draw, shape, dtype)
        if kind == "fill":
            number = draw(fill_values(dtype))
            return Call(lambda t, i: torch.index_fill(t, dim, i, number), [x, index])
        source_shape = list(shape)
        source_shape[dim] = count
        source = tensor(draw, source_shape, dtype)
        if kind == "copy":
            return Call(lambda t, i, s: torch.index_copy(t, dim, i, s), [x, index, source])
        return Call(lambda t, i, s: torch.index_add(t, dim, i, s, alpha=2), [x, index, source], tol=10)
    return build


def take_put(kind: str):
    def build(draw):
        shape = draw(shapes())
        dtype = draw(dtypes())
        numel = math.prod(shape)
        index_shape = draw(shapes(max_rank=2)) if numel else (0,)
        accumulate = kind == "put" and draw(st.booleans())
        unique = kind == "put" and not accumulate
        count = math.prod(index_shape)
        if unique:
            index_shape, count = (min(count, numel),), min(count, numel)
        index = indices(draw, numel, index_shape, low=-numel, unique_dim=0 if unique else None)
        x = tensor(draw, shape, dtype)
        if kind == "take":
            return Call(torch.take, [x, index])
        source = tensor(draw, index_shape, dtype, layout="contiguous")
        return Call(lambda t, i, s: t.put(i, s, accumulate), [x, index, source], tol=10)
    return build


def advanced_index(draw):
    """x[i], x[:, i], x[i, j] with index tensors that broadcast, negative indices included."""
    shape = draw(shapes(min_rank=1))
    x = tensor(draw, shape, draw(dtypes()))
    form = draw(st.sampled_from(["first", "second", "pair"] if len(shape) >= 2 else ["first"]))
    first_size = shape[1] if form == "second" else shape[0]
    i = indices(draw, first_size, draw(shapes(max_rank=2)), low=-first_size)
    if form == "first":
        return Call(lambda t, a: t[a], [x, i])
    if form == "second":
        return Call(lambda t, a: t[:, a], [x, i])
    j = indices(draw, shape[1], draw(shapes(max_rank=1)), low=-shape[1])
    return Call(lambda t, a, b: t[a, b], [x, i, j])


def index_put(draw):
    shape = draw(shapes(min_rank=1))
    dtype = draw(dtypes())
    accumulate = draw(st.booleans())
    count = draw(st.integers(0, shape[0]))
    index = indices(draw, shape[0], (count,), unique_dim=None if accumulate else 0)
    update = tensor(draw, (count,) + shape[1:] if draw(st.booleans()) else shape[-1:], dtype)
    return Call(lambda t, i, v: torch.index_put(t, (i,), v, accumulate), [tensor(draw, shape, dtype), index, update],
                tol=10)


def masked_fill(draw):
    shape = draw(shapes())
    mask = tensor(draw, draw(broadcast_shapes(shape)), torch.bool)
    dtype = draw(dtypes())
    x = tensor(draw, shape, dtype)
    if draw(st.booleans()):
        number = draw(fill_values(dtype))
        return Call(lambda t, m: t.masked_fill(m, number), [x, mask])
    fill = Input(values((), draw(dtypes()), draw(st.integers(0, 2**16))), stays_on_cpu=draw(st.booleans()))
    return Call(lambda t, m, v: t.masked_fill(m, v), [x, mask, fill])


INDEXING = {
    "gather": gather, "scatter": scatter("src"), "scatter_value": scatter("value"), "scatter_add": scatter("add"),
    "scatter_reduce_sum": scatter("sum"), "scatter_reduce_prod": scatter("prod"),
    "scatter_reduce_mean": scatter("mean"), "scatter_reduce_amax": scatter("amax"),
    "scatter_reduce_amin": scatter("amin"), "index_select": index_select, "index_add": index_update("add"),
    "index_copy": index_update("copy"), "index_fill": index_update("fill"), "take": take_put("take"),
    "put": take_put("put"), "advanced_index": advanced_index, "index_put": index_put, "masked_fill": masked_fill,
}


# ---------------------------------------------------------------- sorting and searching
def sort(draw):
    shape = draw(shapes())
    x = tensor(draw, shape, draw(dtypes()))
    dim, descending, stable = dim_of(draw, shape), draw(st.booleans()), draw(st.booleans())
    if stable:  # a stable sort's indices are defined: compare them as they are
        return Call(lambda t: torch.sort(t, dim=dim, descending=descending, stable=True), [x])
    return Call(lambda t: scanned(t, dim, torch.sort(t, dim=dim, descending=descending)), [x])


def topk(draw):
    shape = draw(shapes())
    x = tensor(draw, shape, draw(dtypes()))
    dim, largest = dim_of(draw, shape), draw(st.booleans())
    k = draw(st.integers(0, size_at(shape, dim) + 1))  # one past the size: CPU raises
    return Call(lambda t: scanned(t, dim, torch.topk(t, k, dim, largest=largest)), [x])


def argsort(draw):
    shape = draw(shapes())
    dim, descending = dim_of(draw, shape), draw(st.booleans())
    return Call(lambda t: torch.argsort(t, dim=dim, descending=descending, stable=True),
                [tensor(draw, shape, draw(dtypes()))])


def searchsorted(draw):
    """searchsorted / bucketize: boundaries sorted along the last dim, values of any shape."""
    rows = draw(shapes(max_rank=1))
    length = draw(SIZES)
    dtype = draw(dtypes((torch.float32, torch.int64, torch.int32)))
    boundaries = values(rows + (length,), dtype, draw(st.integers(0, 2**16))).sort(-1).values
    right = draw(st.booleans())
    if not rows and draw(st.booleans()):
        probe = tensor(draw, draw(shapes()), dtype)
        return Call(lambda v, b: torch.bucketize(v, b, right=right), [probe, Input(boundaries)])
    probe = tensor(draw, rows + (draw(SIZES),), dtype)
    return Call(lambda b, v: torch.searchsorted(b, v, right=right), [Input(boundaries), probe])


def isin(draw):
    elements = tensor(draw, draw(shapes()), torch.int64)
    # Contiguous test elements only: CPU's isin views them flat and raises for a transposed or stepped tensor,
    # which tpu takes (excluded, see docs/reliability.md).
    test = tensor(draw, draw(shapes(max_rank=2)), torch.int64, layout="contiguous")
    invert = draw(st.booleans())
    return Call(lambda e, t: torch.isin(e, t, invert=invert), [elements, test])


def histc(draw):
    bins, low, high = draw(st.integers(1, 5)), draw(st.sampled_from([0, -1])), draw(st.sampled_from([0, 2]))
    # Finite values: with low == high the range comes from the data, and CPU raises for an infinite or NaN
    # one, a check of the data tpu does not make (excluded, see docs/reliability.md).
    x = tensor(draw, draw(shapes()), draw(dtypes(FLOATS)), specials=(0.0, -0.0, 1e30))
    return Call(lambda t: torch.histc(t, bins, low, high), [x])


SORTING = {"sort": sort, "topk": topk, "argsort": argsort, "searchsorted": searchsorted, "isin": isin,
           "msort": elementwise(torch.msort), "histc": histc}


# ---------------------------------------------------------------- products
def product(make):
    """An entry whose op and operand shapes `make(draw, n, k, m, b)` chooses, from small sizes."""
    def build(draw):
        n, k, m, b = (draw(SIZES) for _ in range(4))
        dtype = draw(dtypes())
        fn, operand_shapes = make(draw, n, k, m, b)
        return Call(fn, [tensor(draw, s, dtype) for s in operand_shapes], tol=10)
    return build


def matmul_ranks(draw, n, k, m, b):
    left = draw(st.sampled_from([(n, k), (k,), (b, n, k), (2, b, n, k)]))
    right = draw(st.sampled_from([(k, m), (k,), (b, k, m), (1, k, m)]))
    return torch.matmul, [left, right]


PRODUCTS = {
    "mm": product(lambda draw, n, k, m, b: (torch.mm, [(n, k), (k, m)])),
    "bmm": product(lambda draw, n, k, m, b: (torch.bmm, [(b, n, k), (b, k, m)])),
    "matmul": product(matmul_ranks),
    # Integer beta: with k == 0, CPU scales self by a fractional beta through a path that refuses integer
    # outputs, which its k > 0 path accepts (excluded, see docs/reliability.md).
    "addmm": product(lambda draw, n, k, m, b: (partial(torch.addmm, beta=2, alpha=-1),
                                               [draw(st.sampled_from([(n, m), (m,), (1, m)])), (n, k), (k, m)])),
    "addmv": product(lambda draw, n, k, m, b: (partial(torch.addmv, alpha=-1), [(n,), (n, k), (k,)])),
    "addr": product(lambda draw, n, k, m, b: (torch.addr, [(n, m), (n,), (m,)])),
    "baddbmm": product(lambda draw, n, k, m, b: (partial(torch.baddbmm, beta=2), [(b, n, m), (b, n, k), (b, k, m)])),
    "addbmm": product(lambda draw, n, k, m, b: (torch.addbmm, [(n, m), (b, n, k), (b, k, m)])),
    "dot": product(lambda draw, n, k, m, b: (torch.dot, [(k,), (k,)])),
    "vdot": product(lambda draw, n, k, m, b: (torch.vdot, [(k,), (k,)])),
    "mv": product(lambda draw, n, k, m, b: (torch.mv, [(n, k), (k,)])),
    "outer": product(lambda draw, n, k, m, b: (torch.outer, [(n,), (m,)])),
    "einsum": product(lambda draw, n, k, m, b: (partial(torch.einsum, "bij,bjk->bik"), [(b, n, k), (b, k, m)])),
    "trace": product(lambda draw, n, k, m, b: (torch.trace, [(n, m)])),
    "cross": product(lambda draw, n, k, m, b: (partial(torch.linalg.cross, dim=-1), [(n, 3), (n, 3)])),
}


# ---------------------------------------------------------------- softmax
def softmax(fn):
    def build(draw):
        shape = draw(shapes())
        x = tensor(draw, shape, draw(dtypes(FLOATS)))
        dim = dim_of(draw, shape)
        dtype = draw(st.sampled_from([None, torch.float32]))
        return Call(lambda t: fn(t, dim, dtype=dtype), [x], tol=10)
    return build


SOFTMAX = {"softmax": softmax(torch.softmax), "log_softmax": softmax(torch.log_softmax),
           "softmin": softmax(F.softmin)}


# ---------------------------------------------------------------- nn: pooling, convolution, norms, resampling,
# activations, losses
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


# ---------------------------------------------------------------- in-place through non-contiguous views
VIEWS = {
    "whole": lambda s: s,
    "transposed": lambda s: s.transpose(0, -1),
    "stepped_rows": lambda s: s[::2],
    "stepped_columns_offset": lambda s: s[:, 1::2],
    "narrowed": lambda s: s.narrow(-1, 1, s.shape[-1] - 1),
    "row": lambda s: s[1],
    "diagonal": lambda s: s.diagonal(),
    "permuted_stepped": lambda s: s.permute(1, 0, *range(2, s.dim()))[::2],
}
# Not fuzzed: writes through an expanded view (elements sharing memory) and ops whose operands partly overlap
# the written tensor. CPU refuses both; tpu computes from the old values (excluded, see docs/reliability.md).

INPLACE = {
    "add_": lambda v, o: v.add_(o), "sub_alpha_": lambda v, o: v.sub_(o, alpha=2), "mul_": lambda v, o: v.mul_(o),
    "div_": lambda v, o: v.div_(o), "add_scalar_": lambda v, o: v.add_(1.5), "copy_": lambda v, o: v.copy_(o),
    "fill_": lambda v, o: v.fill_(2.5), "zero_": lambda v, o: v.zero_(), "neg_": lambda v, o: v.neg_(),
    "sin_": lambda v, o: v.sin_(), "clamp_": lambda v, o: v.clamp_(-0.5, 0.5), "pow_": lambda v, o: v.pow_(2),
    "addcmul_": lambda v, o: v.addcmul_(o, o, value=0.5), "lerp_": lambda v, o: v.lerp_(o, 0.25),
    "masked_fill_": lambda v, o: v.masked_fill_(o > 0, -1), "cumsum_": lambda v, o: v.cumsum_(0),
    "tril_": lambda v, o: v.tril_(),
    "index_fill_": lambda v, o: v.index_fill_(0, torch.tensor([0], device=v.device), 7),
    "relu_": lambda v, o: v.relu_(), "mul_out": lambda v, o: torch.mul(o, 3, out=v),
}


def inplace(draw):
    """An in-place op through a view of a storage; the whole storage is compared, so a write must land on
    exactly the view's elements."""
    storage_shape = draw(shapes(min_rank=2, max_rank=3))
    dtype = draw(dtypes())
    take_view = VIEWS[draw(st.sampled_from(sorted(VIEWS)))]
    op = INPLACE[draw(st.sampled_from(sorted(INPLACE)))]
    try:
        view_shape = take_view(torch.empty(storage_shape)).shape
    except RAISES:
        view_shape = storage_shape  # the view itself is out of range: CPU raises, so must tpu
    other_dtype = draw(dtypes())
    if op in (INPLACE["mul_"], INPLACE["addcmul_"]) and not torch.can_cast(torch.promote_types(dtype, other_dtype),
                                                                          dtype):
        other_dtype = dtype  # tpu's mul_ and addcmul_ cast a wider result where CPU refuses (excluded, see
        # docs/reliability.md)
    other = tensor(draw, draw(broadcast_shapes(tuple(view_shape))) if draw(st.booleans()) else view_shape,
                   other_dtype)

    def write(storage, operand):
        written = take_view(storage)
        op(written, operand)
        return storage, written
    return Call(write, [tensor(draw, storage_shape, dtype, layout="contiguous"), other])


FAMILIES = {
    "unary": UNARY, "binary": BINARY, "pointwise": POINTWISE, "reduction": REDUCTIONS, "cumulative": CUMULATIVE,
    "shape": SHAPE, "indexing": INDEXING, "sorting": SORTING, "product": PRODUCTS, "softmax": SOFTMAX,
    "nn": NN, "inplace": {"inplace": inplace},
}


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


ENTRIES = [(family, name) for family, table in FAMILIES.items() for name in sorted(table)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@FUZZ
@given(data=st.data())
def test_family(family, data):
    table = FAMILIES[family]
    name = data.draw(st.sampled_from(sorted(table)), label="entry")
    run(table[name](data.draw))




def rule_family(op: str) -> str:
    """'aten::add_.Tensor' and 'aten::add.out' both belong to the family 'add'."""
    return op.split("::")[-1].split(".")[0].rstrip("_")


def test_every_entry_runs_on_tpu_rules_and_covers_the_table():
    """Each entry once on its simplest case: it matches CPU, no op it dispatches falls back to the CPU, and
    together they reach a stated share of the rule families."""
    reached, fallbacks, failures = set(), {}, []
    for family, name in ENTRIES:
        torchtpu.reset_metrics()

        @settings(FUZZ, max_examples=1)
        @given(data=st.data())
        def once(data):
            run(FAMILIES[family][name](data.draw))
        try:
            once()
        except Exception as error:  # noqa: BLE001 - every failing entry is reported, not just the first
            failures.append(f"{family}/{name}: {error}")
        for op, counts in torchtpu.metrics()["ops"].items():
            if counts["executions"]:
                reached.add(rule_family(op))
            if counts["fallbacks"]:
                fallbacks.setdefault(op, []).append(name)
    assert not failures, "\n".join(failures)
    assert not fallbacks, f"ops the fuzzer reaches run on the CPU fallback: {fallbacks}"
    families = {rule_family(r) for r in torchtpu._C._rule_names()}
    share = len(reached & families) / len(families)
    assert share >= 0.45, f"the fuzzer reaches {share:.0%} of the rule families"
