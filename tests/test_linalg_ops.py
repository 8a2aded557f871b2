"""Matrix decompositions and solvers (csrc/lowering/linalg_*.cc) against CPU PyTorch, with no CPU
fallback: Cholesky, triangular solves, LU and what is built on it, eigh, SVD, QR, lstsq, matrix_exp, eye, LDL,
eig (compared in CPU's eigenvalue order).

Tolerances: float32 results at rtol=1e-4/atol=1e-4 (the algorithms differ from LAPACK's, so results agree
to a few ulps times the condition of the problem, not bit for bit); integer results (pivots, info) exactly.
Eigenvectors and singular vectors are compared up to sign (their absolute values), as PyTorch's OpInfos do.
"""
import pytest
import torch

import torchtpu
from torch.testing import assert_close
from torchtpu.metrics import fallback_ops

TOL = dict(rtol=1e-4, atol=1e-4)


def tpu(t):
    return t.to("tpu")


def host(result):
    if isinstance(result, torch.Tensor):
        return result.cpu()
    return tuple(host(r) for r in result)


@pytest.fixture(autouse=True)
def no_fallback():
    torchtpu.reset_metrics()
    yield
    assert fallback_ops() == {}


def spd(*shape, dtype=torch.float32):
    x = torch.randn(*shape, dtype=dtype)
    return x @ x.mT + torch.eye(shape[-1], dtype=dtype)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_family(upper):
    a = spd(2, 4, 4)
    factor = torch.linalg.cholesky(a, upper=upper)
    assert_close(torch.linalg.cholesky(tpu(a), upper=upper).cpu(), factor, **TOL)
    b = torch.randn(2, 4, 3)
    assert_close(torch.cholesky_solve(tpu(b), tpu(factor), upper=upper).cpu(),
                 torch.cholesky_solve(b, factor, upper=upper), **TOL)
    assert_close(torch.cholesky_inverse(tpu(factor), upper=upper).cpu(),
                 torch.cholesky_inverse(factor, upper=upper), **TOL)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_ex_reports_the_first_failing_minor_like_lapack(upper):
    a = torch.stack([torch.eye(3), -torch.eye(3), torch.tensor([[4.0, 2, 0], [2, 5, 1], [0, 1, -3]])])
    factor, info = torch.linalg.cholesky_ex(tpu(a), upper=upper)
    expected_factor, expected_info = torch.linalg.cholesky_ex(a, upper=upper)
    assert torch.equal(info.cpu(), expected_info)  # [0, 1, 3]
    assert_close(factor.cpu(), expected_factor, **TOL)


def test_cholesky_of_a_non_positive_definite_matrix_raises_like_cpu():
    a = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 2"):
        torch.linalg.cholesky(tpu(a))


@pytest.mark.parametrize("upper,left", [(False, True), (True, False)])
def test_solve_triangular(upper, left):
    a = torch.randn(3, 4, 4) + 4 * torch.eye(4)
    b = torch.randn(3, 4, 2) if left else torch.randn(1, 2, 4)  # B broadcasts over A's batch
    assert_close(torch.linalg.solve_triangular(tpu(a), tpu(b), upper=upper, left=left).cpu(),
                 torch.linalg.solve_triangular(a, b, upper=upper, left=left), **TOL)
    assert_close(torch.linalg.solve_triangular(tpu(a), tpu(b), upper=upper, left=left, unitriangular=True).cpu(),
                 torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=True), **TOL)


@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve(transpose):
    a = torch.randn(2, 4, 4) + 4 * torch.eye(4)
    b = torch.randn(2, 4, 3)
    for actual, expected in zip(host(torch.triangular_solve(tpu(b), tpu(a), True, transpose)),
                                torch.triangular_solve(b, a, True, transpose)):
        assert_close(actual, expected, **TOL)


@pytest.mark.parametrize("shape", [(3, 5, 5), (4, 6), (6, 4)])
def test_lu_factor_and_unpack(shape):
    a = torch.randn(*shape)
    lu, pivots, info = host(torch.linalg.lu_factor_ex(tpu(a)))
    expected_lu, expected_pivots, expected_info = torch.linalg.lu_factor_ex(a)
    assert pivots.dtype == torch.int32 and torch.equal(pivots, expected_pivots)
    assert torch.equal(info, expected_info)
    assert_close(lu, expected_lu, **TOL)
    for actual, expected in zip(host(torch.linalg.lu(tpu(a))), torch.linalg.lu(a)):
        assert_close(actual, expected, **TOL)
    for actual, expected in zip(host(torch.lu_unpack(tpu(expected_lu), tpu(expected_pivots))),
                                torch.lu_unpack(expected_lu, expected_pivots)):
        assert_close(actual, expected, **TOL)


@pytest.mark.parametrize("a", [torch.zeros(3, 3), torch.tensor([[1.0, 2], [2, 4]]), torch.tensor([[0.0, 1], [0, 1]])],
                         ids=["zero", "rank1", "zero_column"])
def test_singular_matrices_match_lapack(a):
    for actual, expected in zip(host(torch.linalg.lu_factor_ex(tpu(a))), torch.linalg.lu_factor_ex(a)):
        assert torch.equal(actual, expected)
    assert_close(torch.linalg.det(tpu(a)).cpu(), torch.linalg.det(a))
    for actual, expected in zip(host(torch.linalg.slogdet(tpu(a))), torch.linalg.slogdet(a)):
        assert_close(actual, expected)


def test_inverse_of_a_singular_matrix_raises_like_cpu():
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(tpu(torch.tensor([[1.0, 2.0], [2.0, 4.0]])))


@pytest.mark.parametrize("op", [
    lambda a: torch.linalg.inv_ex(a, check_errors=True),
    lambda a: torch.linalg.cholesky_ex(a, check_errors=True),
    lambda a: torch.linalg.solve_ex(a, a, check_errors=True),
], ids=["inv_ex", "cholesky_ex", "solve_ex"])
def test_check_errors_raises_like_cpu(op):
    a = torch.stack([torch.eye(2), torch.tensor([[1.0, 2.0], [2.0, 4.0]])])
    with pytest.raises(torch.linalg.LinAlgError, match="Batch element 1"):
        op(tpu(a))
    with pytest.raises(torch.linalg.LinAlgError, match="Batch element 1"):
        op(a)
    op(tpu(a[:1]))  # a valid input doesn't raise


def test_det_slogdet_inv_solve():
    a = torch.randn(3, 5, 5)
    assert_close(torch.linalg.det(tpu(a)).cpu(), torch.linalg.det(a), **TOL)
    for actual, expected in zip(host(torch.linalg.slogdet(tpu(a))), torch.linalg.slogdet(a)):
        assert_close(actual, expected, **TOL)
    assert_close(torch.linalg.inv(tpu(a)).cpu(), torch.linalg.inv(a), **TOL)
    b = torch.randn(3, 5, 2)
    assert_close(torch.linalg.solve(tpu(a), tpu(b)).cpu(), torch.linalg.solve(a, b), **TOL)
    v = torch.randn(5)
    assert_close(torch.linalg.solve(tpu(a), tpu(v)).cpu(), torch.linalg.solve(a, v), **TOL)


@pytest.mark.parametrize("left,adjoint", [(True, False), (False, True)])
def test_lu_solve(left, adjoint):
    a = torch.randn(2, 4, 4)
    lu, pivots = torch.linalg.lu_factor(a)
    b = torch.randn(2, 4, 3) if left else torch.randn(2, 3, 4)
    assert_close(torch.linalg.lu_solve(tpu(lu), tpu(pivots), tpu(b), left=left, adjoint=adjoint).cpu(),
                 torch.linalg.lu_solve(lu, pivots, b, left=left, adjoint=adjoint), **TOL)


@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
def test_det_and_slogdet_gradients(transposed):
    # The CPU kernels factor A^T for a contiguous A and their backward relies on it.
    base = torch.randn(4, 4)
    a = base.mT if transposed else base
    for fn in (torch.linalg.det, lambda x: torch.linalg.slogdet(x).logabsdet):
        expected_leaf = a.clone().requires_grad_()
        fn(expected_leaf).backward()
        leaf = (tpu(base).mT if transposed else tpu(base)).detach().requires_grad_()
        assert leaf.is_contiguous() != transposed
        fn(leaf).backward()
        assert_close(leaf.grad.cpu(), expected_leaf.grad, **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eigh(dtype):
    x = torch.randn(2, 5, 5, dtype=dtype)
    a = x + x.mT
    for uplo in ("L", "U"):
        values, vectors = host(torch.linalg.eigh(tpu(a), UPLO=uplo))
        expected_values, expected_vectors = torch.linalg.eigh(a, UPLO=uplo)
        assert_close(values, expected_values, **TOL)
        assert_close(vectors.abs(), expected_vectors.abs(), **TOL)
    assert_close(torch.linalg.eigvalsh(tpu(a)).cpu(), torch.linalg.eigvalsh(a), **TOL)


@pytest.mark.parametrize("shape,full_matrices", [((5, 3), True), ((2, 3, 6), False), ((2, 3, 6), True)])
def test_svd(shape, full_matrices):
    a = torch.randn(*shape)
    u, s, vh = host(torch.linalg.svd(tpu(a), full_matrices=full_matrices))
    expected_u, expected_s, expected_vh = torch.linalg.svd(a, full_matrices=full_matrices)
    assert u.shape == expected_u.shape and vh.shape == expected_vh.shape
    k = s.shape[-1]
    assert_close(s, expected_s, **TOL)
    assert_close(u[..., :k].abs(), expected_u[..., :k].abs(), **TOL)
    assert_close(vh[..., :k, :].abs(), expected_vh[..., :k, :].abs(), **TOL)
    # The completed bases of full_matrices are orthonormal too.
    assert_close(u.mT @ u, torch.eye(u.shape[-1]).expand_as(u.mT @ u), **TOL)
    assert_close(vh @ vh.mT, torch.eye(vh.shape[-2]).expand_as(vh @ vh.mT), **TOL)


def test_svd_based_ops():
    a = torch.randn(4, 3, dtype=torch.float64)
    assert_close(torch.linalg.svdvals(tpu(a)).cpu(), torch.linalg.svdvals(a))
    assert_close(torch.linalg.pinv(tpu(a)).cpu(), torch.linalg.pinv(a))
    assert torch.linalg.matrix_rank(tpu(a)).item() == 3


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 5)])
def test_qr(shape):
    a = torch.randn(*shape)
    for mode in ("reduced", "complete", "r"):
        for actual, expected in zip(host(torch.linalg.qr(tpu(a), mode=mode)), torch.linalg.qr(a, mode=mode)):
            assert actual.shape == expected.shape
            assert_close(actual, expected, **TOL)


def test_householder_product_and_ormqr():
    a = torch.randn(2, 5, 3)
    reflectors, tau = torch.geqrf(a)
    assert_close(torch.linalg.householder_product(tpu(reflectors), tpu(tau)).cpu(),
                 torch.linalg.householder_product(reflectors, tau), **TOL)
    c = torch.randn(2, 5, 2)
    for transpose in (False, True):
        assert_close(torch.ormqr(tpu(reflectors), tpu(tau), tpu(c), True, transpose).cpu(),
                     torch.ormqr(reflectors, tau, c, True, transpose), **TOL)
        assert_close(torch.ormqr(tpu(reflectors), tpu(tau), tpu(c.mT), False, transpose).cpu(),
                     torch.ormqr(reflectors, tau, c.mT, False, transpose), **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matrix_exp(dtype):
    # Against float64 relative to each matrix's size: elementwise agreement with CPU's float32 is limited by
    # cancellation in either result. CPU's own bfloat16 kernel overflows, so bf16 is checked the same way.
    a = torch.randn(3, 4, 4) * 3
    a[1] = 0
    expected = torch.linalg.matrix_exp(a.to(dtype).double())
    actual = torch.linalg.matrix_exp(tpu(a.to(dtype))).cpu()
    assert actual.dtype == dtype
    scale = expected.abs().amax((-2, -1), keepdim=True)
    bound = 1e-5 if dtype == torch.float32 else 1e-2
    assert ((actual.double() - expected).abs() / scale).max() < bound


def test_eye():
    assert torch.equal(torch.eye(3, 4, device="tpu").cpu(), torch.eye(3, 4))
    assert torch.equal(torch.eye(3, dtype=torch.int64, device="tpu").cpu(), torch.eye(3, dtype=torch.int64))
    assert torch.equal(torch.eye(2, dtype=torch.bool, device="tpu").cpu(), torch.eye(2, dtype=torch.bool))



def test_lstsq_matches_cpu_for_gelsy_and_gels():
    cases = [((5, 3), (5, 2)), ((2, 3, 5), (2, 3, 2)), ((4, 4), (4, 1)), ((2, 3, 6, 2), (2, 3, 6, 3)), ((5, 3), (5,))]
    for a_shape, b_shape in cases:
        a, b = torch.randn(a_shape), torch.randn(b_shape)
        for driver in (None, "gelsy", "gels"):
            got = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), driver=driver)
            want = torch.linalg.lstsq(a, b, driver=driver)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == w.dtype
                torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-4)
    # Rank-deficient: the minimum-norm solution and the effective rank, as gelsy finds them.
    a = torch.randn(6, 4)
    a[:, 3] = a[:, 1] + a[:, 2]
    b = torch.randn(6, 2)
    got, want = torch.linalg.lstsq(a.to("tpu"), b.to("tpu")), torch.linalg.lstsq(a, b)
    torch.testing.assert_close(got.solution.cpu(), want.solution, rtol=1e-4, atol=1e-4)
    assert got.rank.item() == want.rank.item() == 3


# ---- LDL (linalg_ldl.cc): LAPACK's sytf2 / sytrs step for step, so the pivots are CPU's exactly ----------

def symmetric(*shape, dtype=torch.float64, generator=None):
    x = torch.randn(*shape, dtype=dtype, generator=generator)
    return x + x.mT


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ldl_factor_and_solve_match_lapack(dtype):
    generator = torch.Generator().manual_seed(0)
    tol = TOL if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    # Sizes 1-8 and a larger one, batched or not: both 1x1 and 2x2 pivots, with and without row swaps.
    for shape in [(1, 1), (2, 2), (5, 5), (3, 6, 6), (2, 2, 8, 8), (40, 40)]:
        a = symmetric(*shape, dtype=dtype, generator=generator)
        want, got = torch.linalg.ldl_factor_ex(a), host(torch.linalg.ldl_factor_ex(tpu(a)))
        assert torch.equal(got[1], want.pivots) and torch.equal(got[2], want.info), shape
        assert_close(got[0], want.LD, **tol)
        b = torch.randn(*shape[:-1], 3, dtype=dtype, generator=generator)
        assert_close(torch.linalg.ldl_solve(*map(tpu, (want.LD, want.pivots, b))).cpu(),
                     torch.linalg.ldl_solve(want.LD, want.pivots, b), **tol)


def test_ldl_reads_the_lower_triangle_and_reports_a_zero_pivot():
    a = symmetric(4, 4)
    a[0, 1:] = 100.0  # the upper triangle is not read
    a[2, :] = 0.0
    a[:, 2] = 0.0
    want, got = torch.linalg.ldl_factor_ex(a), host(torch.linalg.ldl_factor_ex(tpu(a)))
    assert want.info.item() > 0 and torch.equal(got[2], want.info) and torch.equal(got[1], want.pivots)
    assert_close(got[0], want.LD, rtol=1e-10, atol=1e-10)
    with pytest.raises(RuntimeError, match="Unknown error code"):  # CPU's words for a singular LDL
        torch.linalg.ldl_factor(tpu(torch.zeros(3, 3)))


# ---- linalg.eig (linalg_orthogonal.cc): shifted QR in complex arithmetic ------------------------------------

def in_order_of(reference, values, vectors=None):
    """values (and vectors' columns) reordered so each of reference's eigenvalues meets its nearest one:
    PyTorch specifies no order of eigenvalues."""
    distance = (reference.unsqueeze(-1) - values.unsqueeze(-2)).abs()
    order = []
    for row in distance.reshape(-1, *distance.shape[-2:]):
        taken = []
        for position in range(row.shape[0]):
            free = row[position].clone()
            free[taken] = float("inf")
            taken.append(int(free.argmin()))
        order.append(taken)
    order = torch.tensor(order).reshape(values.shape)
    values = values.gather(-1, order)
    if vectors is None:
        return values
    return values, vectors.gather(-1, order.unsqueeze(-2).expand(vectors.shape))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
def test_eig_matches_lapack_up_to_order(dtype):
    generator = torch.Generator().manual_seed(0)
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else TOL
    for shape in [(1, 1), (5, 5), (3, 4, 4), (12, 12)]:
        a = torch.randn(*shape, dtype=dtype, generator=generator)
        w, v = torch.linalg.eig(a)
        wt, vt = host(torch.linalg.eig(tpu(a)))
        assert wt.dtype == w.dtype and vt.dtype == v.dtype
        wt, vt = in_order_of(w, wt, vt)
        assert_close(wt, w, **tol)
        # LAPACK's normalization: unit norm, largest component real, so equal up to the sign of real vectors.
        assert_close(vt.abs(), v.abs(), **tol)
        assert_close(a.to(vt.dtype) @ vt, vt * wt.unsqueeze(-2), **tol)
        assert_close(in_order_of(w, torch.linalg.eigvals(tpu(a)).cpu()), w, **tol)


def test_eig_of_defective_and_zero_matrices_and_its_gradient():
    jordan = torch.tensor([[2.0, 1.0, 0.0], [0.0, 2.0, 1.0], [0.0, 0.0, 2.0]])
    for a in (jordan, torch.zeros(3, 3), torch.eye(3), torch.zeros(0, 0)):
        w, v = host(torch.linalg.eig(tpu(a)))
        assert v.isfinite().all()
        assert_close(w, torch.linalg.eigvals(a), **TOL)
    a = torch.randn(4, 4, dtype=torch.float64)
    grads = []
    for x in (a.clone().requires_grad_(), tpu(a).requires_grad_()):
        w, v = torch.linalg.eig(x)
        (w.real.pow(2).sum() + w.imag.abs().sum() + v.abs().sum()).backward()
        grads.append(x.grad.cpu())
    assert_close(grads[1], grads[0], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("a_shape, b_shape, left", [
    ((3, 3), (4, 3, 2), True), ((1, 3, 3), (2, 3, 2), True), ((2, 1, 3, 3), (4, 3, 2), True),
    ((2, 3, 3), (3, 2), True), ((3, 3), (4, 2, 3), False)])
def test_solve_broadcasts_batches_of_either_side(a_shape, b_shape, left):
    # B with more batch dims than A failed to compile (the factors of A were not spread over B's batch).
    a = (torch.randn(*a_shape) + 3 * torch.eye(3)).requires_grad_()
    b = torch.randn(*b_shape).requires_grad_()
    expected = torch.linalg.solve(a, b, left=left)
    expected.sum().backward()
    a_tpu, b_tpu = a.detach().to("tpu").requires_grad_(), b.detach().to("tpu").requires_grad_()
    actual = torch.linalg.solve(a_tpu, b_tpu, left=left)
    actual.sum().backward()
    assert_close(actual.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    assert_close(a_tpu.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5)
    assert_close(b_tpu.grad.cpu(), b.grad, rtol=1e-5, atol=1e-5)
