"""Fuzzing reductions, scans, products and softmax, tpu against CPU (tests/fuzz_support.py)."""
import math
from functools import partial

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzz_support import (ALL, FLOATS, SIZES, SPECIAL_VALUES, WELFORD_SAFE, Call, dim_of, dtypes, family_test,
                          scanned, shapes, tensor)


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
                             extra=st.sampled_from([2, 1, 0, 3, 0.5])),
    "vector_norm_inf": reduction(lambda x, d, k, p: torch.linalg.vector_norm(x, p, d, k), choices=FLOATS,
                                 extra=st.sampled_from([math.inf, -math.inf])),
    "norm": reduction(lambda x, d, k, p: torch.norm(x, p, d, k), choices=FLOATS, extra=st.sampled_from([2, 1, 3])),
    "norm_inf": reduction(lambda x, d, k, p: torch.norm(x, p, d, k), choices=FLOATS, extra=st.just(math.inf)),
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


CUMULATIVE = {
    "cumsum": cumulative(torch.cumsum),
    "cumsum_dtype": cumulative(partial(torch.cumsum, dtype=torch.float32)),
    "cumprod": cumulative(torch.cumprod),
    "cummax": cumulative(lambda x, d: scanned(x, d, torch.cummax(x, d))),
    "cummin": cumulative(lambda x, d: scanned(x, d, torch.cummin(x, d))),
    "logcumsumexp": cumulative(torch.logcumsumexp, FLOATS),
}


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


FAMILIES = {"reduction": REDUCTIONS, "cumulative": CUMULATIVE, "product": PRODUCTS, "softmax": SOFTMAX}

test_family = family_test(FAMILIES)
