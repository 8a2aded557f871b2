"""Fuzzing ops that PyTorch decomposes into lowered ops (CompositeImplicitAutograd: no rule of their own, tpu
runs the pieces), tpu against CPU (tests/fuzz_support.py): distances and similarities, composite losses and
norms, statistics, products, differences and integrals."""
import math
from functools import partial

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzz_support import (FLOATS, SIZES, SPECIAL_VALUES, WELFORD_SAFE, Call, Input, broadcast_shapes, dim_of,
                          dtypes, elementwise, family_test, shapes, tensor)

NORMS = [2, 1, math.inf, 0.5, 3]


def for_norm(p) -> tuple:
    """The special values for an entry whose norm order is p. No 1e30 where p is above 2: CPU takes the norm
    of a single element as |x|, tpu as (|x|^p)^(1/p), which overflows (excluded, see docs/reliability.md)."""
    return tuple(v for v in SPECIAL_VALUES if v != 1e30) if p > 2 else SPECIAL_VALUES


def one_of_signs(draw, shape) -> Input:
    """A target of ±1 (the margin and embedding losses)."""
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    return Input(torch.randint(0, 2, shape, generator=g).float() * 2 - 1)


# ---------------------------------------------------------------- gated, normalized, distances
def glu(draw):
    shape = draw(shapes(min_rank=1))
    dim = dim_of(draw, shape)  # an odd size along dim raises on CPU, so must on tpu
    return Call(lambda t: F.glu(t, dim), [tensor(draw, shape, draw(dtypes(FLOATS)))])


def normalize(draw):
    shape = draw(shapes(min_rank=1))
    p, dim, eps = draw(st.sampled_from(NORMS)), dim_of(draw, shape), draw(st.sampled_from([1e-12, 0.1]))
    x = tensor(draw, shape, draw(dtypes(FLOATS)), specials=for_norm(p))
    return Call(lambda t: F.normalize(t, p, dim, eps), [x], tol=10)


def cosine_similarity(draw):
    shape = draw(shapes(min_rank=1))
    dtype = draw(dtypes(FLOATS))
    dim = draw(st.integers(-len(shape), -1))
    x, y = tensor(draw, shape, dtype), tensor(draw, draw(broadcast_shapes(shape)), dtype)
    eps = draw(st.sampled_from([1e-8, 0.5]))
    return Call(lambda a, b: F.cosine_similarity(a, b, dim, eps), [x, y], tol=10)


def pairwise_distance(draw):
    shape = (draw(SIZES), draw(SIZES))
    dtype = draw(dtypes(FLOATS))
    p, keepdim = draw(st.sampled_from(NORMS)), draw(st.booleans())
    x = tensor(draw, shape, dtype, specials=for_norm(p))
    y = tensor(draw, draw(broadcast_shapes(shape)), dtype, specials=for_norm(p))
    return Call(lambda a, b: F.pairwise_distance(a, b, p, keepdim=keepdim), [x, y], tol=10)


def distance_specials(p) -> tuple:
    """No NaN for p = 0: CPU's cdist and pdist make a NaN difference's count NaN where its vector_norm counts it
    as nonzero, as tpu does; nor for p = inf: CPU's cdist drops a NaN difference where its pdist returns NaN
    (excluded, see docs/reliability.md)."""
    return (0.0, -0.0) if p == 0 or math.isinf(p) else WELFORD_SAFE


def cdist(draw):
    batch = draw(st.sampled_from([(), (2,)]))
    m = draw(SIZES)
    p = draw(st.sampled_from([2, 1, 0, math.inf, 0.5, 3]))
    mode = draw(st.sampled_from(["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                                 "donot_use_mm_for_euclid_dist"]))
    x = tensor(draw, batch + (draw(SIZES), m), torch.float32, specials=distance_specials(p))
    y = tensor(draw, batch + (draw(SIZES), m), torch.float32, specials=distance_specials(p))
    return Call(lambda a, b: torch.cdist(a, b, p, compute_mode=mode), [x, y], tol=20)


def pdist(draw):
    p = draw(st.sampled_from([2, 1, 0, math.inf, 0.5, 3]))
    x = tensor(draw, (draw(SIZES), draw(SIZES)), torch.float32, specials=distance_specials(p))
    return Call(lambda a: F.pdist(a, p), [x], tol=20)


# ---------------------------------------------------------------- composite losses
def pair_loss(fn, target: str = "same", extra=st.none()):
    """fn(x, y, reduction=..., **extra) over (N, C) inputs; y a tensor of x's shape or of ±1."""
    def build(draw):
        shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        dtype = draw(dtypes(FLOATS))
        reduction = draw(st.sampled_from(["mean", "sum", "none"]))
        options = draw(extra) or {}
        x = tensor(draw, shape, dtype)
        y = one_of_signs(draw, shape) if target == "sign" else tensor(draw, shape, dtype)
        return Call(lambda a, b: fn(a, b, reduction=reduction, **options), [x, y], tol=20)
    return build


def margin_ranking(draw):
    n = draw(st.integers(1, 5))
    dtype = draw(dtypes(FLOATS))
    margin, reduction = draw(st.sampled_from([0.0, 0.5])), draw(st.sampled_from(["mean", "sum", "none"]))
    return Call(lambda a, b, y: F.margin_ranking_loss(a, b, y, margin, reduction=reduction),
                [tensor(draw, (n,), dtype), tensor(draw, (n,), dtype), one_of_signs(draw, (n,))], tol=20)


def cosine_embedding(draw):
    n, d = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    margin, reduction = draw(st.sampled_from([0.0, 0.5])), draw(st.sampled_from(["mean", "sum", "none"]))
    x, y = (tensor(draw, (n, d), torch.float32, specials=WELFORD_SAFE) for _ in range(2))
    return Call(lambda a, b, s: F.cosine_embedding_loss(a, b, s, margin, reduction=reduction),
                [x, y, one_of_signs(draw, (n,))], tol=20)


def triplet_margin(draw):
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    options = dict(margin=draw(st.sampled_from([1.0, 0.0])), p=draw(st.sampled_from([2, 1, 3])),
                   swap=draw(st.booleans()), reduction=draw(st.sampled_from(["mean", "sum", "none"])))
    return Call(lambda a, p, n: F.triplet_margin_loss(a, p, n, **options),
                [tensor(draw, shape, torch.float32, specials=WELFORD_SAFE) for _ in range(3)], tol=20)


def gaussian_nll(draw):
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    dtype = draw(dtypes(FLOATS))
    full, reduction = draw(st.booleans()), draw(st.sampled_from(["mean", "sum", "none"]))
    var_shape = draw(st.sampled_from([shape, shape[:1] + (1,)]))
    var = Input(torch.rand(var_shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 99)))) + 0.1)
    return Call(lambda x, y, v: F.gaussian_nll_loss(x, y, v.to(x.dtype), full, reduction=reduction),
                [tensor(draw, shape, dtype), tensor(draw, shape, dtype), var], tol=20)


def binary_cross_entropy(draw):
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    x, y = Input(torch.rand(shape, generator=g)), Input(torch.rand(shape, generator=g))
    reduction = draw(st.sampled_from(["mean", "sum", "none"]))
    return Call(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), [x, y], tol=20)


# ---------------------------------------------------------------- composite norms
def instance_norm(draw):
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(2, 4)), draw(st.integers(1, 4)))
    dtype = torch.float32
    x = tensor(draw, shape, dtype, specials=WELFORD_SAFE)
    affine = [tensor(draw, shape[1:2], dtype, layout="contiguous", specials=WELFORD_SAFE) for _ in range(2)]
    return Call(lambda t, w, b: F.instance_norm(t, weight=w, bias=b), [x, *affine], tol=20)


def rms_norm(draw):
    shape = draw(shapes(min_rank=1))
    dtype = draw(dtypes(FLOATS))
    normalized = shape[-draw(st.integers(1, len(shape))):]
    eps = draw(st.sampled_from([None, 1e-5]))
    x = tensor(draw, shape, dtype, specials=WELFORD_SAFE)
    weight = tensor(draw, normalized, dtype, specials=WELFORD_SAFE)
    return Call(lambda t, w: F.rms_norm(t, normalized, w, eps), [x, weight], tol=20)


def local_response_norm(draw):
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    size = draw(st.integers(1, 3))
    x = tensor(draw, shape, draw(dtypes(FLOATS)), specials=WELFORD_SAFE)
    return Call(lambda t: F.local_response_norm(t, size, alpha=1e-2, beta=0.75, k=1.0), [x], tol=20)


# ---------------------------------------------------------------- statistics, products, differences, integrals
def statistics(fn):
    def build(draw):
        shape = tuple(draw(SIZES) for _ in range(draw(st.integers(1, 2))))  # variables x observations
        return Call(fn, [tensor(draw, shape, torch.float32, specials=WELFORD_SAFE)], tol=20)
    return build


def diff(draw):
    shape = draw(shapes(min_rank=1))
    dtype = draw(dtypes(FLOATS + (torch.int64, torch.bool)))
    dim, n = dim_of(draw, shape), draw(st.integers(0, 3))
    edge_shape = list(shape)
    edge_shape[dim] = draw(st.integers(0, 2))
    if draw(st.booleans()):
        return Call(lambda t: torch.diff(t, n, dim), [tensor(draw, shape, dtype)])
    return Call(lambda t, p, a: torch.diff(t, n, dim, prepend=p, append=a),
                [tensor(draw, shape, dtype), tensor(draw, edge_shape, dtype), tensor(draw, edge_shape, dtype)])


def two_operands(make):
    """An entry with two operands of shapes `make(draw)` chooses, float32 or bfloat16."""
    def build(draw):
        fn, left, right = make(draw)
        dtype = draw(dtypes(FLOATS))
        return Call(fn, [tensor(draw, left, dtype), tensor(draw, right, dtype)], tol=20)
    return build


def tensordot(draw):
    a, b, k = draw(SIZES), draw(SIZES), draw(SIZES)
    return partial(torch.tensordot, dims=([1], [0])), (a, k), (k, b)


def kron(draw):
    return torch.kron, draw(shapes(max_rank=2)), draw(shapes(max_rank=2))


def inner(draw):
    k = draw(SIZES)
    return torch.inner, draw(shapes(max_rank=1)) + (k,), draw(shapes(max_rank=1)) + (k,)


def vecdot(draw):
    shape = draw(shapes(min_rank=1, max_rank=3))
    return partial(torch.linalg.vecdot, dim=-1), shape, draw(broadcast_shapes(shape))


def linear(draw):
    k, m = draw(SIZES), draw(SIZES)
    return torch.nn.functional.linear, draw(shapes(max_rank=2)) + (k,), (m, k)


def integral(fn):
    def build(draw):
        shape = draw(shapes(min_rank=1))
        dim = dim_of(draw, shape)
        y = tensor(draw, shape, draw(dtypes(FLOATS)))
        if draw(st.booleans()):
            dx = draw(st.sampled_from([1.0, 0.5, -2.0]))
            return Call(lambda t: fn(t, dx=dx, dim=dim), [y], tol=20)
        x = tensor(draw, shape[dim:][:1], torch.float32)
        return Call(lambda t, s: fn(t, s, dim=dim), [y, x], tol=20)
    return build


def vander(draw):
    n = draw(st.sampled_from([None, 0, 1, 3]))
    increasing = draw(st.booleans())
    x = tensor(draw, (draw(SIZES),), draw(dtypes((torch.float32, torch.int64))), specials=(0.0, -0.0))
    return Call(lambda t: torch.vander(t, n, increasing), [x], tol=20)


def matrix_norm(draw):
    ord = draw(st.sampled_from(["fro", 1, -1, math.inf, -math.inf]))
    x = tensor(draw, draw(shapes(min_rank=2, max_rank=3)), torch.float32,
               specials=WELFORD_SAFE if ord == "fro" else SPECIAL_VALUES)
    return Call(lambda t: torch.linalg.matrix_norm(t, ord), [x], tol=20)


def renorm(draw):
    shape = draw(shapes(min_rank=1))
    p, dim, maxnorm = draw(st.sampled_from([2, 1, 3])), dim_of(draw, shape), draw(st.sampled_from([0.5, 5.0]))
    x = tensor(draw, shape, torch.float32, specials=WELFORD_SAFE)
    return Call(lambda t: torch.renorm(t, p, dim, maxnorm), [x], tol=20)


def dist(draw):
    p, shape, dtype = draw(st.sampled_from(NORMS)), draw(shapes()), draw(dtypes(FLOATS))
    return Call(partial(torch.dist, p=p),
                [tensor(draw, shape, dtype, specials=for_norm(p)) for _ in range(2)], tol=20)


def prelu(draw):
    shape = draw(shapes(min_rank=2))
    weight = tensor(draw, draw(st.sampled_from([(1,), shape[1:2]])), torch.float32, layout="contiguous")
    return Call(F.prelu, [tensor(draw, shape, torch.float32), weight])


DECOMPOSITIONS = {
    "glu": glu, "normalize": normalize, "cosine_similarity": cosine_similarity,
    "pairwise_distance": pairwise_distance, "cdist": cdist, "pdist": pdist,
    "kl_div": pair_loss(F.kl_div, extra=st.sampled_from([{}, {"log_target": True}])),
    "poisson_nll_loss": pair_loss(F.poisson_nll_loss, extra=st.sampled_from([{}, {"log_input": False},
                                                                             {"full": True}])),
    "soft_margin_loss": pair_loss(F.soft_margin_loss, "sign"),
    "hinge_embedding_loss": pair_loss(F.hinge_embedding_loss, "sign", st.sampled_from([{}, {"margin": 0.5}])),
    "multilabel_soft_margin_loss": pair_loss(F.multilabel_soft_margin_loss, "sign"),
    "margin_ranking_loss": margin_ranking, "cosine_embedding_loss": cosine_embedding,
    "triplet_margin_loss": triplet_margin, "gaussian_nll_loss": gaussian_nll,
    "binary_cross_entropy": binary_cross_entropy,
    "instance_norm": instance_norm, "rms_norm": rms_norm, "local_response_norm": local_response_norm,
    "cov": statistics(torch.cov), "cov_uncorrected": statistics(partial(torch.cov, correction=0)),
    "corrcoef": statistics(torch.corrcoef), "diff": diff,
    "tensordot": two_operands(tensordot), "kron": two_operands(kron), "inner": two_operands(inner),
    "vecdot": two_operands(vecdot), "linear": two_operands(linear),
    "trapezoid": integral(torch.trapezoid), "cumulative_trapezoid": integral(torch.cumulative_trapezoid),
    "vander": vander, "matrix_norm": matrix_norm, "renorm": renorm, "prelu": prelu,
    "softsign": elementwise(F.softsign, FLOATS), "rrelu_eval": elementwise(partial(F.rrelu, training=False), FLOATS),
    "dist": dist,
}

FAMILIES = {"decomposition": DECOMPOSITIONS}

test_family = family_test(FAMILIES)
