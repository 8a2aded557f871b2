"""Each lowered op against CPU PyTorch: values, dtypes, broadcasting, type promotion, Python scalars,
in-place and out= variants. Tolerances: exact for integer/bool results, rtol=1.3e-6/atol=1e-5 for float32
(torch.testing defaults), bf16 at torch's bf16 defaults."""
import pytest
import torch

import torchtpu
from torchtpu.metrics import fallback_ops

from torch.testing import assert_close


def tpu(t):
    return t.to("tpu")


def check(fn, *cpu_args, **kwargs):
    """Runs fn on CPU tensors and on their tpu copies; compares values and dtypes."""
    expected = fn(*cpu_args)
    actual = fn(*[tpu(a) if isinstance(a, torch.Tensor) else a for a in cpu_args])
    if isinstance(expected, tuple):
        for e, a in zip(expected, actual):
            assert a.device.type == "tpu"
            assert_close(a.cpu(), e, **kwargs)
    else:
        assert actual.device.type == "tpu"
        assert_close(actual.cpu(), expected, **kwargs)


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.pow]
UNARY = [torch.neg, torch.abs, torch.exp, torch.tanh, torch.sigmoid, torch.relu, torch.sin, torch.cos,
         torch.reciprocal]
COMPARE = [torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge]


@pytest.mark.parametrize("op", BINARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (5,))])
def test_binary_broadcasting(op, shapes):
    a, b = randn(*shapes[0]), randn(*shapes[1])
    if op is torch.pow:
        a = a.abs() + 0.5
    check(op, a, b)


@pytest.mark.parametrize("op", UNARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unary(op, dtype):
    check(op, randn(4, 5, dtype=dtype))


@pytest.mark.parametrize("op", [torch.log, torch.sqrt, torch.rsqrt], ids=lambda f: f.__name__)
def test_unary_positive_domain(op):
    check(op, torch.rand(4, 5) + 0.1)


@pytest.mark.parametrize("op", COMPARE, ids=lambda f: f.__name__)
def test_comparisons(op):
    a = torch.randint(0, 3, (4, 5)).float()
    b = torch.randint(0, 3, (5,)).float()
    check(op, a, b)
    check(lambda x: op(x, 1), a)


@pytest.mark.parametrize(
    "a_dtype,b_dtype",
    [(torch.int64, torch.float32), (torch.int32, torch.int64), (torch.bool, torch.int32),
     (torch.bfloat16, torch.float32), (torch.uint8, torch.int8), (torch.float16, torch.bfloat16)],
)
def test_type_promotion(a_dtype, b_dtype):
    a = (torch.randn(3, 4) * 4).to(a_dtype)
    b = (torch.randn(3, 4) * 4).to(b_dtype)
    check(torch.add, a, b)
    check(torch.mul, a, b)


@pytest.mark.parametrize("scalar", [2, 2.5, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_python_scalars(scalar, dtype):
    a = (torch.randn(3, 4) * 4).to(dtype)
    check(lambda x: x + scalar, a)
    check(lambda x: x * scalar, a)
    if not isinstance(scalar, bool):  # CPU forbids `-` with bools too
        check(lambda x: scalar - x, a)


def test_integer_division_is_true_division():
    a = torch.tensor([7, -7, 3])
    b = torch.tensor([2, 2, 3])
    check(torch.div, a, b)
    check(lambda x, y: torch.div(x, y, rounding_mode="floor"), a.float(), b.float())
    check(lambda x, y: torch.div(x, y, rounding_mode="trunc"), a.float(), b.float())


def test_floor_division_of_floats_follows_cpu_at_the_edges():
    """CPU computes from fmod, as Python's `//`: inf // 2 is NaN, a zero quotient keeps its sign."""
    inf = float("inf")
    a = torch.tensor([inf, -inf, 7.0, -7.0, 1e30, 5.0, 0.3, -0.0, 0.0, 1.0])
    b = torch.tensor([2.0, 2.0, -2.0, 2.0, 3.0, 0.0, 0.1, 3.0, -3.0, inf])
    check(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b, equal_nan=True)
    check(lambda x: torch.floor_divide(x, 2.0), a, equal_nan=True)


def test_where_and_clamp():
    a, b = randn(4, 5), randn(4, 5)
    check(lambda c, x, y: torch.where(c, x, y), a > 0, a, b)
    check(lambda x: x.clamp(-0.5, 0.5), a)
    check(lambda x: x.clamp(min=0.1), a)
    check(lambda x: x.clamp(max=0.1), a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_reductions(dtype):
    x = (torch.randn(3, 4, 5) * 3).to(dtype)
    check(lambda t: t.sum(), x)
    check(lambda t: t.sum(dim=1), x)
    check(lambda t: t.sum(dim=(0, 2), keepdim=True), x)
    check(lambda t: t.max(), x)
    check(lambda t: t.min(), x)
    check(lambda t: t.amax(dim=-1), x)
    check(lambda t: t.argmax(), x)
    check(lambda t: t.argmax(dim=1, keepdim=True), x)
    check(lambda t: t.argmin(dim=0), x)
    check(lambda t: t.max(dim=2), x)
    check(lambda t: t.min(dim=0, keepdim=True), x)
    if dtype.is_floating_point:
        check(lambda t: t.mean(), x)
        check(lambda t: t.mean(dim=[0, 1]), x)


def test_bf16_sum_accumulates_in_float32():
    x = torch.full((4096,), 1.0, dtype=torch.bfloat16)
    assert x.to("tpu").sum().item() == x.sum().item() == 4096


def test_argmax_prefers_first_and_nan():
    x = torch.tensor([[1.0, 3.0, 3.0], [float("nan"), 2.0, float("nan")]])
    check(lambda t: t.argmax(dim=1), x)
    check(lambda t: t.max(dim=1), x, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("size", [2, 8])
def test_products_at_alpha_zero_read_the_matrices_where_cpu_does(dtype, size):
    """alpha=0: CPU's BLAS-backed products read neither matrix (NaN in them does not reach the result); its
    16-bit kernels, addmv of complex and baddbmm of small matrices multiply anyway."""
    ones = torch.ones(size, size, dtype=dtype)
    nans = torch.full((size, size), float("nan"), dtype=dtype)
    calls = [lambda b, x, y: torch.addmm(b, x, y, alpha=0), lambda b, x, y: torch.addmm(b, x, y, alpha=0, beta=0),
             lambda b, x, y: torch.addmv(b[0], x, y[0], alpha=0),
             lambda b, x, y: torch.addbmm(b, x[None], y[None], alpha=0),
             lambda b, x, y: torch.baddbmm(b[None], x[None], y[None], alpha=0),
             lambda b, x, y: torch.addr(b, x[0], y[0], alpha=0)]
    for call in calls:
        check(call, ones, nans, ones, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmuls(dtype):
    check(torch.mm, randn(5, 7, dtype=dtype), randn(7, 3, dtype=dtype))
    check(torch.bmm, randn(2, 5, 7, dtype=dtype), randn(2, 7, 3, dtype=dtype))
    check(torch.matmul, randn(4, 2, 5, 7, dtype=dtype), randn(7, 3, dtype=dtype))
    check(lambda b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0), randn(3, dtype=dtype), randn(5, 7, dtype=dtype),
          randn(7, 3, dtype=dtype))
    check(lambda x, y: x @ y.t(), randn(5, 7, dtype=dtype), randn(3, 7, dtype=dtype))
    check(torch.dot, randn(7, dtype=dtype), randn(7, dtype=dtype))
    check(torch.mv, randn(3, 7, dtype=dtype), randn(7, dtype=dtype))
    check(lambda b, m, v: torch.addmv(b, m, v, beta=0.5, alpha=2.0), randn(3, dtype=dtype), randn(3, 7, dtype=dtype),
          randn(7, dtype=dtype))
    check(lambda b, x, y: torch.baddbmm(b, x, y, beta=0.5, alpha=2.0), randn(5, 3, dtype=dtype),
          randn(4, 5, 7, dtype=dtype), randn(4, 7, 3, dtype=dtype))
    # addbmm rounds its running sum per batch entry, as CPU does (visible in bfloat16).
    check(lambda b, x, y: torch.addbmm(b, x, y, beta=0.5, alpha=2.0), randn(5, 3, dtype=dtype),
          randn(6, 5, 7, dtype=dtype), randn(6, 7, 3, dtype=dtype))
    check(torch.vdot, randn(7, dtype=dtype), randn(7, dtype=dtype))
    check(lambda b, x, y: torch.addr(b, x, y, beta=0.5, alpha=2.0), randn(5, 3, dtype=dtype), randn(5, dtype=dtype),
          randn(3, dtype=dtype))
    check(lambda a, b: torch.linalg.cross(a, b, dim=1), randn(4, 3, 2, dtype=dtype), randn(1, 3, 2, dtype=dtype))


def test_mse_loss_and_backward():
    for reduction in ("mean", "sum", "none"):
        a, b = randn(4, 3), randn(4, 3)
        check(lambda x, y: torch.nn.functional.mse_loss(x, y, reduction=reduction), a, b)
        x_cpu = a.clone().requires_grad_()
        x_tpu = tpu(a).requires_grad_()
        for x, y in ((x_cpu, b), (x_tpu, tpu(b))):
            torch.nn.functional.mse_loss(x, y, reduction=reduction).sum().backward()
        assert_close(x_tpu.grad.cpu(), x_cpu.grad)


@pytest.mark.parametrize("activation", [torch.relu, torch.tanh, torch.sigmoid], ids=lambda f: f.__name__)
def test_activation_backward(activation):
    a = randn(4, 6)
    x_cpu, x_tpu = a.clone().requires_grad_(), tpu(a).requires_grad_()
    for x in (x_cpu, x_tpu):
        (activation(x) * 3).sum().backward()
    assert_close(x_tpu.grad.cpu(), x_cpu.grad)


def test_inplace_and_out_variants():
    a, b = randn(3, 4), randn(3, 4)
    x = tpu(a)
    x.add_(tpu(b), alpha=2).mul_(3).clamp_(-1, 1)
    assert_close(x.cpu(), (a + 2 * b).mul(3).clamp(-1, 1))
    out = torch.empty(0, device="tpu")
    torch.add(tpu(a), tpu(b), out=out)
    assert out.shape == (3, 4)
    assert_close(out.cpu(), a + b)
    values = torch.empty(0, device="tpu")
    indices = torch.empty(0, dtype=torch.long, device="tpu")
    torch.max(tpu(a), dim=1, out=(values, indices))
    expected = a.max(dim=1)
    assert_close(values.cpu(), expected.values)
    assert_close(indices.cpu(), expected.indices)


def test_factories():
    for make in (torch.zeros, torch.ones):
        check(lambda _: make(2, 3, device=_.device), torch.empty(0))
    assert_close(torch.full((2, 2), 7.5, device="tpu").cpu(), torch.full((2, 2), 7.5))
    assert_close(torch.arange(10, device="tpu").cpu(), torch.arange(10))
    assert_close(torch.arange(1.0, 2.0, 0.25, device="tpu").cpu(), torch.arange(1.0, 2.0, 0.25))
    for steps in (1, 2, 7, 10):
        assert_close(torch.linspace(-1, 2, steps, device="tpu").cpu(), torch.linspace(-1, 2, steps))
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for base in (10.0, 2.0):
                assert_close(torch.logspace(-1.5, 2.7, steps, base, dtype=dtype, device="tpu").cpu(),
                             torch.logspace(-1.5, 2.7, steps, base, dtype=dtype))
    assert torch.empty(3, 4, device="tpu").shape == (3, 4)
    assert torch.zeros(2, dtype=torch.int32, device="tpu").dtype == torch.int32


def test_random_is_seeded_and_distributed():
    torch.manual_seed(123)
    a = torch.rand(1000, device="tpu")
    b = torch.randn(1000, device="tpu")
    torch.manual_seed(123)
    assert torch.equal(a.cpu(), torch.rand(1000, device="tpu").cpu())
    assert torch.equal(b.cpu(), torch.randn(1000, device="tpu").cpu())
    assert 0 <= a.min().item() and a.max().item() < 1
    assert abs(a.mean().item() - 0.5) < 0.05
    assert abs(b.mean().item()) < 0.1 and abs((b * b).mean().sqrt().item() - 1) < 0.1
    assert not torch.equal(torch.rand(8, device="tpu").cpu(), torch.rand(8, device="tpu").cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8,
                                   torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_copy_round_trip_and_dtype_conversion(dtype):
    x = (torch.randn(3, 5) * 5).to(dtype)
    assert torch.equal(tpu(x).cpu(), x)
    assert_close(tpu(x).to(torch.float32).cpu(), x.to(torch.float32))
    assert_close(tpu(x.float()).to(dtype).cpu(), x.float().to(dtype))


def test_printing_and_item():
    x = torch.tensor([1.5, 2.0, -3.0], device="tpu")
    assert repr(x) == "tensor([ 1.5000,  2.0000, -3.0000], device='tpu:0')"
    assert x[1].item() == 2.0
    assert "grad_fn" in repr(x.requires_grad_() * 2)


def test_program_cache(metrics):
    a, b = tpu(randn(8, 8)), tpu(randn(8, 8))
    for _ in range(5):
        a + b
    counts = metrics()["ops"]["aten::add.Tensor"]
    assert counts["compiles"] <= 1 and counts["executions"] == 5
    assert counts["cache_hits"] >= 4


def _math_cases():
    torch.manual_seed(0)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    p = torch.rand(4, 5) * 0.9 + 0.05  # in (0, 1)
    ints, positive_ints = torch.randint(-9, 9, (4, 5)), torch.randint(1, 5, (4, 5))
    nan_inf = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    return {
        "floor": (torch.floor, x), "ceil": (torch.ceil, x), "round": (torch.round, x * 3),
        "trunc": (torch.trunc, x * 3), "frac": (torch.frac, x * 3), "round_decimals": (lambda t: t.round(decimals=2), x),
        "sign": (torch.sign, x), "acos": (torch.acos, p), "asin": (torch.asin, p), "atan": (torch.atan, x),
        "acosh": (torch.acosh, x.abs() + 1), "asinh": (torch.asinh, x), "atanh": (torch.atanh, p),
        "cosh": (torch.cosh, x), "sinh": (torch.sinh, x), "tan": (torch.tan, x), "erf": (torch.erf, x),
        "erfinv": (torch.erfinv, p), "lgamma": (torch.lgamma, x.abs() + 0.5), "digamma": (torch.digamma, x.abs() + 0.5),
        "expm1": (torch.expm1, x), "log1p": (torch.log1p, p), "log2": (torch.log2, p), "log10": (torch.log10, p),
        "exp2": (torch.exp2, x), "pow_scalar_base": (lambda t: 2 ** t, x), "isnan": (torch.isnan, nan_inf),
        "isinf": (torch.isinf, nan_inf), "isposinf": (torch.isposinf, nan_inf), "isneginf": (torch.isneginf, nan_inf),
        "nan_to_num": (torch.nan_to_num, nan_inf),
        "bitwise_and": (torch.bitwise_and, ints, positive_ints), "bitwise_or": (torch.bitwise_or, ints, positive_ints),
        "bitwise_xor": (torch.bitwise_xor, ints, positive_ints), "bitwise_not": (torch.bitwise_not, ints),
        "bitwise_and_scalar": (lambda t: t & 3, ints), "logical_and": (torch.logical_and, x, ints),
        "logical_or": (torch.logical_or, x > 0, ints), "logical_xor": (torch.logical_xor, x, y),
        "fmod": (torch.fmod, x * 5, y), "fmod_scalar": (lambda t: torch.fmod(t, 1.5), x * 5),
        "fmod_int": (torch.fmod, ints, positive_ints), "remainder": (torch.remainder, x * 5, y),
        "remainder_scalar": (lambda t: t % 1.5, x * 5), "remainder_int": (torch.remainder, ints, positive_ints),
        "atan2": (torch.atan2, x, y), "hypot": (torch.hypot, x, y), "copysign": (torch.copysign, x, y),
        "xlogy": (torch.xlogy, torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 3.0, float("nan")])),
        "logaddexp": (torch.logaddexp, x, y), "clamp_tensor": (lambda t, lo: t.clamp(min=lo, max=lo + 1), x, y),
        "lerp_scalar": (lambda a, b: torch.lerp(a, b, 0.3), x, y), "lerp_tensor": (torch.lerp, x, y, p),
        "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5), x, y, p),
        "addcdiv": (lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), x, y, p),
        "floor_divide_int": (lambda a, b: torch.div(a, b, rounding_mode="floor"), ints, -positive_ints),
        "abs_uint8": (torch.abs, positive_ints.to(torch.uint8)), "sign_uint8": (torch.sign, positive_ints.to(torch.uint8)),
    }


MATH_CASES = _math_cases()


@pytest.mark.parametrize("name", sorted(MATH_CASES))
def test_math_ops_match_cpu_without_fallback(name):
    fn, *args = MATH_CASES[name]
    torchtpu.reset_metrics()
    check(fn, *args, equal_nan=True, rtol=1e-5, atol=1e-5)
    assert fallback_ops() == {}


def test_masked_scatter_and_nonzero_static():
    torchtpu.reset_metrics()
    mask = torch.tensor([[True, False, True], [False, False, True]])
    check(lambda s, m, src: s.masked_scatter(m, src), randn(2, 3), mask, randn(7))
    check(lambda s, m, src: s.masked_scatter(m, src), randn(4, 2, 3), mask, randn(30))  # the mask broadcasts
    check(lambda s, m, src: s.masked_scatter(m, src), torch.arange(6).view(2, 3), mask, torch.arange(10, 13))
    source = randn(5).requires_grad_()
    torch.zeros(2, 3).masked_scatter(mask, source).sum().backward()
    tpu_source = source.detach().to("tpu").requires_grad_()
    (torch.zeros(2, 3, device="tpu").masked_scatter(tpu(mask), tpu_source) * 2).sum().backward()
    assert_close(tpu_source.grad.cpu(), torch.tensor([2.0, 2.0, 2.0, 0.0, 0.0]))
    x = torch.tensor([[0, 3, 0], [5, 0, 7]])
    for size in (1, 3, 5):
        check(lambda t: torch.nonzero_static(t, size=size, fill_value=-9), x)
    assert fallback_ops() == {}


def test_unfold_and_sgn_backward_stay_on_device():
    torchtpu.reset_metrics()
    x = randn(2, 11, 3).requires_grad_()
    for size, step in ((3, 2), (4, 4), (1, 3), (5, 1)):
        x.grad = None
        (x.unfold(1, size, step) ** 2).sum().backward()
        xt = tpu(x.detach()).requires_grad_()
        (xt.unfold(1, size, step) ** 2).sum().backward()
        assert_close(xt.grad.cpu(), x.grad)
    # A gradient that broadcasts to the windows' shape, as torch.istft's decomposition passes one.
    envelope = torch.randn(64).square().expand(1, 26, 64)
    assert_close(torch.ops.aten.unfold_backward(tpu(envelope), [2, 464], 1, 64, 16).cpu(),
                 torch.ops.aten.unfold_backward(envelope, [2, 464], 1, 64, 16))
    xt = torch.randn(4, device="tpu", requires_grad=True)
    torch.sgn(xt).sum().backward()  # autograd's zero gradient is built on the device
    assert torch.equal(xt.grad.cpu(), torch.zeros(4))
    assert fallback_ops() == {}


def test_equal_reads_back_one_bool():
    torchtpu.reset_metrics()
    a = torch.tensor([1.0, 2.0, float("nan")])
    for x, y in ((a[:2], a[:2].clone()), (a, a), (a[:2], a[1:]), (a[:2], a[:2].view(2, 1)),
                 (torch.ones(3), torch.ones(3, dtype=torch.int64))):
        assert torch.equal(tpu(x), tpu(y)) == torch.equal(x, y)
    assert fallback_ops() == {}
    with pytest.raises(RuntimeError, match="same device"):
        torch.equal(tpu(a), a)


def test_sign_of_nan_is_zero_as_on_cpu():
    x = torch.tensor([float("nan"), -0.0, 2.0, -float("inf")])
    for fn in (torch.sign, torch.sgn):
        assert_close(fn(x.to("tpu")).cpu(), fn(x))


def test_out_wider_than_the_inputs_takes_their_rounding_as_on_cpu():
    # bfloat16 operands into a float32 out=: CPU computes in bfloat16 and widens the rounded result; the out=
    # tensor does not take part in the promotion.
    x = (torch.randn(4, 4) * 3).bfloat16()
    for fn in (lambda a, out: torch.mul(a, 3, out=out), lambda a, out: torch.add(a, a * 0.1, out=out),
               lambda a, out: torch.exp(a, out=out)):
        expected, actual = torch.empty(4, 4), torch.empty(4, 4, device="tpu")
        fn(x, expected)
        fn(x.to("tpu"), actual)
        assert_close(actual.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("target", [torch.uint8, torch.int8, torch.int16])
@pytest.mark.parametrize("source", [torch.float32, torch.float64, torch.bfloat16])
def test_float_to_small_int_casts_wrap_as_on_cpu(source, target):
    # Out of range, CPU and CUDA cast through a wide integer (-1.0 to uint8 is 255); XLA's own cast saturates.
    values = torch.tensor([-1.0, -3.5, 300.0, 255.9, -128.5, 70000.0, -70000.0, 0.5, -0.5, 1e4]).to(source)
    assert torch.equal(values.to("tpu").to(target).cpu(), values.to(target))


@pytest.mark.parametrize("target", [torch.uint32, torch.uint64])
@pytest.mark.parametrize("source", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float32])
def test_casts_to_and_from_wide_unsigned_types(source, target):
    # torch defines no promotion of uint32/uint64 with other integer types; a cast does not need one.
    x = torch.tensor([1, 0, 3, 7]).to(source)
    assert torch.equal(x.to("tpu").to(target).cpu(), x.to(target))
    assert torch.equal(x.to(target).to("tpu").to(torch.int64).cpu(), x.to(target).to(torch.int64))


def test_negative_scalar_power_of_integers_raises_cpus_error():
    x = torch.tensor([2, 0, 3])
    for op in (lambda t: t ** -1, lambda t: t.clone().pow_(-2)):
        with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
            op(x.to("tpu"))
    assert torch.equal((x.to("tpu") ** -1.0).cpu(), x ** -1.0)
    assert torch.equal((x.to("tpu") ** 3).cpu(), x ** 3)
    # Negative exponents in a tensor: CPU computes them (0, or +-1 for a base of +-1).
    bases, exponents = torch.tensor([2, 3, 1, -1, -1, 5, -2]), torch.tensor([1, -1, -3, -3, -2, 0, -1])
    assert torch.equal((bases.to("tpu") ** exponents.to("tpu")).cpu(), bases ** exponents)
    assert torch.equal((2 ** exponents.to("tpu")).cpu(), 2 ** exponents)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_wide_unsigned_tensors(dtype):
    # PyTorch's CPU kernels take these "barebones" unsigned types in copies, views, comparisons and casts;
    # tpu does the same (and computes min/max/arithmetic, which CPU refuses, with the type's wraparound).
    top = torch.iinfo(dtype).max if dtype != torch.uint64 else 2**63 + 5
    x = torch.tensor([5, 1, top, 0], dtype=dtype)
    t = x.to("tpu")
    assert torch.equal(t.cpu(), x)
    assert torch.equal(t[1:3].contiguous().cpu(), x[1:3])
    assert torch.equal((t == 1).cpu(), x == 1)
    assert torch.equal(t.to(torch.int64).cpu(), x.to(torch.int64))
    assert torch.equal(torch.zeros(3, dtype=dtype, device="tpu").cpu(), torch.zeros(3, dtype=dtype))
    assert t.max().cpu().item() == top and t.min().cpu().item() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_erf_reaches_one_so_gelu_vanishes(dtype):
    # XLA's erf expansion stops a few ulps short of +-1; CPU's rounds to +-1 past |x| = 3.92, so GELU of a
    # very negative input is 0 there, not -1e-6 * |x|.
    x = torch.tensor([-1e4, -1000.0, -10.0, -4.0, 4.0, 10.0]).to(dtype)
    assert torch.equal(torch.erf(x.to("tpu")).cpu(), torch.erf(x))
    gelu = torch.nn.functional.gelu(x.to("tpu")).cpu()
    assert torch.equal(gelu[:3], torch.zeros(3, dtype=dtype))  # -0.0 equals 0.0
    assert_close(gelu, torch.nn.functional.gelu(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_hypot_neither_overflows_nor_underflows(dtype):
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([3e20, 3e-25, 3.0, 0.0, inf, nan, inf, -4.0, 1e38, -0.0]).to(dtype)
    b = torch.tensor([4e20, 4e-25, 4.0, 0.0, nan, 2.0, 1.0, 3.0, 1e38, 0.0]).to(dtype)
    assert_close(torch.hypot(a.to("tpu"), b.to("tpu")).cpu(), torch.hypot(a, b), equal_nan=True, rtol=1e-6, atol=0)


SHIFT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", SHIFT_DTYPES, ids=str)
def test_shifts_match_cpu_including_out_of_range_amounts(dtype):
    # CPU's results for amounts below 0 or at least the width (left: 0; right: the sign fill), every
    # spelling: operators, functions, in-place, a number on either side.
    torchtpu.reset_metrics()
    low, high = torch.iinfo(dtype).min, torch.iinfo(dtype).max
    a = torch.randint(low, high, (64,), dtype=dtype)
    amount = torch.randint(0 if dtype == torch.uint8 else -3, 255 if dtype == torch.uint8 else 70, (64,)).to(dtype)
    for fn in (lambda x, y: x << y, lambda x, y: x >> y, lambda x, y: x << 3, lambda x, y: x >> 100,
               lambda x, y: torch.bitwise_left_shift(7, y), lambda x, y: torch.bitwise_right_shift(x, y),
               lambda x, y: x.clone().__ilshift__(y), lambda x, y: x.clone().bitwise_right_shift_(2)):
        expected, actual = fn(a, amount), fn(tpu(a), tpu(amount)).cpu()
        assert actual.dtype == expected.dtype and torch.equal(actual, expected)
    assert fallback_ops() == {}


def test_shifts_of_floats_and_bools_raise_as_on_cpu():
    for fn in (lambda d: torch.ones(2, device=d) << 1, lambda d: torch.tensor([True], device=d) >> torch.tensor([True], device=d)):
        with pytest.raises(RuntimeError) as cpu_error:
            fn("cpu")
        with pytest.raises(RuntimeError) as tpu_error:
            fn("tpu")
        assert type(tpu_error.value) is type(cpu_error.value)
        assert str(tpu_error.value).split(" not implemented")[1] == str(cpu_error.value).split(" not implemented")[1]
