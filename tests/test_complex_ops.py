"""Complex dtypes on tpu: transfers, views that reinterpret complex storage, lazy conj()/neg views, the
lowered complex arithmetic and the FFT family (forward and backward) against CPU torch. Ops whose rules
are written for real dtypes run through the CPU fallback with complex values, correctly."""
import pytest
import torch
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

TPU = "tpu"
COMPLEX = [torch.complex64, torch.complex128]


def crandn(*shape, dtype=torch.complex64):
    return torch.randn(*shape, dtype=dtype)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_transfers_and_views_round_trip(dtype, metrics):
    x = crandn(4, 6, dtype=dtype)
    t = x.to(TPU)
    assert t.dtype == dtype
    assert_close(t.cpu(), x, rtol=0, atol=0)
    assert_close(torch.view_as_real(t).cpu(), torch.view_as_real(x), rtol=0, atol=0)
    assert_close(t.real.cpu(), x.real, rtol=0, atol=0)
    assert_close(t.imag.cpu(), x.imag, rtol=0, atol=0)
    assert_close(t[1:3, ::2].cpu(), x[1:3, ::2], rtol=0, atol=0)
    assert_close(t.t().contiguous().cpu(), x.t().contiguous(), rtol=0, atol=0)
    pairs = torch.randn(3, 5, 2, dtype=x.real.dtype)
    assert_close(torch.view_as_complex(pairs.to(TPU)).cpu(), torch.view_as_complex(pairs), rtol=0, atol=0)
    assert t[1, 2].item() == x[1, 2].item()
    assert fallback_ops() == {}


def test_writes_through_real_and_imag_views_reach_the_complex_storage(metrics):
    x = crandn(3, 4)
    t = x.to(TPU)
    t.real.mul_(2)
    t.imag[:, 1] = 7.0
    x.real.mul_(2)
    x.imag[:, 1] = 7.0
    assert_close(t.cpu(), x, rtol=0, atol=0)
    r = torch.view_as_real(t)
    r[..., 0] += 1
    assert_close(t.cpu(), x + 1, rtol=0, atol=0)


def test_lazy_conj_and_neg_views_mean_their_values(metrics):
    x, y = crandn(5, 3), crandn(5, 4)
    t, u = x.to(TPU), y.to(TPU)
    assert t.conj().is_conj()
    assert_close(t.conj().cpu(), x.conj())
    assert_close(t.conj().imag.cpu(), x.conj().imag)  # a negative-bit float view
    assert_close((t.mH @ u).cpu(), x.mH @ y)  # the product receives the conj bit unresolved
    assert_close((t.conj() * t).cpu(), x.conj() * x)
    assert_close(t.conj().resolve_conj().cpu(), x.conj().resolve_conj())
    out = torch.empty_like(t)
    out.copy_(t.conj())
    assert_close(out.cpu(), x.conj())
    back = torch.empty(5, 3, dtype=torch.complex64)
    back.copy_(t.conj())
    assert_close(back, x.conj())
    assert_close(x.conj().to(TPU).cpu(), x.conj())
    assert fallback_ops() == {}


def test_writes_through_conj_and_neg_views_and_conj_physical_(metrics):
    """A write through a lazy conj()/neg view lands conjugated/negated in the storage, as on CPU."""
    x = crandn(2, 3)
    results = []
    for device in ("cpu", TPU):
        t = x.clone().to(device)
        c = t.conj()
        c[0, 0] = 1 + 2j  # t[0, 0] becomes 1 - 2j
        c[1].add_(1j)
        t.conj().imag[0, 1:] = 5.0  # a negative-bit float view: t's imaginary parts become -5
        u = x.clone().to(device).conj_physical_()
        results.append((t.cpu(), u.cpu()))
    for got, expected in zip(results[1], results[0]):
        assert_close(got, expected)
    assert fallback_ops() == {}


def test_nan_tests_casts_to_bool_and_base_logs_at_special_values(metrics):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([complex(nan, 1), complex(1, nan), complex(nan, nan), 1 + 1j, 0j, 1j, 0.5])
    t = x.to(TPU)
    assert torch.equal(t.isnan().cpu(), x.isnan())
    assert torch.equal(t.bool().cpu(), x.bool())  # true where either part is nonzero
    logs = torch.tensor([0j, complex(inf, 0), 1 + 2j])
    for log in (torch.log2, torch.log10):
        assert_close(log(logs.to(TPU)).cpu(), log(logs))  # a 0 imaginary part at 0 and inf, not NaN
    assert fallback_ops() == {}


@pytest.mark.parametrize("dtype", COMPLEX)
def test_arithmetic_reductions_and_products_run_natively(dtype, metrics):
    x, y, w = crandn(4, 6, dtype=dtype), crandn(4, 6, dtype=dtype), crandn(6, 3, dtype=dtype)
    t, u, v = x.to(TPU), y.to(TPU), w.to(TPU)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.complex64 else dict(rtol=1e-12, atol=1e-12)
    cases = {
        "arith": (lambda a, b, m: a * b - a / (b + 1) + 2.5 * a - b.neg(), ),
        "math": (lambda a, b, m: a.exp() + b.log() + a.sqrt() + a.sin() * b.cos() + a.tanh() + a.rsqrt(), ),
        "pow": (lambda a, b, m: a.pow(2) + a.pow(b) + a.reciprocal(), ),
        "parts": (lambda a, b, m: torch.stack([a.abs(), a.angle(), torch.linalg.vector_norm(a, dim=1)
                                                .unsqueeze(1).expand(4, 6)]), ),
        "sign": (lambda a, b, m: a.sgn() + torch.where(a.real > 0, a, b), ),
        "reduce": (lambda a, b, m: torch.cat([a.sum(0), a.mean(1), a.sum().reshape(1)]), ),
        "products": (lambda a, b, m: torch.cat([(a @ m).reshape(-1), torch.bmm(a[None], m[None]).reshape(-1),
                                                (a[0] @ m[:, 0]).reshape(1), a @ m[:, 1]]), ),
        "build": (lambda a, b, m: torch.complex(a.real, b.imag) + torch.polar(a.abs(), b.angle()), ),
        "compare": (lambda a, b, m: torch.stack([a == a, a != b]), ),
        "shape": (lambda a, b, m: torch.roll(torch.nn.functional.pad(a, (1, 2)), 3, 1), ),
    }
    for name, (fn,) in cases.items():
        assert_close(fn(t, u, v).cpu(), fn(x, y, w), **tol, msg=name)
    assert fallback_ops() == {}


def test_indexing_scans_and_scaled_products_run_natively(metrics):
    x, y = crandn(4, 6), crandn(4, 6)
    b1, b2, v = crandn(2, 4, 5), crandn(2, 5, 6), crandn(6)
    index = torch.tensor([2, 0, 3])
    t, u = x.to(TPU), y.to(TPU)
    cases = {
        "scans": lambda a, b, i, p, q, r: torch.stack([a.cumsum(1), a.cumprod(0), a.flip(1), a.tril(), a.triu(1)]),
        "reductions": lambda a, b, i, p, q, r: torch.stack([a.prod(1), a.trace().expand(4), a.sum(1)]),
        "gather": lambda a, b, i, p, q, r: torch.cat([a.index_select(0, i).reshape(-1),
                                                      a.gather(1, i[None].expand(4, 3)).reshape(-1), a.take(i)]),
        "scatter": lambda a, b, i, p, q, r: a.index_add(0, i, b[:3]) + a.scatter_add(1, i[None].expand(4, 3), b)
                                            + a.index_copy(0, i, b[:3]) + a.masked_fill(a.real > 0, 2.5),
        "getitem": lambda a, b, i, p, q, r: torch.cat([a[i, 1:], a[a.real > 0][:0].reshape(0, 5)]),
        "scaled products": lambda a, b, i, p, q, r: torch.addmm(a, b[:, :5].t().conj()[:4, :4], a, beta=0.5, alpha=2.0)
                                                    + torch.baddbmm(a, p, q).sum(0) + torch.addr(a, a[:, 0], r),
        "blends": lambda a, b, i, p, q, r: torch.addcmul(a, a, b, value=0.5) + torch.addcdiv(a, a, b + 3, value=2.0),
        "math": lambda a, b, i, p, q, r: a.sinh() + a.cosh() + a.tan() + a.log1p() + a.expm1() + a.sigmoid(),
    }
    for name, fn in cases.items():
        got = fn(t, u, index.to(TPU), b1.to(TPU), b2.to(TPU), v.to(TPU))
        assert_close(got.cpu(), fn(x, y, index, b1, b2, v), rtol=1e-5, atol=1e-5, msg=name)
    assert torch.isnan(t / 0).any().item() == torch.isnan(x / 0).any().item()
    assert fallback_ops() == {}


@pytest.mark.parametrize("norm", [None, "ortho", "forward", "backward"])
def test_fft_family_matches_cpu(norm, metrics):
    x = torch.randn(6, 10, 8)
    z = crandn(6, 10, 8)
    t, s = x.to(TPU), z.to(TPU)
    calls = [
        ("fft", z, {}), ("ifft", z, {"n": 12}), ("fft", z, {"n": 5, "dim": 1}), ("rfft", x, {}),
        ("irfft", z, {"n": 14}), ("hfft", z, {}), ("ihfft", x, {}), ("fft2", z, {}), ("ifft2", z, {"s": (4, 9)}),
        ("rfft2", x, {}), ("irfft2", z, {}), ("fftn", z, {}), ("ifftn", z, {"dim": (0, 2)}), ("rfftn", x, {}),
        ("irfftn", z, {"s": (6, 10, 8)}), ("hfft2", z, {}), ("ihfftn", x, {}),
    ]
    for name, source, kwargs in calls:
        fn = getattr(torch.fft, name)
        on_tpu = fn(t if source is x else s, norm=norm, **kwargs)
        expected = fn(source, norm=norm, **kwargs)
        assert on_tpu.dtype == expected.dtype and on_tpu.shape == expected.shape, name
        scale = max(1.0, expected.abs().max().item())
        assert_close(on_tpu.cpu() / scale, expected / scale, rtol=1e-5, atol=1e-5, msg=name)
    assert fallback_ops() == {}


def test_fft_in_float64_and_complex128_is_double_precision():
    z = torch.randn(4, 32, dtype=torch.complex128)
    assert_close(torch.fft.fft(z.to(TPU)).cpu(), torch.fft.fft(z), rtol=1e-12, atol=1e-12)
    x = torch.randn(4, 32, dtype=torch.float64)
    assert_close(torch.fft.irfft(torch.fft.rfft(x.to(TPU))).cpu(), x, rtol=1e-12, atol=1e-12)


def test_stft_istft_round_trip_matches_cpu():
    signal = torch.randn(2, 400)
    window = torch.hann_window(64)
    spec = torch.stft(signal, 64, hop_length=16, window=window, return_complex=True)
    on_tpu = torch.stft(signal.to(TPU), 64, hop_length=16, window=window.to(TPU), return_complex=True)
    assert_close(on_tpu.cpu(), spec, rtol=1e-5, atol=1e-4)
    back = torch.istft(on_tpu, 64, hop_length=16, window=window.to(TPU), length=400)
    assert_close(back.cpu(), signal, rtol=1e-5, atol=1e-5)


def test_gradients_through_the_fft_match_cpu():
    x = torch.randn(8, 16, requires_grad=True)
    z = crandn(8, 16).requires_grad_()
    xt = x.detach().to(TPU).requires_grad_()
    zt = z.detach().to(TPU).requires_grad_()

    def loss(a, c):
        spectrum = torch.fft.rfft(a, norm="ortho")
        mixed = torch.fft.ifft2(c) * torch.fft.fft(c, dim=0).conj()
        return (spectrum.abs() ** 2).sum() + torch.view_as_real(mixed).pow(2).sum() + torch.fft.irfft(spectrum).sum()

    loss(x, z).backward()
    loss(xt, zt).backward()
    assert_close(xt.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    assert_close(zt.grad.cpu(), z.grad, rtol=1e-4, atol=1e-4)


def test_complex_numbers_as_operands(metrics):
    x = crandn(5)
    t = x.to(TPU)
    # Values that agree in their first 8 bytes (the real part) are different operands.
    for number in (1j, 2j, 2.5 - 3j, 1 + 2j, 1 + 3j):
        assert_close((t * number).cpu(), x * number)
        assert_close(torch.sub(t, t.conj(), alpha=number).cpu(), torch.sub(x, x.conj(), alpha=number))
        assert_close(t.clone().fill_(number).cpu(), x.clone().fill_(number))
        assert_close(t.masked_fill(t.real > 0, number).cpu(), x.masked_fill(x.real > 0, number))
        assert_close(torch.full((2,), number, device=TPU).cpu(), torch.full((2,), number))
    assert_close(torch.exp(1j * t.real).cpu(), torch.exp(1j * x.real))
    assert fallback_ops() == {}
    # A complex number for a real result: CPU's answer (the real part of 1 + 0j), or CPU's error.
    assert_close(torch.zeros(2, device=TPU).fill_(1 + 0j).cpu(), torch.ones(2))
    with pytest.raises(RuntimeError, match="cannot be converted to type float"):
        torch.zeros(2, device=TPU).fill_(1j)
    assert_close((t + 1).cpu(), x + 1)  # still usable


def test_complex_normal_draws_each_part_with_half_the_variance(metrics):
    z = torch.randn(100_000, dtype=torch.complex64, device=TPU).cpu()
    w = torch.empty(100_000, dtype=torch.complex128, device=TPU).normal_(2.0, 3.0).cpu()
    for part in (z.real, z.imag):
        assert abs(part.mean().item()) < 0.02 and abs(part.var().item() - 0.5) < 0.02
    for part in (w.real, w.imag):
        assert abs(part.mean().item() - 2.0) < 0.05 and abs(part.var().item() - 4.5) < 0.15
    assert abs((z.real * z.imag).mean().item()) < 0.02  # independent parts
    assert fallback_ops() == {}


def test_ops_without_a_complex_rule_fall_back_correctly(metrics):
    x = crandn(4, 5)
    t = x.to(TPU)
    # Ops whose rules handle real dtypes only, and a rule that reads its scalar at compile time.
    assert_close(t.pow(0.5j).cpu(), x.pow(0.5j))
    hermitian = x[:, :4] + x[:, :4].mH
    assert_close(torch.linalg.ldl_factor(hermitian.to(TPU), hermitian=True)[0].cpu(),
                 torch.linalg.ldl_factor(hermitian, hermitian=True)[0])
    assert fallback_ops()  # they ran on the CPU, and said so in the metrics


def _complex_native_cases(dtype):
    """name -> fn(device) of the complex cases the reductions, pads, factories, scaled products and
    Cholesky-family rules serve (each draws its inputs once, outside the lambda)."""
    g = torch.Generator().manual_seed(0)

    def c(*shape):
        return torch.randn(*shape, dtype=dtype, generator=g)

    a, b, m, v, w, s = c(3, 4), c(4, 5), c(3, 5), c(4), c(4), c(2, 3, 5)
    b1, b2, sq, img = c(2, 3, 4), c(2, 4, 5), c(4, 4), c(1, 2, 3, 4)
    x = c(2, 4, 4)
    hermitian = x @ x.mH + torch.eye(4, dtype=dtype)
    failing = hermitian.clone()
    failing[1] = -failing[1]
    rhs = c(2, 4, 3)
    upper = c(2, 4, 4).triu() + 3 * torch.eye(4, dtype=dtype)
    special = torch.tensor([1 + 1j, complex(float("inf"), 0), complex(0, float("-inf")), complex(float("nan"), 1)],
                           dtype=dtype)
    factor = torch.linalg.cholesky(hermitian)
    compact = torch.geqrf(x)
    symmetric = x + x.mT  # complex symmetric, not Hermitian: LAPACK's sytrf
    ldl = torch.linalg.ldl_factor(symmetric)
    long_rows = 3 * c(3, 130)
    return {
        "addmm": lambda d: torch.addmm(m.to(d), a.to(d), b.to(d), beta=0.5 + 1j, alpha=2j),
        "addmm_beta0_ignores_nan": lambda d: torch.addmm(m.to(d) * float("nan"), a.to(d), b.to(d), beta=0, alpha=1 - 1j),
        "addbmm": lambda d: torch.addbmm(m.to(d), b1.to(d), b2.to(d), beta=1j, alpha=0.5),
        "baddbmm": lambda d: torch.baddbmm(s.to(d), b1.to(d), b2.to(d), beta=2, alpha=1j),
        "addr": lambda d: torch.addr(sq.to(d), v.to(d), w.to(d), beta=1j, alpha=2),
        "addmv": lambda d: torch.addmv(m[:, 0].to(d), a.to(d), v.to(d), beta=1j, alpha=2 - 1j),
        "vdot": lambda d: torch.vdot(v.to(d), w.to(d)),
        "var": lambda d: torch.var(a.to(d), 1),
        "std": lambda d: torch.std(a.to(d), 0, correction=0),
        "var_mean": lambda d: torch.var_mean(a.to(d), 1, keepdim=True),
        "std_mean": lambda d: torch.std_mean(a.to(d)),
        "logsumexp": lambda d: torch.logsumexp(a.to(d), 1),
        "isinf": lambda d: torch.isinf(special.to(d)),
        "lerp_scalar": lambda d: torch.lerp(v.to(d), w.to(d), 0.3 + 0.4j),
        "lerp_tensor": lambda d: torch.lerp(v.to(d), w.to(d), (v * w).to(d)),
        "norm": lambda d: torch.norm(a.to(d)),
        "norm_dim": lambda d: torch.norm(a.to(d), p=3, dim=1),
        "renorm": lambda d: torch.renorm(a.to(d), 2, 0, 1.0),
        "linspace": lambda d: torch.linspace(1 + 2j, -3 + 1j, 7, dtype=dtype, device=d),
        "logspace": lambda d: torch.logspace(1 + 1j, 2 - 1j, 5, dtype=dtype, device=d),
        "reflection_pad": lambda d: torch.nn.functional.pad(s.to(d), (2, 3), mode="reflect"),
        "replication_pad": lambda d: torch.nn.functional.pad(img.to(d), (1, 2, 2, 0), mode="replicate"),
        "cholesky": lambda d: torch.linalg.cholesky(hermitian.to(d)),
        "cholesky_upper": lambda d: torch.linalg.cholesky(hermitian.to(d), upper=True),
        "cholesky_ex_failure": lambda d: torch.linalg.cholesky_ex(failing.to(d)),
        "cholesky_solve": lambda d: torch.cholesky_solve(rhs.to(d), factor.to(d)),
        "cholesky_inverse": lambda d: torch.cholesky_inverse(factor[0].to(d)),
        "triangular_solve_transpose": lambda d: torch.triangular_solve(rhs.to(d), upper.to(d), transpose=True)[0],
        "solve_triangular_right": lambda d: torch.linalg.solve_triangular(upper.to(d), rhs.mT.to(d), upper=True,
                                                                          left=False),
        "ldl_factor": lambda d: torch.linalg.ldl_factor_ex(symmetric.to(d)),
        "ldl_solve": lambda d: torch.linalg.ldl_solve(*(t.to(d) for t in ldl), rhs.to(d)),
        "logaddexp": lambda d: torch.logaddexp(a.to(d), (a * 1j).to(d)),
        # Rows long enough that the scan's imaginary parts leave (-pi, pi]: CPU's order is followed.
        "logcumsumexp_long_rows": lambda d: torch.logcumsumexp(long_rows.to(d), 1),
        "logcumsumexp_dim0": lambda d: torch.logcumsumexp(s.to(d), 0),
        "logcumsumexp_special": lambda d: torch.logcumsumexp(special.to(d), 0),
        "matrix_exp": lambda d: torch.linalg.matrix_exp(x.to(d)),
        "qr": lambda d: torch.linalg.qr(s[0].mT.to(d)),
        "qr_complete": lambda d: torch.linalg.qr(b1.to(d), mode="complete"),
        "geqrf": lambda d: torch.geqrf(x.to(d)),
        "householder_product": lambda d: torch.linalg.householder_product(*(t.to(d) for t in compact)),
        "ormqr_adjoint_right": lambda d: torch.ormqr(*(t.to(d) for t in compact), rhs.mT.to(d), left=False,
                                                     transpose=True),
        "ormqr_left": lambda d: torch.ormqr(*(t.to(d) for t in compact), rhs.to(d)),
    }


@pytest.mark.parametrize("dtype", COMPLEX)
def test_reductions_pads_factories_and_factorizations_run_natively(dtype, metrics):
    # Householder QR picks LAPACK's reflectors, so Q and R (and geqrf's compact form) equal CPU's, phases too.
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    for name, fn in _complex_native_cases(dtype).items():
        expected, actual = fn("cpu"), fn(TPU)
        if not isinstance(expected, tuple):
            expected, actual = (expected,), (actual,)
        for e, a in zip(expected, actual):
            assert_close(a.cpu(), e, equal_nan=True, **tol, msg=lambda text, name=name: f"{name}: {text}")
    assert fallback_ops() == {}


def test_complex_uniform_fills_both_parts(metrics):
    z = torch.empty(10_000, dtype=torch.complex64, device=TPU).uniform_(-2, 3).cpu()
    for part in (z.real, z.imag):
        assert part.min() >= -2 and part.max() < 3 and abs(part.mean().item() - 0.5) < 0.05
    assert fallback_ops() == {}


def test_complex_in_fused_mode_and_compile(metrics):
    z = crandn(8, 8)
    with torchtpu.eager_mode("fused"):
        t = z.to(TPU)
        y = torch.fft.ifft(torch.fft.fft(t) * 2).real.sum(0)
        assert_close(y.cpu(), torch.fft.ifft(torch.fft.fft(z) * 2).real.sum(0), rtol=1e-5, atol=1e-5)

    def spectrum_power(a):
        return torch.fft.rfft(a).abs().pow(2).mean(-1)

    compiled = torch.compile(spectrum_power, backend="tpu")
    x = torch.randn(4, 32)
    for _ in range(2):
        assert_close(compiled(x.to(TPU)).cpu(), spectrum_power(x), rtol=1e-5, atol=1e-4)
    assert fallback_ops() == {}


def test_compiled_istft_and_spectral_gradients_match_cpu(metrics):
    # torch.compile decomposes istft into unfold_backward with a broadcast window envelope, and the backward
    # of rfft into a complex slice_scatter: both on the device.
    signal = torch.randn(2, 400)
    window = torch.hann_window(64)

    def round_trip(s, w):
        spec = torch.stft(s, 64, hop_length=16, window=w, return_complex=True)
        return torch.istft(spec * 0.5, 64, hop_length=16, window=w, length=400)

    def filtered(s):
        return torch.fft.irfft(torch.fft.rfft(s) * 0.5, n=400)

    for f in (round_trip, filtered):
        args = (signal, window) if f is round_trip else (signal,)
        x = signal.clone().requires_grad_()
        f(x, *args[1:]).pow(2).sum().backward()
        xt = signal.to(TPU).requires_grad_()
        out = torch.compile(f, backend="tpu")(xt, *(a.to(TPU) for a in args[1:]))
        assert_close(out.cpu(), f(signal, *args[1:]), rtol=1e-5, atol=1e-5)
        out.pow(2).sum().backward()
        assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    z, w = crandn(2, 400), crandn(2, 201)
    assert_close(torch.slice_scatter(z.to(TPU), w.to(TPU), 1, 0, 201).cpu(), torch.slice_scatter(z, w, 1, 0, 201))
    assert_close(torch.select_scatter(z.to(TPU), z[1].to(TPU), 0, 0).cpu(), torch.select_scatter(z, z[1], 0, 0))
    assert fallback_ops() == {}


@pytest.mark.parametrize("dtype", COMPLEX)
def test_lu_family_solves_inverts_and_differentiates(dtype, metrics):
    a, b, c = crandn(2, 4, 4, dtype=dtype), crandn(2, 4, 3, dtype=dtype), crandn(2, 3, 4, dtype=dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    lu, pivots = torch.linalg.lu_factor(a)
    lu_t, pivots_t = torch.linalg.lu_factor(a.to(TPU))
    assert torch.equal(pivots_t.cpu(), pivots)  # LAPACK's pivots: largest |re| + |im|
    for left in (True, False):
        for adjoint in (False, True):
            rhs = b if left else c
            got = torch.linalg.lu_solve(lu_t, pivots_t, rhs.to(TPU), left=left, adjoint=adjoint)
            assert_close(got.cpu(), torch.linalg.lu_solve(lu, pivots, rhs, left=left, adjoint=adjoint), **tol)
    assert_close(torch.linalg.inv(a.to(TPU)).cpu(), torch.linalg.inv(a), **tol)
    assert_close(torch.linalg.det(a.to(TPU)).cpu(), torch.linalg.det(a), **tol)
    sign, logabsdet = torch.linalg.slogdet(a.to(TPU))
    assert_close((sign.cpu(), logabsdet.cpu()), tuple(torch.linalg.slogdet(a)), **tol)
    assert_close(torch.linalg.solve(a.to(TPU), c.to(TPU), left=False).cpu(), torch.linalg.solve(a, c, left=False),
                 **tol)
    x = a[0].clone().requires_grad_()
    xt = a[0].to(TPU).requires_grad_()
    torch.view_as_real(torch.linalg.solve(x, b[0])).pow(2).sum().backward()
    torch.view_as_real(torch.linalg.solve(xt, b[0].to(TPU))).pow(2).sum().backward()
    assert_close(xt.grad.cpu(), x.grad, **tol)
    assert fallback_ops() == {}


def test_abs_and_sqrt_at_special_values_match_cpu():
    # XLA's formulas: |1+NaN·i| came out finite, and sqrt(-4-0i) on the +2i side of the branch cut.
    nan, inf = float("nan"), float("inf")
    z = torch.tensor([complex(nan, 1), complex(1, nan), complex(inf, nan), complex(nan, -inf), complex(-4, -0.0),
                      complex(-4, 0.0), complex(3, -0.0), complex(0, 1e30)])
    assert_close(z.to("tpu").abs().cpu(), z.abs(), equal_nan=True)
    finite = z[4:]
    root = finite.to("tpu").sqrt().cpu()
    assert_close(root, finite.sqrt())
    assert torch.equal(torch.signbit(root.imag), torch.signbit(finite.sqrt().imag))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_logaddexp_and_logcumsumexp_at_special_values_match_cpu(dtype):
    # Every pair of infinite, NaN, signed-zero and finite parts: where CPU's C++ complex exp and log of
    # infinities give +inf, NaN or an angle, XLA's formulas differ unless the rule spells CPU's out.
    inf, nan = float("inf"), float("nan")
    parts = [complex(r, i) for r in (-inf, -2.0, 0.0, 3.0, inf, nan) for i in (-inf, -1.0, -0.0, 0.0, 2.0, inf, nan)]
    a = torch.tensor([x for x in parts for _ in parts], dtype=dtype)
    b = torch.tensor([y for _ in parts for y in parts], dtype=dtype)
    expected, actual = torch.logaddexp(a, b), torch.logaddexp(a.to(TPU), b.to(TPU)).cpu()
    assert_close(actual, expected, equal_nan=True)
    for part in (torch.real, torch.imag):
        assert torch.equal(part(actual).isnan(), part(expected).isnan())
    rows = torch.stack([a[:len(parts)], b[:len(parts)]], 1)  # scans that meet each special value
    assert_close(torch.logcumsumexp(rows.to(TPU), 0).cpu(), torch.logcumsumexp(rows, 0), equal_nan=True)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_svd_eigh_and_lstsq_by_complex_jacobi(dtype, metrics):
    # Singular and eigen vectors are unique up to a phase per vector: compared by magnitude, and by what
    # they rebuild. lstsq through the SVD, with CPU's gelsy and gels drivers.
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.complex64 else dict(rtol=1e-9, atol=1e-9)
    g = torch.Generator().manual_seed(0)
    for shape in [(5, 3), (3, 5), (2, 4, 4)]:
        a = torch.randn(*shape, dtype=dtype, generator=g)
        for full_matrices in (False, True):
            u, s, vh = torch.linalg.svd(a, full_matrices=full_matrices)
            ut, st, vht = (t.cpu() for t in torch.linalg.svd(a.to(TPU), full_matrices=full_matrices))
            k = s.shape[-1]
            assert_close(st, s, **tol)
            assert_close(ut[..., :k].abs(), u[..., :k].abs(), **tol)
            assert_close(vht[..., :k, :].abs(), vh[..., :k, :].abs(), **tol)
            assert_close((ut[..., :k] * st.to(dtype).unsqueeze(-2)) @ vht[..., :k, :], a, **tol)
            eye = torch.eye(ut.shape[-1], dtype=dtype)
            assert_close(ut.mH @ ut, eye.expand(*ut.shape[:-2], -1, -1), **tol)  # full_matrices: a unitary U
        assert_close(torch.linalg.pinv(a.to(TPU)).cpu(), torch.linalg.pinv(a), **tol)
    x = torch.randn(2, 4, 4, dtype=dtype, generator=g)
    hermitian = x + x.mH
    hermitian.diagonal(dim1=-2, dim2=-1).imag.fill_(0.5)  # not read, as by LAPACK
    for uplo in ("L", "U"):
        w, v = torch.linalg.eigh(hermitian, UPLO=uplo)
        wt, vt = (t.cpu() for t in torch.linalg.eigh(hermitian.to(TPU), UPLO=uplo))
        assert_close(wt, w, **tol)
        assert_close(vt.abs(), v.abs(), **tol)
    a, b = torch.randn(5, 3, dtype=dtype, generator=g), torch.randn(5, 2, dtype=dtype, generator=g)
    for driver in ("gelsy", "gels"):
        got_all = torch.linalg.lstsq(a.to(TPU), b.to(TPU), driver=driver)
        for got, want in zip(got_all, torch.linalg.lstsq(a, b, driver=driver)):
            assert got.dtype == want.dtype
            assert_close(got.cpu(), want, **tol)
    assert fallback_ops() == {}
