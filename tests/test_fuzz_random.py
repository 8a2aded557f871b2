"""Fuzzing random ops, tpu against CPU (tests/fuzz_support.py). The two devices draw from different streams,
so an entry returns properties rather than samples: shape, dtype and strides, that every value lies in its
range, and exact results where none is random (p = 0 or 1, std = 0, from == to, training off). Writes
through a view must leave the rest of the storage alone. Bad arguments raise on CPU, so must on tpu. The
checks run on the values read back to the CPU, so tpu compiles only the op under test."""
import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzz_support import FLOATS, Call, Input, dtypes, family_test, layouts, shapes, tensor

FINITE = (0.0, -0.0, 1e30)  # a random op meets inf only as inf * 0 = NaN where a draw zeroes it


def on_device(fn):
    """A Call of fn(device): a factory takes no tensor, so a 0-dim anchor says which device it runs on."""
    return Call(lambda anchor: fn(anchor.device), [Input(torch.zeros(()))])


def described(t: torch.Tensor, *checks) -> tuple:
    """What must agree between the devices: shape, dtype, strides (of the dims longer than 1, which are the
    ones that place elements), and whether each check (a function of t's values on the CPU, giving a bool
    tensor) holds everywhere."""
    strides = tuple(stride for size, stride in zip(t.shape, t.stride()) if size > 1) if t.numel() else ()
    values = t.cpu()
    return (t.shape, t.dtype, strides, *[bool(check(values).all()) for check in checks])


# ---------------------------------------------------------------- factories
def uniform_factory(draw):
    shape, dtype = draw(shapes()), draw(dtypes(FLOATS))
    return on_device(lambda d: described(torch.rand(shape, dtype=dtype, device=d), lambda v: (v >= 0) & (v <= 1)))


def normal_factory(draw):
    shape, dtype = draw(shapes()), draw(dtypes(FLOATS))
    return on_device(lambda d: described(torch.randn(shape, dtype=dtype, device=d), torch.isfinite))


def randint_factory(draw):
    shape = draw(shapes())
    dtype = draw(dtypes((torch.int64, torch.int32, torch.float32)))
    low, high = draw(st.integers(-5, 5)), draw(st.integers(-5, 8))  # low >= high raises on CPU, so must on tpu

    def sample(device):
        t = torch.randint(low, high, shape, dtype=dtype, device=device)
        return described(t, lambda v: (v >= low) & (v < high), lambda v: v == v.round())
    return on_device(sample)


def randperm(draw):
    n = draw(st.integers(0, 40))
    dtype = draw(dtypes((torch.int64, torch.int32, torch.float32)))
    return on_device(lambda d: described(torch.randperm(n, dtype=dtype, device=d),
                                         lambda v: v.sort().values == torch.arange(n)))


def like(draw):
    """rand_like / randn_like / randint_like keep a dense input's strides (transposed, ...)."""
    kind = draw(st.sampled_from(["rand", "randn", "randint"]))
    x = tensor(draw, draw(shapes()), draw(dtypes(FLOATS)), specials=())
    if kind == "rand":
        return Call(lambda t: described(torch.rand_like(t), lambda v: (v >= 0) & (v <= 1)), [x])
    if kind == "randn":
        return Call(lambda t: described(torch.randn_like(t), torch.isfinite), [x])
    return Call(lambda t: described(torch.randint_like(t, 4), lambda v: (v >= 0) & (v < 4)), [x])


# ---------------------------------------------------------------- in-place sampling through a view
VIEWS = {
    "whole": lambda s: s, "transposed": lambda s: s.t(), "stepped_columns": lambda s: s[:, 1::2],
    "row": lambda s: s[1], "narrowed": lambda s: s.narrow(1, 1, 2),
}


def sampled_into_view(draw, sample, check, dtypes_=FLOATS):
    """sample(view) in place on a view of a 3x4 storage: the view's values pass check, and zeroing the view
    (on the CPU) afterwards leaves the storage as it was outside it."""
    take_view = VIEWS[draw(st.sampled_from(sorted(VIEWS)))]
    storage = tensor(draw, (3, 4), draw(dtypes(dtypes_)), layout="contiguous", specials=())

    def write(s):
        view = take_view(s)
        sample(view)
        rest = s.to("cpu", copy=True)
        take_view(rest).zero_()
        return described(view, check), rest
    return Call(write, [storage])


def uniform_(draw):
    low = draw(st.sampled_from([0.0, -2.0, 1.5]))
    high = low + draw(st.sampled_from([1.0, 0.0, 3.0, -1.0]))  # from > to raises
    if high == low:  # no randomness left: the values themselves
        return sampled_into_view(draw, lambda v: v.uniform_(low, high), lambda v: v == low)
    return sampled_into_view(draw, lambda v: v.uniform_(low, high), lambda v: (v >= low) & (v <= high))


def normal_(draw):
    mean, std = draw(st.sampled_from([0.0, 2.0, -1.0])), draw(st.sampled_from([1.0, 0.0, 0.5, -1.0]))
    check = (lambda v: v == mean) if std == 0 else (lambda v: v.isfinite())
    return sampled_into_view(draw, lambda v: v.normal_(mean, std), check)  # std < 0 raises


def positive_draws(draw):
    kind = draw(st.sampled_from(["exponential_", "geometric_", "log_normal_", "cauchy_"]))
    if kind == "exponential_":
        return sampled_into_view(draw, lambda v: v.exponential_(2.0), lambda v: v >= 0)
    if kind == "geometric_":
        p = draw(st.sampled_from([0.5, 1.0, 0.2]))
        return sampled_into_view(draw, lambda v: v.geometric_(p), lambda v: (v >= 1) & (v == v.round()))
    if kind == "log_normal_":
        return sampled_into_view(draw, lambda v: v.log_normal_(0.0, 0.5), lambda v: v >= 0)
    return sampled_into_view(draw, lambda v: v.cauchy_(), lambda v: ~v.isnan())


def random_(draw):
    low, high = draw(st.integers(-3, 2)), draw(st.integers(-2, 6))  # low >= high raises on CPU, so must on tpu
    return sampled_into_view(draw, lambda v: v.random_(low, high), lambda v: (v >= low) & (v < high),
                             (torch.float32, torch.int64, torch.int32))


def bernoulli_(draw):
    p = draw(st.sampled_from([0.0, 1.0, 0.5, 0.3]))
    if p in (0.0, 1.0):
        return sampled_into_view(draw, lambda v: v.bernoulli_(p), lambda v: v == p)
    return sampled_into_view(draw, lambda v: v.bernoulli_(p), lambda v: (v == 0) | (v == 1))


# ---------------------------------------------------------------- samples from tensor arguments
def probabilities(draw, shape) -> Input:
    """Probabilities with exact 0s and 1s among them; one set in eight holds a value outside [0, 1], which
    CPU refuses, so must tpu."""
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    p = torch.rand(shape, generator=g)
    p = torch.where(torch.rand(shape, generator=g) < 0.3, p.round(), p)
    if p.numel() and draw(st.integers(0, 7)) == 7:
        p.view(-1)[0] = 1.5
    return Input(p)


def bernoulli(draw):
    p = probabilities(draw, draw(shapes()))

    def sample(q):
        t, q = torch.bernoulli(q), q.cpu()
        return described(t, lambda v: torch.where(q == 0, v == 0, torch.where(q == 1, v == 1, (v == 0) | (v == 1))))
    return Call(sample, [p])


def normal_tensors(draw):
    shape = draw(shapes())
    mean = tensor(draw, shape, torch.float32, specials=())
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    std = torch.where(torch.rand(shape, generator=g) < 0.3, 0.0, torch.rand(shape, generator=g))
    if std.numel() and draw(st.integers(0, 7)) == 7:
        std.view(-1)[0] = -1.0  # CPU refuses a negative std, so must tpu

    def sample(m, s):
        t, m, s = torch.normal(m, s), m.cpu(), s.cpu()
        return described(t, lambda v: torch.where(s == 0, v == m, v.isfinite()))
    return Call(sample, [mean, Input(std)])


def multinomial(draw):
    rows, categories = draw(st.sampled_from([(), (1,), (3,)])), draw(st.integers(1, 6))
    p = probabilities(draw, rows + (categories,))
    replacement = draw(st.booleans())
    n = draw(st.integers(1, 6))  # without replacement, more draws than nonzero categories raise

    def sample(q):
        t, q = torch.multinomial(q, n, replacement), q.cpu()
        return described(t, lambda v: (v >= 0) & (v < categories), lambda v: q.gather(-1, v) > 0,
                         lambda v: torch.tensor(True) if replacement else v.sort(-1).values.diff(dim=-1) != 0)
    return Call(sample, [p])


# ---------------------------------------------------------------- dropout in training mode
def dropout(draw):
    p = draw(st.sampled_from([0.0, 1.0, 0.5, 0.2]))
    inplace, training = draw(st.booleans()), draw(st.booleans())
    shape = draw(shapes())
    # In place, no expanded input: CPU refuses to write elements that share memory (see test_fuzz_shape_index).
    layout = draw(st.sampled_from([k for k in layouts(shape) if k != "expanded"])) if inplace else None
    x = tensor(draw, shape, draw(dtypes(FLOATS)), layout=layout, specials=FINITE)

    def drop(t):
        source = t.to("cpu", copy=True)  # in place, dropout overwrites t
        out = F.dropout(t, p, training, inplace)
        if p in (0.0, 1.0) or not training:
            return out  # nothing random: the values themselves
        return described(out, lambda v: (v == 0) | torch.isclose(v, source / (1 - p), rtol=1e-2))
    return Call(drop, [x])


def feature_dropout(draw):
    """dropout1d/2d/3d zero whole channels: each (N, C) plane is all zero or all scaled."""
    spatial = draw(st.integers(1, 3))
    fn = {1: F.dropout1d, 2: F.dropout2d, 3: F.dropout3d}[spatial]
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 4)), *[draw(st.integers(1, 3)) for _ in range(spatial)])
    p = draw(st.sampled_from([0.0, 1.0, 0.5]))
    x = tensor(draw, shape, torch.float32, specials=FINITE)

    def drop(t):
        out, scaled = fn(t, p, True), t.cpu() / (1 - p)
        if p in (0.0, 1.0):
            return out
        return described(out, lambda v: (v == 0).flatten(2).all(-1) | torch.isclose(v, scaled).flatten(2).all(-1))
    return Call(drop, [x])


RANDOM = {
    "rand": uniform_factory, "randn": normal_factory, "randint": randint_factory, "randperm": randperm,
    "like": like, "uniform_": uniform_, "normal_": normal_, "positive_draws": positive_draws, "random_": random_,
    "bernoulli_": bernoulli_, "bernoulli": bernoulli, "normal_tensors": normal_tensors, "multinomial": multinomial,
    "dropout": dropout, "feature_dropout": feature_dropout,
}

FAMILIES = {"random": RANDOM}

test_family = family_test(FAMILIES)
