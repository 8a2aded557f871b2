"""Fuzzing shape and view ops, indexing, sorting and searching, and in-place writes through views, tpu
against CPU (tests/fuzz_support.py)."""
import math

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzz_support import (ALL, FLOATS, RAISES, SIZES, Call, Input, broadcast_shapes, dim_of, dtypes, elementwise,
                          family_test, fill_values, indices, scanned, shapes, size_at, tensor, values)


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
    # One past the size: CPU raises.
    k = draw(st.integers(0, size_at(shape, dim) + 1))
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
    other = tensor(draw, draw(broadcast_shapes(tuple(view_shape))) if draw(st.booleans()) else view_shape,
                   draw(dtypes()))

    def write(storage, operand):
        written = take_view(storage)
        op(written, operand)
        return storage, written
    return Call(write, [tensor(draw, storage_shape, dtype, layout="contiguous"), other])


FAMILIES = {"shape": SHAPE, "indexing": INDEXING, "sorting": SORTING, "inplace": {"inplace": inplace}}

test_family = family_test(FAMILIES)
