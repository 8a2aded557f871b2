"""torchtpu.kernels.jax_op / stablehlo_op: custom kernels as torch ops on tpu, against CPU torch.

Every driver (strict, fused, torch.compile) runs the kernel inside its program; gradients come from jax.vjp
or a given backward; bad calls raise KernelError (or CPU's error) naming the op, and leave tensors usable."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl

import torchtpu
import torchtpu.aot as aot
from torchtpu import kernels
from torchtpu.kernels import KernelError, TensorSpec

from helpers import assert_usable


def _scaled_tanh_add(x, y, alpha=2.0):
    return x + alpha * jnp.tanh(y)


scaled_tanh_add = kernels.jax_op("kernel_test::scaled_tanh_add", _scaled_tanh_add)


def _row_stats(x):
    return jnp.mean(x, axis=-1), jnp.max(x, axis=-1)


row_stats = kernels.jax_op("kernel_test::row_stats", _row_stats, num_outputs=2)


def _pallas_axpy_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * 3.0 + y_ref[...]


def _pallas_axpy(x, y):
    return pl.pallas_call(_pallas_axpy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=kernels.interpret_mode())(x, y)


pallas_axpy = kernels.jax_op("kernel_test::pallas_axpy", _pallas_axpy)

_MUL_TEXT = """module @mul {
  func.func public @main(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> (tensor<4x8xf32>) {
    %0 = stablehlo.multiply %a, %b : tensor<4x8xf32>
    %1 = call @twice(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
  func.func private @twice(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %0 = stablehlo.add %x, %x : tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}"""
twice_mul = kernels.stablehlo_op("kernel_test::twice_mul", _MUL_TEXT)


def _negate_module(x: TensorSpec) -> str:
    t = "tensor<" + "".join(f"{d}x" for d in x.shape) + "f32>"
    return (f"module {{\n  func.func public @main(%x: {t}) -> {t} {{\n    %0 = stablehlo.negate %x : {t}\n"
            f"    return %0 : {t}\n  }}\n}}")


negate = kernels.stablehlo_op("kernel_test::negate", _negate_module,
                              backward=lambda ctx, grad: -grad)


def test_jax_op_matches_cpu_in_strict_and_fused_mode():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    expected = x + 3.0 * torch.tanh(y)
    torch.testing.assert_close(scaled_tanh_add(x.tpu(), y.tpu(), alpha=3.0).cpu(), expected, rtol=1e-6, atol=1e-6)
    with torchtpu.eager_mode("fused"):
        out = scaled_tanh_add(x.tpu() * 2, y.tpu()) + 1  # the kernel between two recorded ops
        torch.testing.assert_close(out.cpu(), 2 * x + 2 * torch.tanh(y) + 1, rtol=1e-6, atol=1e-6)


def test_repeated_calls_compile_nothing_and_stay_on_the_device(metrics):
    x, y = torch.randn(4, 8, device="tpu"), torch.randn(4, 8, device="tpu")
    scaled_tanh_add(x, y).cpu()
    before = metrics()
    for _ in range(3):
        out = scaled_tanh_add(x, y, alpha=2.0)
    after = metrics()
    assert after["ops"]["torchtpu::_kernel"]["compiles"] == before["ops"]["torchtpu::_kernel"]["compiles"]
    assert after["transfers"]["to_host"] == before["transfers"]["to_host"]  # no host round trip
    assert after["transfers"]["to_device"] == before["transfers"]["to_device"]
    assert out.device.type == "tpu"


def test_static_arguments_and_shapes_make_separate_entries():
    x = torch.randn(3, 5)
    for alpha in (0.5, -1.0):
        got = scaled_tanh_add(x.tpu(), x.tpu(), alpha=alpha).cpu()
        torch.testing.assert_close(got, x + alpha * torch.tanh(x), rtol=1e-6, atol=1e-6)
    z = torch.randn(2, 7)
    torch.testing.assert_close(scaled_tanh_add(z.tpu(), z.tpu()).cpu(), z + 2 * torch.tanh(z), rtol=1e-6, atol=1e-6)


def test_several_outputs_and_noncontiguous_inputs():
    x = torch.randn(6, 4).t()  # a transposed view: the kernel reads its logical values
    mean, top = row_stats(x.tpu())
    torch.testing.assert_close(mean.cpu(), x.mean(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(top.cpu(), x.amax(-1))


def test_default_backward_is_jax_vjp():
    x = torch.randn(4, 8, requires_grad=True)
    y = torch.randn(4, 8, requires_grad=True)
    xt = x.detach().tpu().requires_grad_()
    yt = y.detach().tpu().requires_grad_()
    (scaled_tanh_add(xt, yt, alpha=1.5) ** 2).sum().backward()
    ((x + 1.5 * torch.tanh(y)) ** 2).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(yt.grad.cpu(), y.grad, rtol=1e-5, atol=1e-5)


def test_backward_of_one_output_of_several():
    x = torch.randn(3, 5, requires_grad=True)
    xt = x.detach().tpu().requires_grad_()
    row_stats(xt)[0].sum().backward()  # the max output gets no gradient
    x.mean(-1).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-6, atol=1e-6)


def test_pallas_kernel_runs_interpreted_on_the_cpu_plugin():
    assert kernels.interpret_mode()
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    torch.testing.assert_close(pallas_axpy(x.tpu(), y.tpu()).cpu(), 3 * x + y, rtol=1e-6, atol=1e-6)


def test_stablehlo_text_with_helper_functions_in_every_driver():
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    torch.testing.assert_close(twice_mul(a.tpu(), b.tpu()).cpu(), 2 * a * b)
    with torchtpu.eager_mode("fused"):
        # Two calls in one fused program: the kernel's functions appear once.
        out = twice_mul(a.tpu(), b.tpu()) + twice_mul(b.tpu(), a.tpu())
        torch.testing.assert_close(out.cpu(), 4 * a * b)


def test_stablehlo_builder_with_given_backward():
    x = torch.randn(2, 3, requires_grad=True)
    xt = x.detach().tpu().requires_grad_()
    out = negate(xt)
    torch.testing.assert_close(out.cpu(), -x.detach())
    (out * out.detach()).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.detach())


def test_compiled_graph_keeps_the_kernel_without_a_break(metrics):
    x, y = torch.randn(4, 8), torch.randn(4, 8)

    def step(a, b):
        return (scaled_tanh_add(a, b).relu() * 2 + twice_mul(a, b)).sum(-1)

    torch._dynamo.reset()
    counts = torch._dynamo.utils.counters
    counts.clear()
    compiled = torch.compile(step, backend="tpu")
    for _ in range(3):
        out = compiled(x.tpu(), y.tpu())
    torch.testing.assert_close(out.cpu(), step(x.tpu(), y.tpu()).cpu(), rtol=1e-6, atol=1e-6)
    assert sum(counts["graph_break"].values()) == 0
    assert metrics()["compiled"]["captures"] == 1 and metrics()["compiled"]["replays"] == 2


def test_compiled_training_step_through_the_kernel():
    x = torch.randn(4, 8)
    w = torch.randn(4, 8, requires_grad=True)
    wt = w.detach().tpu().requires_grad_()

    def loss(a, b):
        return scaled_tanh_add(a, b).square().mean()

    compiled = torch.compile(loss, backend="tpu")
    compiled(x.tpu(), wt).backward()
    ((x + 2 * torch.tanh(w)).square().mean()).backward()
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-5, atol=1e-6)


def test_shape_the_jax_function_rejects_is_a_clear_error(survivor):
    with pytest.raises(KernelError, match=r"kernel_test::scaled_tanh_add: the JAX function rejects inputs "
                                          r"\(float32\[2, 3\], float32\[4, 5\]\)"):
        scaled_tanh_add(torch.randn(2, 3, device="tpu"), torch.randn(4, 5, device="tpu"))
    assert_usable(survivor)


def test_stablehlo_text_called_with_other_shapes_is_a_clear_error(survivor):
    with pytest.raises(KernelError, match=r"@main takes \(float32\[4, 8\], float32\[4, 8\]\) but was called with "
                                          r"\(float32\[2, 2\], float32\[2, 2\]\)"):
        twice_mul(torch.randn(2, 2, device="tpu"), torch.randn(2, 2, device="tpu"))
    assert_usable(survivor)


def test_unsupported_dtypes_are_clear_errors(survivor):
    with pytest.raises(KernelError, match="needs JAX's 64-bit mode"):
        scaled_tanh_add(torch.randn(2, device="tpu", dtype=torch.float64), torch.randn(2, device="tpu", dtype=torch.float64))
    with pytest.raises(KernelError, match="needs JAX's 64-bit mode"):
        row_stats(torch.arange(6, device="tpu").view(2, 3))
    assert_usable(survivor)


def test_mixed_devices_are_a_clear_error(survivor):
    with pytest.raises((KernelError, RuntimeError), match="tpu|device"):
        scaled_tanh_add(torch.randn(2, device="tpu"), torch.randn(2))
    assert_usable(survivor)


def test_cpu_tensors_are_a_clear_error():
    with pytest.raises(KernelError, match="runs on tpu only: move its tensors with .to\\('tpu'\\)"):
        scaled_tanh_add(torch.randn(2), torch.randn(2))


def test_bad_names_and_signatures_are_clear_errors():
    with pytest.raises(KernelError, match="must be 'namespace::name'"):
        kernels.jax_op("no_namespace", _scaled_tanh_add)
    with pytest.raises(KernelError, match=r"\*args/\*\*kwargs"):
        kernels.jax_op("kernel_test::varargs", lambda *xs: xs[0])
    with pytest.raises(KernelError, match="has no `func.func @main"):
        kernels.stablehlo_op("kernel_test::no_main", "module {}")


def test_missing_jax_is_a_clear_error():
    code = ("import sys; sys.modules['jax'] = None\n"
            "import torch, torchtpu\nfrom torchtpu import kernels\n"
            "op = kernels.jax_op('kernel_test::needs_jax', lambda x: x)\n"
            "try:\n    op(torch.ones(2, device='tpu'))\n"
            "except kernels.KernelError as e:\n    print('ERROR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "ERROR" in out.stdout and "pip install torchtpu[kernels]" in out.stdout, out.stderr[-2000:]


def test_tpu_program_lowers_pallas_to_mosaic():
    text = pallas_axpy.tpu_program(TensorSpec((8, 128), torch.float32), TensorSpec((8, 128), torch.float32))
    assert text.startswith("module @torchtpu") and "tpu_custom_call" in text
    assert kernels.interpret_mode()  # building for the TPU does not change how the device runs kernels


def test_pallas_kernel_without_backward_says_to_give_one():
    x = torch.randn(8, 128, device="tpu", requires_grad=True)
    out = pallas_axpy(x, torch.randn(8, 128, device="tpu"))
    with pytest.raises(KernelError, match="a pallas_call has no automatic reverse mode\\): give jax_op a `backward=`"):
        out.sum().backward()


@pytest.mark.skipif(aot.find_libtpu() is None, reason="libtpu is not installed (pip install torchtpu[tpu])")
def test_worked_example_of_the_docs_runs():
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "kernels.md").read_text()
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(example, "docs/kernels.md", "exec"), namespace)
    x = namespace["x"].detach().cpu().requires_grad_()
    (x * torch.sigmoid(2 * x)).sum().backward()
    torch.testing.assert_close(namespace["x"].grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)


def test_dynamic_shapes_under_compile_build_one_kernel_per_shape(metrics):
    compiled = torch.compile(lambda a, b: scaled_tanh_add(a, b) + 1, backend="tpu", dynamic=True)
    for n in (4, 6, 4):
        a, b = torch.randn(n, 3), torch.randn(n, 3)
        torch.testing.assert_close(compiled(a.tpu(), b.tpu()).cpu(), a + 2 * torch.tanh(b) + 1, rtol=1e-6, atol=1e-6)
    assert metrics()["compiled"] == {"captures": 2, "replays": 1}
