"""Fuzzing complex64, tpu against CPU (tests/fuzz_support.py): arithmetic with complex, real and Python
operands, elementwise math, abs/angle, sum/mean/norms, products, and the torch.fft functions with random
signal sizes, dims and norms. Complex inputs come in every layout, and as lazy conjugate views."""
import torch
from hypothesis import strategies as st

from fuzz_support import SIZES, Call, Input, broadcast_shapes, dim_of, family_test, shapes, tensor

C64 = torch.complex64
# Finite parts only. With an infinite or NaN part CPU follows C99's special cases (std::complex), tpu XLA's
# formulas: exp(-inf+inf·i) is 0 on CPU, NaN on tpu; 1/(-inf+NaN·i) NaN on CPU, -0 on tpu (excluded, see
# docs/reliability.md).
PARTS = (0.0, -0.0, 1e30)
# No 1e30 where a sum of products or of terms meets it (products, squares, FFT, norms): the order of a complex
# multiply-add decides whether 1e30 * 1e30 - 1e30 * 1e30 is -inf or NaN (CPU's own scalar and vectorized
# pow disagree there), an FFT's rounding error is relative to its largest input, so 1e-7 of 1e30 shows in
# its small outputs, and CPU's complex 2-norm squares |z| and overflows where tpu's does not (excluded, see
# docs/reliability.md).
ZEROS = (0.0, -0.0)


def complex_input(draw, shape, layout: str | None = None, specials: tuple = PARTS) -> Input:
    """A complex64 tensor in a random layout (fuzz_support.tensor), half the time seen through .conj()."""
    x = tensor(draw, shape, C64, layout, specials)
    if draw(st.booleans()):
        return Input(x.storage, lambda t, view=x.view: view(t).conj())
    return x


def operand(draw, shape, python: bool, specials: tuple) -> Input | float:
    """A second operand: complex or float32 (broadcasting), or a real Python number."""
    kind = draw(st.sampled_from(["complex", "real", "python"] if python else ["complex", "real"]))
    if kind == "python":
        number = draw(st.one_of(st.integers(-3, 3), st.floats(-2.5, 2.5), st.booleans()))
        # A zero divisor (or one that is 0 in float32) only where specials allow one
        return number if abs(number) > 1e-3 or 0.0 in specials else 1.5
    other = draw(broadcast_shapes(shape))
    if kind == "complex":
        return complex_input(draw, other, specials=specials)
    return tensor(draw, other, torch.float32, specials=specials)


def arithmetic(fn, python: bool = True, specials: tuple = PARTS):
    def build(draw):
        shape = draw(shapes())
        x, y = complex_input(draw, shape, specials=specials), operand(draw, shape, python, specials)
        if not isinstance(y, Input):
            return Call(lambda a: fn(a, y), [x])
        swap = draw(st.booleans())
        return Call((lambda a, b: fn(b, a)) if swap else fn, [x, y])
    return build


def unary(fn, tol: float = 1.0, specials: tuple = PARTS):
    def build(draw):
        return Call(fn, [complex_input(draw, draw(shapes()), specials=specials)], tol)
    return build


def reduced(fn, specials: tuple = PARTS):
    """fn(x, dims, keepdim) with dims a list of distinct dims, maybe empty."""
    def build(draw):
        shape = draw(shapes())
        dims = draw(st.lists(st.integers(0, max(len(shape), 1) - 1), unique=True, max_size=max(len(shape), 1)))
        keepdim = draw(st.booleans())
        return Call(lambda t: fn(t, dims, keepdim), [complex_input(draw, shape, specials=specials)], tol=10)
    return build


def product(make):
    def build(draw):
        n, k, m, b = (draw(SIZES) for _ in range(4))
        fn, operand_shapes = make(draw, n, k, m, b)
        return Call(fn, [complex_input(draw, s, specials=ZEROS) for s in operand_shapes], tol=10)
    return build


def matmul_ranks(draw, n, k, m, b):
    left = draw(st.sampled_from([(n, k), (k,), (b, n, k)]))
    right = draw(st.sampled_from([(k, m), (k,), (b, k, m)]))
    return torch.matmul, [left, right]


def built(kind: str):
    """torch.complex(real, imag) and torch.polar(abs, angle) from float32 tensors."""
    def build(draw):
        shape = draw(shapes())
        parts = [tensor(draw, shape, torch.float32, specials=PARTS),
                 tensor(draw, draw(broadcast_shapes(shape)), torch.float32, specials=PARTS)]
        return Call(torch.complex if kind == "complex" else torch.polar, parts)
    return build


def where(draw):
    shape = draw(shapes())
    condition = tensor(draw, draw(broadcast_shapes(shape)), torch.bool)
    other = draw(broadcast_shapes(shape))
    return Call(torch.where, [condition, complex_input(draw, shape), complex_input(draw, other)])


# ---------------------------------------------------------------- FFT
def signal_length(draw):
    return draw(st.sampled_from([None, 1, 2, 3, 5, 8]))


def signal(draw, shape, dims, real_input: bool) -> Input:
    """The input of an FFT over dims. A dim it does not transform is not empty: CPU's MKL raises for an empty
    batch, tpu returns an empty result (excluded, see docs/reliability.md). An empty transformed dim raises
    on both."""
    transformed = {d % len(shape) for d in dims}
    shape = tuple(size or 1 if i not in transformed else size for i, size in enumerate(shape))
    if real_input:
        return tensor(draw, shape, torch.float32, specials=ZEROS)
    return complex_input(draw, shape, specials=ZEROS)


def fft_1d(name: str, real_input: bool = False):
    """torch.fft.<name>(x, n, dim, norm); a length of 0 (irfft of one bin) raises on CPU, so must on tpu."""
    fn = getattr(torch.fft, name)

    def build(draw):
        shape = draw(shapes(min_rank=1, max_rank=3))
        n, dim, norm = signal_length(draw), dim_of(draw, shape), draw(st.sampled_from([None, "ortho", "forward"]))
        return Call(lambda t: fn(t, n, dim, norm), [signal(draw, shape, [dim], real_input)], tol=20)
    return build


def fft_nd(name: str, real_input: bool = False):
    """torch.fft.<name>(x, s, dim, norm) over 1-3 distinct dims, with given sizes or the input's."""
    fn = getattr(torch.fft, name)

    def build(draw):
        shape = draw(shapes(min_rank=1, max_rank=3))
        dims = draw(st.lists(st.integers(-len(shape), -1), unique=True, min_size=1, max_size=len(shape)))
        x = signal(draw, shape, dims, real_input)
        s = [draw(st.sampled_from([1, 2, 3, 4])) for _ in dims] if draw(st.booleans()) else None
        norm = draw(st.sampled_from([None, "ortho", "forward", "backward"]))
        return Call(lambda t: fn(t, s, dims, norm), [x], tol=20)
    return build


COMPLEX = {
    "add": arithmetic(torch.add), "sub": arithmetic(torch.sub), "mul": arithmetic(torch.mul),
    # No zero divisor (tensor or number): x / -0.0 is -inf+inf·i on CPU, inf-inf·i on tpu (signed-zero
    # division; excluded, see docs/reliability.md).
    "div": arithmetic(torch.div, specials=(1e30,)),
    # Against a Python number left out: eq.Scalar and ne.Scalar have no complex rule (the CPU fallback).
    "eq": arithmetic(torch.eq, python=False), "ne": arithmetic(torch.ne, python=False),
    "abs": unary(torch.abs), "angle": unary(torch.angle), "sgn": unary(torch.sgn), "neg": unary(torch.neg),
    "exp": unary(torch.exp, 10), "log": unary(torch.log, 10), "tanh": unary(torch.tanh, 10),
    "reciprocal": unary(torch.reciprocal), "rsqrt": unary(torch.rsqrt, 10),
    "square": unary(lambda t: t.pow(2), 10, ZEROS),
    "sqrt": unary(torch.sqrt, 10),
    # No 1e30: sin(1e30·i) is -0+inf·i on CPU, NaN+inf·i on tpu (0 * cosh(1e30) overflows to 0 * inf; a tpu
    # bug, excluded, see docs/reliability.md).
    "sin": unary(torch.sin, 10, specials=ZEROS),
    "conj_physical": unary(torch.conj_physical), "parts": unary(lambda t: torch.stack([t.real, t.imag])),
    "complex": built("complex"), "polar": built("polar"),
    "sum": reduced(lambda t, d, k: t.sum(d, k)), "mean": reduced(lambda t, d, k: t.mean(d, k)),
    "vector_norm": reduced(lambda t, d, k: torch.linalg.vector_norm(t, 2, d or None, k), ZEROS),
    "mm": product(lambda draw, n, k, m, b: (torch.mm, [(n, k), (k, m)])),
    "bmm": product(lambda draw, n, k, m, b: (torch.bmm, [(b, n, k), (b, k, m)])),
    "matmul": product(matmul_ranks), "dot": product(lambda draw, n, k, m, b: (torch.dot, [(k,), (k,)])),
    "where": where,
    "fft": fft_1d("fft"), "ifft": fft_1d("ifft"), "rfft": fft_1d("rfft", real_input=True), "irfft": fft_1d("irfft"),
    "hfft": fft_1d("hfft"), "ihfft": fft_1d("ihfft", real_input=True),
    "fftn": fft_nd("fftn"), "ifftn": fft_nd("ifftn"), "rfftn": fft_nd("rfftn", real_input=True),
    "irfftn": fft_nd("irfftn"),
}

FAMILIES = {"complex": COMPLEX}

test_family = family_test(FAMILIES)
