"""Fuzzing elementwise ops, tpu against CPU (tests/fuzz_support.py): unary math and activations, binary ops
with broadcasting, promotion and scalar operands, and three-operand pointwise ops."""
import operator
from functools import partial

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzz_support import (ALL, BITS, FLOATS, Call, binary, broadcast_shapes, dtypes, elementwise, family_test,
                          python_scalars, shapes, tensor)


# ---------------------------------------------------------------- unary elementwise
special = torch.special
UNARY = {
    "abs": elementwise(torch.abs), "neg": elementwise(torch.neg),
    "sign": elementwise(torch.sign), "sgn": elementwise(torch.sgn),
    "square": elementwise(torch.square), "relu": elementwise(torch.relu),
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


FAMILIES = {"unary": UNARY, "binary": BINARY, "pointwise": POINTWISE}

test_family = family_test(FAMILIES)
