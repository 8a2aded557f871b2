"""Special functions and the less common elementwise math (csrc/lowering/special.cc) against CPU PyTorch:
values in float32, bfloat16 and float64 (which must be float64-accurate), the special values at poles,
zeros and infinities, gradients, and that nothing falls back to the CPU."""
import math

import mpmath
import pytest
import torch
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

S = torch.special


def check(fn, *cpu_args, **tolerance):
    """fn on CPU tensors and on tpu copies: same dtype, values within tolerance (NaN where CPU has NaN),
    and no CPU fallback."""
    expected = fn(*cpu_args)
    torchtpu.reset_metrics()
    actual = fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in cpu_args])
    assert fallback_ops() == {}
    if not isinstance(expected, tuple):
        expected, actual = (expected,), (actual,)
    for e, a in zip(expected, actual):
        assert a.device.type == "tpu"
        assert_close(a.cpu(), e, equal_nan=True, **tolerance)


def spread(dtype, low=-10.0, high=10.0, n=64):
    """Values across [low, high] plus the awkward ones: signed zeros, infinities, NaN."""
    x = torch.cat([torch.linspace(low, high, n, dtype=torch.float64),
                   torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan], dtype=torch.float64)])
    return x.to(dtype)


F32 = dict(rtol=1e-5, atol=1e-5)
BF16 = dict(rtol=1.6e-2, atol=1e-2)
F64 = dict(rtol=1e-12, atol=1e-14)


# ---- Small elementwise ops ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64], ids=str)
def test_binary_ops(dtype):
    a = (torch.randn(6, 5) * 5).to(dtype)
    b = (torch.randn(5) * 3).to(dtype)
    if dtype.is_floating_point:
        a[0, 0], b[1] = math.nan, math.nan
        b[2] = 0
    else:
        b[b == 0] = 1
    check(torch.fmax, a, b)
    check(torch.fmin, a, b)
    check(torch.floor_divide, a, b)
    check(torch.rsub, a, b)
    check(lambda x, y: torch.rsub(x, y, alpha=2), a, b)
    check(lambda x: 3 - x, a)
    check(torch.heaviside, a, b)
    if dtype.is_floating_point:
        check(torch.logaddexp2, a, b)
        check(S.xlog1py, a, b.abs())


def test_floor_divide_rounding():
    # a / b rounds up to an integer here; floor division must not.
    a = torch.tensor([1.0, -1.0, 7.0, -7.0, 0.0, -0.0, 5.0])
    b = torch.tensor([0.1, 0.1, -2.0, 2.0, -3.0, 3.0, 0.0])
    check(torch.floor_divide, a, b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_unary_ops(dtype):
    x = spread(torch.float64).to(dtype) if dtype.is_floating_point else torch.arange(-5, 6, dtype=dtype)
    check(torch.signbit, x)
    check(torch.angle, x)
    check(torch.sinc, x, **(BF16 if dtype == torch.bfloat16 else F32))
    check(S.entr, x, **(BF16 if dtype == torch.bfloat16 else F32))
    check(torch.erfc, x, **(BF16 if dtype == torch.bfloat16 else F32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_frexp_and_nextafter(dtype):
    tiny = torch.finfo(dtype).tiny
    x = torch.tensor([1.0, -3.5, 0.0, -0.0, 1e-3, tiny, tiny / 4, -tiny / 8, math.inf, -math.inf, 1e30, 7.0],
                     dtype=dtype)
    check(torch.frexp, x, rtol=0, atol=0)
    y = torch.tensor([2.0, -4.0, 1.0, -1.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.0, math.inf, 7.0], dtype=dtype)
    check(torch.nextafter, x, y, rtol=0, atol=0)


def test_frexp_rejects_integers():
    with pytest.raises(RuntimeError):
        torch.frexp(torch.arange(3).to("tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_softplus_logit_and_grads(dtype):
    tolerance = BF16 if dtype == torch.bfloat16 else F32
    x = torch.randn(4, 7).to(dtype) * 4
    check(torch.nn.functional.softplus, x, **tolerance)
    check(lambda t: torch.nn.functional.softplus(t, beta=2, threshold=5), x, **tolerance)
    p = torch.rand(4, 7).to(dtype)
    check(torch.logit, p, **tolerance)
    check(lambda t: torch.logit(t, eps=0.2), p, **tolerance)
    if dtype == torch.float32:
        for fn in (lambda t: torch.nn.functional.softplus(t, beta=2, threshold=5), torch.logit,
                   lambda t: torch.logit(t, eps=0.2), torch.sinc):
            cpu = p.clone().requires_grad_()
            fn(cpu).sum().backward()
            dev = p.to("tpu").requires_grad_()
            torchtpu.reset_metrics()
            fn(dev).sum().backward()
            assert fallback_ops() == {}
            assert_close(dev.grad.cpu(), cpu.grad, **F32)


# ---- Polygamma -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_polygamma(n):
    x = torch.cat([spread(torch.float64, -9.7, 12.3, 50), torch.tensor([-1.0, -2.0, 1e-4, -1e-3, 150.0])])
    if n == 1:  # CPU's trigamma is finite (about 1e32) at negative integers, where this gives inf
        rounded = x.bfloat16().double()
        x = x[~((rounded < 0) & (rounded == rounded.floor()))]
    check(lambda t: torch.polygamma(n, t), x.float(), rtol=1e-5, atol=1e-5)
    # float64: CPU's trigamma is itself only ~1e-9 accurate, the other orders ~1e-13.
    check(lambda t: torch.polygamma(n, t), x, rtol=1e-8 if n == 1 else 1e-11, atol=1e-12)
    check(lambda t: torch.polygamma(n, t), x.bfloat16(), **BF16)


def test_digamma_poles_and_grad():
    check(torch.digamma, torch.tensor([0.0, -0.0, -1.0, -5.0, math.inf, -math.inf, math.nan]))
    check(torch.digamma, torch.arange(1, 6))  # integers promote to float
    x = torch.rand(9) * 8 - 4
    cpu = x.clone().requires_grad_()
    torch.digamma(cpu).sum().backward()
    dev = x.to("tpu").requires_grad_()
    torch.digamma(dev).sum().backward()
    assert_close(dev.grad.cpu(), cpu.grad, rtol=1e-4, atol=1e-4)


def test_polygamma_rejects_negative_order():
    with pytest.raises(RuntimeError):
        torch.polygamma(-1, torch.ones(3).to("tpu"))


# ---- Error-function relatives ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_erfcx_log_ndtr_ndtri(dtype):
    tolerance = F32 if dtype == torch.float32 else F64
    x = spread(dtype, -25, 40, 90)
    if dtype == torch.float32:
        x = x[x.abs() < 9]  # erfcx of larger negative x overflows float32
    check(S.erfcx, x, **tolerance)
    check(S.log_ndtr, spread(dtype, -30, 30, 90), **tolerance)
    p = torch.cat([torch.tensor([0.0, 1.0, -0.1, 1.1, 0.5, 1e-30, 1e-10, 0.999, math.nan], dtype=dtype),
                   torch.rand(40, dtype=dtype)])
    check(S.ndtri, p, **tolerance)


# ---- Bessel functions ------------------------------------------------------------------------------

BESSEL = [torch.i0, S.i0e, S.i1, S.i1e, S.modified_bessel_i0, S.modified_bessel_i1, S.modified_bessel_k0,
          S.modified_bessel_k1, S.scaled_modified_bessel_k0, S.scaled_modified_bessel_k1, S.bessel_j0,
          S.bessel_j1, S.bessel_y0, S.bessel_y1, S.spherical_bessel_j0]


@pytest.mark.parametrize("fn", BESSEL, ids=lambda f: f.__name__)
def test_bessel(fn):
    x = spread(torch.float64, -30, 30, 121)
    x = torch.cat([x, torch.tensor([0.5, 1.0, 1.5, 2.0, 2.5, 19.9, 20.1, 24.9, 25.1, 60.0, 500.0])])
    # CPU's own J and Y are only ~4e-7 (absolute) accurate in float64 and ~1e-5 (relative) in float32, so
    # they are compared with CPU at that level and with exact values (mpmath) at float64's.
    jy = fn in (S.bessel_j0, S.bessel_j1, S.bessel_y0, S.bessel_y1)
    check(fn, x, rtol=1e-6 if jy else 1e-13, atol=1e-6 if jy else 1e-15)
    check(fn, x.float(), rtol=1e-4 if jy else 1e-5, atol=1e-5)
    if jy:
        order, kind = int(fn.__name__[-1]), fn.__name__[-2]
        exact = mpmath.besselj if kind == "j" else mpmath.bessely
        points = torch.tensor([0.3, 1.0, 2.0, 2.4048255576957728, 3.7, 8.0, 19.9, 25.1, 31.0, 500.0],
                              dtype=torch.float64)
        expected = torch.tensor([float(exact(order, v)) for v in points.tolist()], dtype=torch.float64)
        assert_close(fn(points.to("tpu")).cpu(), expected, rtol=1e-13, atol=1e-15)
    if fn in (torch.i0, S.i0e, S.i1, S.i1e):
        check(fn, x.bfloat16(), **BF16)


def test_airy_ai():
    # CPU's float64 kernel is only ~3e-6 (absolute) accurate on part of the negative axis, its float32 one
    # ~3e-6 absolute and ~1e-5 relative; tpu is compared with CPU at that level and with exact values
    # (mpmath) at float64's, across each of its three regions and their borders (1 and -10.25).
    x = torch.cat([spread(torch.float64, -30, 20, 201),
                   torch.tensor([1.0, 1.0 + 1e-12, -10.25, -10.25 - 1e-12, 2.0, 5.5, -1e-30])])
    check(S.airy_ai, x, rtol=1e-5, atol=4e-6)
    check(S.airy_ai, x.float(), rtol=2e-5, atol=6e-6)
    finite = x[x.isfinite()]
    expected = torch.tensor([float(mpmath.airyai(v)) for v in finite.tolist()], dtype=torch.float64)
    # Right of 1, Ai is exp(-2/3 x^1.5) times a smooth factor: its relative condition is x^1.5.
    assert_close(S.airy_ai(finite.to("tpu")).cpu(), expected, rtol=2e-13, atol=1e-15)


# ---- Orthogonal polynomials ------------------------------------------------------------------------

POLYNOMIALS = [S.chebyshev_polynomial_t, S.chebyshev_polynomial_u, S.chebyshev_polynomial_v,
               S.chebyshev_polynomial_w, S.shifted_chebyshev_polynomial_t, S.shifted_chebyshev_polynomial_u,
               S.shifted_chebyshev_polynomial_v, S.shifted_chebyshev_polynomial_w, S.hermite_polynomial_h,
               S.hermite_polynomial_he, S.laguerre_polynomial_l, S.legendre_polynomial_p]


@pytest.mark.parametrize("fn", POLYNOMIALS, ids=lambda f: f.__name__)
def test_polynomials(fn):
    # No NaN: CPU returns an uninitialised value for some (its recurrence stops at the first NaN).
    x = torch.cat([torch.linspace(-1.5, 1.5, 13), torch.tensor([1.0, -1.0, 0.0, 0.5])])
    n = torch.arange(-2, 12)
    grid_x, grid_n = torch.broadcast_tensors(x[:, None], n[None, :])
    check(fn, grid_x, grid_n, rtol=1e-5, atol=1e-4)
    check(fn, grid_x.double(), grid_n.double(), rtol=1e-12, atol=1e-12)  # a floating n truncates, as on CPU


def test_polynomial_scalar_order():
    check(lambda t: S.legendre_polynomial_p(t, 3), torch.linspace(-1, 1, 9), rtol=1e-5, atol=1e-5)


# ---- Scans -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_logcumsumexp(dtype):
    x = torch.randn(5, 6).to(dtype) * 10
    x[1, 2] = -math.inf
    x[3, :] = -math.inf
    tolerance = BF16 if dtype == torch.bfloat16 else F32
    check(lambda t: torch.logcumsumexp(t, 1), x, **tolerance)
    check(lambda t: torch.logcumsumexp(t, 0), x, **tolerance)
    check(lambda t: torch.logcumsumexp(t, 0), torch.full((4, 2), 3.0, dtype=dtype), **tolerance)  # equal terms


def test_logaddexp_of_equal_values():
    x = torch.tensor([1.0, 5.0, -math.inf, math.inf, math.nan])
    check(torch.logaddexp, x, x)
    check(torch.logaddexp2, x, x)


# ---- Zeta and incomplete gamma ---------------------------------------------------------------------

def test_zeta():
    x = torch.tensor([1.0, 0.5, 1.5, 2.0, 2.0, 3.0, 3.0, 4.5, 10.0, 30.0, 2.0, 2.5, math.nan, 2.0, 2.0],
                     dtype=torch.float64)
    q = torch.tensor([1.0, 1.0, 1.0, 1.0, -2.5, -7.3, 0.0, 0.3, 2.0, 1.5, 1e-3, -1.5, 1.0, -math.inf, 100.0],
                     dtype=torch.float64)
    check(S.zeta, x, q, rtol=1e-13, atol=0)
    check(S.zeta, x.float(), q.float(), rtol=1e-5, atol=0)
    check(lambda t: S.zeta(t, 3.0), x.float(), rtol=1e-5, atol=0)  # a Scalar argument


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=lambda f: f.__name__)
def test_incomplete_gamma(fn):
    a = torch.tensor([0.5, 1.0, 2.0, 5.0, 10.0, 100.0, 0.1, 3.0, 50.0, 1000.0, 1e-3, 7.0, 0.0, 0.0, 2.0, -1.0,
                      math.inf, math.inf, 2.0, math.nan], dtype=torch.float64)
    x = torch.tensor([0.3, 1.0, 5.0, 3.0, 12.0, 95.0, 10.0, 0.01, 60.0, 1010.0, 2.0, 7.0, 1.0, 0.0, 0.0, 1.0,
                      1.0, math.inf, math.inf, 1.0], dtype=torch.float64)
    # CPU's float64 values are ~1e-9 from exact for large a near x (its asymptotic regime); exact values
    # (mpmath) check float64 accuracy.
    check(fn, a, x, rtol=1e-8, atol=1e-15)
    check(fn, a.float(), x.float(), rtol=1e-5, atol=1e-6)
    upper = fn is torch.igammac
    points = [(100.0, 95.0), (50.0, 60.0), (1000.0, 1010.0), (0.5, 0.3), (3.0, 0.01)]
    got = fn(torch.tensor([p[0] for p in points], dtype=torch.float64).to("tpu"),
             torch.tensor([p[1] for p in points], dtype=torch.float64).to("tpu")).cpu()
    exact = torch.tensor([float(mpmath.gammainc(p, y, mpmath.inf, regularized=True) if upper
                                else mpmath.gammainc(p, 0, y, regularized=True)) for p, y in points],
                         dtype=torch.float64)
    assert_close(got, exact, rtol=1e-13, atol=0)
    check(fn, a.bfloat16(), x.bfloat16(), **BF16)
