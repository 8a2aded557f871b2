"""Bad input raises a clear Python exception, and the device stays usable afterwards."""
from __future__ import annotations

import re
import subprocess
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from helpers import assert_usable, run_python

SAME_DEVICE_MESSAGE = "Expected all tensors to be on the same device, but found at least two devices, tpu:0 and cpu!"


# ---- helpers ------------------------------------------------------------------------------------------

def capture(fn):
    """The exception ``fn()`` raises (fails the test if it raises none)."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return exc
    pytest.fail(f"{fn} raised no exception")


def assert_same_error_as_cpu(make_and_run, normalize=lambda message: message):
    """``make_and_run(device)`` must raise on tpu the same exception type and message as on cpu."""
    cpu_error = capture(lambda: make_and_run("cpu"))
    tpu_error = capture(lambda: make_and_run("tpu"))
    assert type(tpu_error) is type(cpu_error), f"tpu raised {type(tpu_error).__name__}: {tpu_error}"
    assert normalize(str(tpu_error)) == normalize(str(cpu_error))
    return tpu_error



def assert_subprocess_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.stdout.strip().endswith("OK"), result.stdout


# Code shared by the subprocess tests: the same usability check as ``assert_usable``.
SUBPROCESS_USABLE = """
import torch


def assert_usable():
    cpu = torch.arange(6.0).view(2, 3)
    tpu = cpu.to("tpu")
    torch.testing.assert_close((tpu * 2 + 1).cpu(), cpu * 2 + 1)
    torch.testing.assert_close((tpu @ tpu.t()).cpu(), cpu @ cpu.t())
"""


# ---- shapes -------------------------------------------------------------------------------------------

def test_add_shape_mismatch_same_message_as_cpu(survivor):
    error = assert_same_error_as_cpu(lambda d: torch.ones(3, device=d) + torch.ones(4, device=d))
    assert isinstance(error, RuntimeError)
    assert_usable(survivor)


def test_add_shape_mismatch_2d_same_message_as_cpu(survivor):
    assert_same_error_as_cpu(lambda d: torch.ones(2, 3, device=d).add(torch.ones(3, 2, device=d)))
    assert_usable(survivor)


def test_mm_wrong_inner_dims(survivor):
    a, b = torch.ones(2, 3, device="tpu"), torch.ones(4, 2, device="tpu")
    with pytest.raises(RuntimeError) as info:
        torch.mm(a, b)
    message = str(info.value)
    # Whatever the wording, the message must show both shapes.
    assert re.search(r"2\D{1,3}3", message) and re.search(r"4\D{1,3}2", message), message
    with pytest.raises(RuntimeError):
        a @ b
    assert_usable(survivor)


# ---- devices ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [
    lambda t, c: t + c,
    lambda t, c: c + t,
    lambda t, c: torch.mul(t, c),
    lambda t, c: t.add_(c),
    lambda t, c: torch.mm(t.view(1, 3), c.view(3, 1)),
    lambda t, c: torch.cat([c, t]),
    lambda t, c: torch.stack([t, c]),
    lambda t, c: torch._foreach_add([t], [c]),
], ids=["tpu+cpu", "cpu+tpu", "mul", "add_", "mm", "cat", "stack", "foreach"])
def test_tpu_with_cpu_tensor(survivor, op):
    tpu, cpu = torch.ones(3, device="tpu"), torch.ones(3)
    with pytest.raises(RuntimeError) as info:
        op(tpu, cpu)
    assert SAME_DEVICE_MESSAGE in str(info.value)
    torch.testing.assert_close(tpu.cpu(), torch.ones(3))  # a failed in-place op leaves its input alone
    assert_usable(survivor)


def test_tpu_with_cpu_scalar_tensor_is_allowed(survivor):
    result = torch.arange(3.0, device="tpu") + torch.tensor(2.0)
    assert result.device.type == "tpu"
    torch.testing.assert_close(result.cpu(), torch.arange(3.0) + 2)
    # As on CUDA, CPU index tensors and a foreach op's 0-dim CPU scalars are accepted too.
    x = torch.arange(3.0, device="tpu")
    torch.testing.assert_close(x[torch.tensor([2, 0])].cpu(), torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(torch._foreach_mul([x], [torch.tensor(2.0)])[0].cpu(), torch.arange(3.0) * 2)
    assert_usable(survivor)


@pytest.mark.parametrize("index", [10, -4, 3])
def test_index_out_of_range(survivor, index):
    error = assert_same_error_as_cpu(lambda d: torch.arange(3.0, device=d)[index])
    assert isinstance(error, IndexError)
    assert_usable(survivor)


def test_index_out_of_range_2d(survivor):
    error = assert_same_error_as_cpu(lambda d: torch.ones(2, 3, device=d)[:, 5])
    assert isinstance(error, IndexError)
    assert_usable(survivor)


@pytest.mark.parametrize("make", [
    lambda: torch.ones(2, device="tpu:7"),
    lambda: torch.empty(2, device="tpu:7"),
    lambda: torch.ones(2).to("tpu:7"),
    lambda: torch.ones(2, device="tpu").to("tpu:7"),
], ids=["ones", "empty", "cpu_to", "tpu_to"])
def test_device_index_out_of_range(survivor, make):
    with pytest.raises(RuntimeError) as info:
        make()
    assert re.search(r"\b7\b", str(info.value)), str(info.value)
    assert_usable(survivor)


def test_set_device_out_of_range(survivor):
    with pytest.raises(RuntimeError) as info:
        torch.tpu.set_device(7)
    assert re.search(r"\b7\b", str(info.value)), str(info.value)
    assert torch.tpu.current_device() == 0
    assert_usable(survivor)


# ---- dtypes -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: torch.ones(2, dtype=torch.complex32, device="tpu"),
    lambda: torch.ones(2, dtype=torch.complex32).to("tpu"),
    lambda: torch.ones(2, device="tpu").to(torch.complex32),
    lambda: torch.ones(2, dtype=torch.float16, device="tpu") + 1j,
], ids=["factory", "cpu_to", "cast", "half_plus_complex"])
def test_unsupported_dtype(survivor, make):
    with pytest.raises((TypeError, RuntimeError)) as info:
        make()
    message = str(info.value)
    assert re.search(r"complex", message, re.IGNORECASE), message
    assert "tpu" in message, message
    assert_usable(survivor)


@pytest.mark.parametrize("product", [
    lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(3, 2, dtype=torch.long, device=d)),
    lambda d: torch.addmm(torch.ones(2, 2, device=d), torch.ones(2, 3, device=d),
                          torch.ones(3, 2, dtype=torch.long, device=d)),
    lambda d: torch.bmm(torch.ones(1, 2, 3, device=d), torch.ones(1, 3, 2, dtype=torch.long, device=d)),
    lambda d: torch.dot(torch.ones(3, device=d), torch.ones(3, dtype=torch.long, device=d)),
    lambda d: torch.mv(torch.ones(2, 3, device=d), torch.ones(3, dtype=torch.long, device=d)),
    lambda d: torch.nn.Linear(4, 2).to(d)(torch.ones(2, 4, dtype=torch.long, device=d)),
], ids=["mm", "addmm", "bmm", "dot", "mv", "linear"])
def test_product_of_mixed_dtypes_same_error_as_cpu(survivor, product):
    """Products do not promote: CPU refuses mixed operand dtypes, and so does tpu, in CPU's words."""
    assert_same_error_as_cpu(product)
    assert_usable(survivor)


@pytest.mark.parametrize("other", [
    lambda d: torch.full((3,), 1.5, device=d),
    lambda d: 1.5,
], ids=["float_tensor", "float_scalar"])
def test_inplace_dtype_error_same_as_cpu(survivor, other):
    ints = {}

    def run(device):
        ints[device] = torch.ones(3, dtype=torch.int64, device=device)
        ints[device].add_(other(device))

    error = assert_same_error_as_cpu(run)
    assert isinstance(error, RuntimeError)
    torch.testing.assert_close(ints["tpu"].cpu(), torch.ones(3, dtype=torch.int64))
    assert_usable(survivor)


@pytest.mark.parametrize("write", [
    lambda x, f, i: x.mul_(f), lambda x, f, i: x.mul_(1.5), lambda x, f, i: x.bool().mul_(x),
    lambda x, f, i: x.addcmul_(f, f), lambda x, f, i: x.addcdiv_(f, f),
    lambda x, f, i: x.index_add_(0, i, f[:1]), lambda x, f, i: torch.index_add(x, 0, i, f[:1]),
    lambda x, f, i: x.index_copy_(0, i, f[:1]), lambda x, f, i: x.index_reduce_(0, i, f[:1], "prod"),
    lambda x, f, i: x.put_(i, f[:1]), lambda x, f, i: x.index_put_((i,), f[:1]),
    lambda x, f, i: x.__setitem__(i, f[:1]),
], ids=["mul_", "mul_scalar", "mul_bool", "addcmul_", "addcdiv_", "index_add_", "index_add", "index_copy_",
        "index_reduce_", "put_", "index_put_", "setitem"])
def test_writes_of_another_dtype_raise_as_on_cpu(survivor, write):
    """Ops whose meta kernels skip CPU's dtype checks: an int tensor must not silently take float results."""
    ints = {}

    def run(device):
        ints[device] = torch.ones(3, dtype=torch.int64, device=device)
        write(ints[device], torch.full((3,), 2.5, device=device), torch.tensor([0], device=device))

    assert isinstance(assert_same_error_as_cpu(run), RuntimeError)
    torch.testing.assert_close(ints["tpu"].cpu(), torch.ones(3, dtype=torch.int64))
    assert_usable(survivor)


@pytest.mark.parametrize("call", [
    lambda d: torch.multinomial(torch.tensor([1, 2], device=d), 1),
    lambda d: torch.randperm(300, dtype=torch.uint8, device=d),
    lambda d: torch.randperm(5000, dtype=torch.float16, device=d),
    lambda d: F.nll_loss(torch.randn(3, 4, device=d), torch.tensor([1, 2, 3], device=d).int()),
    lambda d: F.binary_cross_entropy(torch.rand(2, device=d), torch.tensor([0, 1], device=d)),
    lambda d: F.smooth_l1_loss(torch.ones(2, device=d), torch.zeros(2, device=d), beta=-1.0),
    lambda d: F.conv_transpose2d(torch.randn(1, 2, 2, 3, device=d), torch.randn(2, 1, 3, 3, device=d), stride=2,
                                 output_padding=2),
    lambda d: torch.ones(3, dtype=torch.int64, device=d).lerp_(torch.zeros(3, dtype=torch.int64, device=d), 0.5),
    lambda d: torch.lerp(torch.ones(3, dtype=torch.bool, device=d), torch.zeros(3, dtype=torch.bool, device=d),
                         torch.ones(3, dtype=torch.bool, device=d)),
    lambda d: torch.round(torch.tensor([12345], device=d), decimals=-2),
], ids=["multinomial_long", "randperm_uint8_300", "randperm_half_5000", "nll_loss_int32_target",
        "bce_long_target", "smooth_l1_negative_beta", "conv_transpose_output_padding", "lerp_into_long",
        "lerp_of_bools", "round_decimals_of_long"])
def test_arguments_cpu_kernels_check_are_checked(survivor, call):
    """Checks CPU's kernels make that the meta kernels leave out: CPU's exception and words."""
    assert_same_error_as_cpu(call)
    assert_usable(survivor)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("write", [
    lambda x, c: x.add_(c), lambda x, c: x.sub_(c), lambda x, c: x.add_(1j),
], ids=["add_", "sub_", "add_complex_scalar"])
def test_complex_results_into_a_real_tensor_raise_as_on_cpu(survivor, dtype, write):
    """A complex result must not lose its imaginary part in a real tensor written in place."""
    reals = {}

    def run(device):
        reals[device] = torch.ones(3, dtype=dtype, device=device)
        write(reals[device], torch.ones(3, dtype=torch.complex64, device=device))

    assert isinstance(assert_same_error_as_cpu(run), RuntimeError)
    torch.testing.assert_close(reals["tpu"].cpu(), torch.ones(3, dtype=dtype))
    assert_usable(survivor)


def test_a_mask_write_converts_values_of_another_dtype_as_on_cpu():
    for value in (torch.tensor(3.5), torch.tensor([3.5]), 4.5):
        results = []
        for device in ("cpu", "tpu"):
            x = torch.zeros(4, dtype=torch.int64, device=device)
            x[x == 0] = value.to(device) if isinstance(value, torch.Tensor) else value
            results.append(x.cpu())
        torch.testing.assert_close(results[1], results[0])


# ---- autograd -----------------------------------------------------------------------------------------

def _type_name_free(message: str) -> str:
    """Removes the tensor type name, which names the device: [torch.FloatTensor [3]] vs [tpuFloatType [3]]."""
    return re.sub(r"\[\S+ \[", "[<type> [", message)


def test_autograd_inplace_misuse_same_as_cpu(survivor):
    def run(device):
        x = torch.ones(3, device=device, requires_grad=True)
        y = x.sigmoid()
        y.mul_(2)
        y.sum().backward()

    error = assert_same_error_as_cpu(run, normalize=_type_name_free)
    assert isinstance(error, RuntimeError)
    assert "modified by an inplace operation" in str(error)
    assert_usable(survivor)
    # Autograd itself still works on tpu afterwards.
    x = torch.ones(3, device="tpu", requires_grad=True)
    x.sigmoid().sum().backward()
    s = torch.sigmoid(torch.tensor(1.0))
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), float(s * (1 - s))))


# ---- plugin -------------------------------------------------------------------------------------------

def test_missing_plugin():
    result = run_python("""
        import torch, torchtpu
        assert torch.tpu.is_available() is False
        assert torch.tpu.device_count() == 0
        for attempt in range(2):  # a second try fails the same way instead of crashing
            try:
                torch.ones(2, device="tpu")
            except RuntimeError as e:
                message = str(e)
            else:
                raise AssertionError("creating a tpu tensor without a plugin succeeded")
            lowered = message.lower()
            assert "plugin" in lowered and "install" in lowered, message
            assert "/nonexistent/plugin.so" in message, message
        try:
            torch.arange(3.0).to("tpu")
        except RuntimeError:
            pass
        else:
            raise AssertionError("copying to tpu without a plugin succeeded")
        torch.testing.assert_close(torch.arange(3.0) * 2, torch.tensor([0.0, 2.0, 4.0]))  # CPU torch is fine
        print("OK")
        """, TORCHTPU_PJRT_PLUGIN="/nonexistent/plugin.so")
    assert_subprocess_ok(result)


# ---- CPU fallback -------------------------------------------------------------------------------------

def test_fallback_error_mode():
    result = run_python(SUBPROCESS_USABLE + """
import torch, torchtpu
x = torch.tensor([[2.0, 1.0], [0.5, 3.0]], device="tpu")
try:
    torch.linalg.lstsq(x, x, driver="gelsd")
except NotImplementedError as e:
    message = str(e)
else:
    raise AssertionError("lstsq (gelsd) ran although TORCHTPU_FALLBACK=error")
assert "linalg_lstsq" in message, message
assert "TORCHTPU_FALLBACK" in message, message
torch.testing.assert_close(x.cpu(), torch.tensor([[2.0, 1.0], [0.5, 3.0]]))
assert_usable()
print("OK")
""", TORCHTPU_FALLBACK="error")
    assert_subprocess_ok(result)


def test_default_fallback_warns_once_and_counts():
    # A fresh process: the warn-once set is per process and other tests may have used the op already.
    result = run_python(SUBPROCESS_USABLE + """
import re
import warnings
import torch, torchtpu
torchtpu.reset_metrics()
# lstsq with the gelsd driver has no lowering (its residuals' shape depends on the data's rank).
matrix = torch.tensor([[2.0, 1.0], [0.5, 3.0], [1.0, 1.0]])
x = matrix.to("tpu")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = torch.linalg.lstsq(x, x, driver="gelsd").solution
    second = torch.linalg.lstsq(x * 2, x, driver="gelsd").solution
messages = [str(w.message) for w in caught if "linalg_lstsq" in str(w.message)]
assert len(messages) == 1, messages
op = re.search(r"operator '([^']+)'", messages[0]).group(1)
assert op.startswith("aten::linalg_lstsq"), op
assert first.device.type == "tpu" and second.device.type == "tpu"
torch.testing.assert_close(first.cpu(), torch.linalg.lstsq(matrix, matrix, driver="gelsd").solution)
torch.testing.assert_close(second.cpu(), torch.linalg.lstsq(matrix * 2, matrix, driver="gelsd").solution)
counters = torchtpu.metrics()["ops"][op]
assert counters["fallbacks"] == 2, counters
from torchtpu.metrics import fallback_ops
assert fallback_ops()[op] == 2, fallback_ops()
assert_usable()
print("OK")
""")
    assert_subprocess_ok(result)


def fallback_counts(prefix: str) -> int:
    return sum(c["fallbacks"] for op, c in torchtpu.metrics()["ops"].items() if op.startswith(prefix))


def test_default_fallback_in_process(survivor):
    torchtpu.reset_metrics()
    cpu = torch.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0], [0.5, 0.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # lstsq's gelsd driver has no lowering (docs/ops.md lists the ops that fall back).
        result = torch.linalg.lstsq(cpu.to("tpu"), cpu.to("tpu"), driver="gelsd").solution
        result_abs = torch.linalg.lstsq(cpu.to("tpu").abs(), cpu.to("tpu"), driver="gelsd").solution
    assert result.device.type == "tpu"
    torch.testing.assert_close(result.cpu(), torch.linalg.lstsq(cpu, cpu, driver="gelsd").solution)
    torch.testing.assert_close(result_abs.cpu(), torch.linalg.lstsq(cpu.abs(), cpu, driver="gelsd").solution)
    assert fallback_counts("aten::linalg_lstsq") == 2, torchtpu.metrics()["ops"]
    # Lowered ops do not count as fallbacks.
    torch.ones(3, device="tpu").add(1).cpu()
    assert fallback_counts("aten::add") == 0
    assert_usable(survivor)


def test_deprecated_cholesky_raises_on_a_non_positive_definite_input():
    # torch.cholesky has no info output: the device checks it and the next sync raises CPU's message.
    with pytest.raises(RuntimeError, match="positive-definite"):
        torch.cholesky(-torch.eye(3, device="tpu")).cpu()


@pytest.mark.parametrize("make", [
    lambda d: torch.nn.functional.interpolate(torch.ones(1, 1, 3, 3, device=d), scale_factor=0.3, mode="bilinear"),
    lambda d: torch.nn.functional.interpolate(torch.ones(1, 1, 3, 3, device=d), scale_factor=(1.0, 0.3),
                                              mode="bicubic"),
    lambda d: torch.nn.functional.conv_transpose2d(torch.ones(1, 2, 1, 3, device=d), torch.ones(2, 2, 2, 2, device=d),
                                                   stride=2, padding=(1, 0)),
    lambda d: torch.nn.functional.conv_transpose3d(torch.ones(1, 2, 1, 3, 2, device=d),
                                                   torch.ones(2, 2, 2, 2, 2, device=d), stride=2, padding=(1, 0, 0)),
], ids=["bilinear", "bicubic", "conv_transpose2d", "conv_transpose3d"])
def test_an_empty_output_dim_raises_as_on_cpu(survivor, make):
    """The meta kernels accept an empty spatial output here; CPU's kernels refuse it, and so does tpu."""
    assert isinstance(assert_same_error_as_cpu(make), RuntimeError)
    assert_usable(survivor)


@pytest.mark.parametrize("make", [
    lambda d: torch.zeros(3, device=d).uniform_(2, 1),
    lambda d: torch.multinomial(torch.ones(3, device=d), 5),
    lambda d: torch.multinomial(torch.ones(3, device=d), 0),
    lambda d: torch.randint(0, 300, (3,), dtype=torch.uint8, device=d),
    lambda d: torch.randint(-200, 5, (3,), dtype=torch.int8, device=d),
    lambda d: torch.randint(0, 3, (3,), dtype=torch.bool, device=d),
    lambda d: torch.zeros(3, dtype=torch.int16, device=d).random_(40000),
    lambda d: torch.zeros(3, dtype=torch.float16, device=d).random_(0, 70000),
], ids=["uniform_from_above_to", "multinomial_more_than_categories", "multinomial_no_samples", "randint_uint8_to",
        "randint_int8_from", "randint_bool_to", "random_to_int16", "random_float16_to"])
def test_random_arguments_cpu_refuses_raise_as_on_cpu(survivor, make):
    assert isinstance(assert_same_error_as_cpu(make), RuntimeError)
    assert_usable(survivor)


@pytest.mark.parametrize("make", [
    lambda d: torch.fmod(torch.tensor([True, False], device=d), True),
    lambda d: torch.remainder(torch.tensor([True, False], device=d), True),
    lambda d: torch.clamp(torch.tensor([True, False], device=d), max=True),
    lambda d: True ** torch.tensor([True, False], device=d),
], ids=["fmod", "remainder", "clamp", "number_to_bool_power"])
def test_narrow_dtypes_cpu_refuses_raise_as_on_cpu(survivor, make):
    """The meta kernels take bool tensors in more ops than CPU's kernels do."""
    assert isinstance(assert_same_error_as_cpu(make), RuntimeError)
    assert_usable(survivor)


def test_checking_a_bool_op_on_cpu_leaves_cpus_random_stream_alone():
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    torch.randint(0, 2, (7, 3, 5), dtype=torch.bool, device="tpu")  # a new program: its check runs CPU's randint
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize("exponent", [True, False])
def test_a_bool_tensor_to_a_bool_power_stays_bool(exponent):
    x = torch.tensor([True, False])
    result = x.to("tpu") ** exponent
    assert result.dtype == torch.bool
    assert torch.equal(result.cpu(), x ** exponent)


def _u8(d):
    return torch.tensor([0, 50, 255], dtype=torch.uint8, device=d)


def _f16(d, n=2):
    return torch.ones(n, dtype=torch.float16, device=d)


# Scalars CPU's kernels convert to the op's dtype with an overflow check (csrc/aten/op_info.cc).
SCALAR_OVERFLOWS = {
    "clamp_max_u8": lambda d: _u8(d).clamp(max=300),
    "clamp_int32": lambda d: torch.tensor([5], dtype=torch.int32, device=d).clamp(max=2**40),
    "clamp_f16": lambda d: _f16(d).clamp(max=1e6),
    "fill_u8": lambda d: _u8(d).fill_(300),
    "fill_u8_negative": lambda d: _u8(d).fill_(-256),
    "fill_f32": lambda d: torch.zeros(2, device=d).fill_(1e39),
    "full_u8": lambda d: torch.full((2,), 300, dtype=torch.uint8, device=d),
    "full_like_u8": lambda d: torch.full_like(_u8(d), 300),
    "setitem_int32": lambda d: torch.zeros(3, dtype=torch.int32, device=d).__setitem__(slice(0, 2), 2**40),
    "where_u8": lambda d: torch.where(_u8(d) > 0, _u8(d), 300),
    "masked_fill_u8": lambda d: _u8(d).masked_fill(_u8(d) > 0, 300),
    "masked_fill_u8_tensor_value": lambda d: _u8(d).masked_fill(_u8(d) > 0, torch.tensor(300)),
    "index_fill_u8": lambda d: _u8(d).index_fill(0, torch.tensor([0], device=d), 300),
    "scatter_value_u8": lambda d: _u8(d).scatter(0, torch.tensor([0], device=d), 300),
    "sub_alpha_u8": lambda d: _u8(d).sub(1, alpha=300),
    "pow_u8": lambda d: _u8(d) ** 300,
    "pow_f16": lambda d: _f16(d) ** 1e6,
    "addcmul_value_u8": lambda d: torch.addcmul(_u8(d), _u8(d), _u8(d), value=300),
    "pad_value_u8": lambda d: torch.nn.functional.pad(_u8(d), (1, 1), value=300),
    "threshold_u8": lambda d: torch.nn.functional.threshold(_u8(d), 1, 300),
    "hardtanh_f16": lambda d: torch.nn.functional.hardtanh(_f16(d), -1e6, 1e6),
}


@pytest.mark.parametrize("case", sorted(SCALAR_OVERFLOWS))
def test_a_scalar_the_dtype_cannot_hold_raises_as_on_cpu(survivor, case):
    error = assert_same_error_as_cpu(SCALAR_OVERFLOWS[case], normalize=lambda m: m.splitlines()[0])
    assert "without overflow" in str(error)
    assert_usable(survivor)


# Where CPU converts without a check, tpu gives CPU's (wrapped or infinite) result.
SCALAR_WRAPS = {
    "add_u8": lambda d: _u8(d) + 300,
    "add_u8_negative": lambda d: _u8(d) + (-1),
    "clamp_min_u8_negative": lambda d: _u8(d).clamp_min(-1),
    "fill_u8_negative": lambda d: _u8(d).fill_(-255),
    "fill_tensor_value_u8": lambda d: _u8(d).fill_(torch.tensor(300)),
    "fmod_u8": lambda d: torch.fmod(_u8(d), 300),
    "eq_u8": lambda d: _u8(d) == 300,
    "add_f16": lambda d: _f16(d) + 1e6,
    "addcdiv_f16": lambda d: torch.addcdiv(_f16(d), _f16(d), _f16(d), value=1e6),
    "where_f16": lambda d: torch.where(_f16(d) > 0, _f16(d), 1e6),
    "fill_one_f16": lambda d: _f16(d, 1).fill_(1e6),
}


@pytest.mark.parametrize("case", sorted(SCALAR_WRAPS))
def test_a_scalar_cpu_converts_unchecked_gives_cpus_result(case):
    torch.testing.assert_close(SCALAR_WRAPS[case]("tpu").cpu(), SCALAR_WRAPS[case]("cpu"))
