"""The kernels torchtpu ships (Pallas RMSNorm and flash attention, interpret mode on the CPU plugin): forward and
backward against CPU torch and against the native lowering, inside a small GPT under every driver, and compiled
for real TPU topologies (Mosaic) through libtpu without a TPU.

Tolerances: float32 1e-5 for values, 5e-5 for gradients (sums over a whole sequence; the kernels accumulate
in float32 as CPU does, in another order); bfloat16 2e-2 relative to the values' scale (one bfloat16 ulp is
8e-3)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchtpu
import torchtpu.aot as aot
from torchtpu import kernels
from torchtpu.kernels import TensorSpec, builtin
from torchtpu.testing.models import SmallGPT, train_step

needs_libtpu = pytest.mark.skipif(aot.find_libtpu() is None, reason="libtpu is not installed (pip install torchtpu[tpu])")
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
GRAD_TOLERANCE = {torch.float32: dict(rtol=5e-5, atol=5e-5), torch.bfloat16: TOLERANCE[torch.bfloat16]}


def _leaves(*tensors):
    cpu = [t.clone().requires_grad_() for t in tensors]
    tpu = [t.tpu().requires_grad_() for t in tensors]
    return cpu, tpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_matches_cpu_sdpa_forward_and_backward(dtype, causal):
    (q, k, v), (qt, kt, vt) = _leaves(*(torch.randn(2, 3, 128, 64, dtype=dtype) for _ in range(3)))
    out = kernels.flash_attention(qt, kt, vt, causal=causal)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out.cpu(), expected, **TOLERANCE[dtype])
    grad = torch.randn_like(expected)
    out.backward(grad.tpu())
    expected.backward(grad)
    for got, want in ((qt, q), (kt, k), (vt, v)):
        scale = max(1.0, want.grad.abs().max().item())
        torch.testing.assert_close(got.grad.cpu() / scale, want.grad / scale, **GRAD_TOLERANCE[dtype])


def test_flash_attention_blocks_and_lengths():
    # Several blocks per sequence (256 = 2 x 128) and keys longer than queries.
    (q, k, v), (qt, kt, vt) = _leaves(torch.randn(1, 2, 256, 64), torch.randn(1, 2, 384, 64), torch.randn(1, 2, 384, 64))
    out = kernels.flash_attention(qt, kt, vt, scale=0.3)
    expected = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out.cpu(), expected, **TOLERANCE[torch.float32])
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(kt.grad.cpu(), k.grad, **GRAD_TOLERANCE[torch.float32])


def test_flash_attention_agrees_with_the_native_lowering():
    q, k, v = (torch.randn(2, 2, 128, 32, device="tpu") for _ in range(3))
    torch.testing.assert_close(kernels.flash_attention(q, k, v, causal=True).cpu(),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True).cpu(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_cpu_and_the_native_lowering(dtype):
    (x, w), (xt, wt) = _leaves(torch.randn(4, 16, 256, dtype=dtype), torch.randn(256, dtype=dtype))
    out = kernels.rms_norm(xt, wt, 1e-6)
    expected = F.rms_norm(x, (256,), w, 1e-6)
    torch.testing.assert_close(out.cpu(), expected, **TOLERANCE[dtype])
    torch.testing.assert_close(out.cpu(), F.rms_norm(xt.detach(), (256,), wt.detach(), 1e-6).cpu(), **TOLERANCE[dtype])
    grad = torch.randn_like(expected)
    out.backward(grad.tpu())
    expected.backward(grad)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, **GRAD_TOLERANCE[dtype])
    scale = w.grad.abs().max().item()
    torch.testing.assert_close(wt.grad.cpu() / scale, w.grad / scale, **GRAD_TOLERANCE[dtype])


def test_enabled_sends_only_what_fits_to_the_kernels(metrics):
    q, k, v = (torch.randn(1, 2, 64, 32, device="tpu") for _ in range(3))
    mask = torch.rand(64, 64, device="tpu") > 0.5
    with kernels.enabled():
        with_mask = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # not the kernel's: native
        assert "torchtpu::_kernel" not in metrics()["ops"]
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert metrics()["ops"]["torchtpu::_kernel"]["executions"] == 1
    torch.testing.assert_close(with_mask.cpu(), F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(),
                                                                                attn_mask=mask.cpu()))
    torch.testing.assert_close(causal.cpu(), F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), is_causal=True),
                               rtol=1e-5, atol=1e-5)
    assert not builtin.attention_fits(q, k[:, :1], v[:, :1])  # grouped-query heads: native
    assert not builtin.attention_fits(q, k, v, dropout_p=0.1)


def _gpt_steps(device: str, mode: str, steps: int = 2):
    torch.manual_seed(0)
    model = SmallGPT(vocab=64, dim=64, heads=2, layers=2, context=32, norm="rms").to(device)
    # SGD, not Adam: the key bias's gradient is zero up to rounding, and Adam would scale that noise to lr.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randint(0, 64, (2, 32)).to(device)
    y = torch.randint(0, 64, (2, 32)).to(device)
    step = train_step
    if mode == "compiled":
        step = torch.compile(train_step, backend="tpu")
    losses = []
    with torchtpu.eager_mode("fused" if mode == "fused" else "strict"):
        for _ in range(steps):
            losses.append(step(model, optimizer, lambda out, t: F.cross_entropy(out.flatten(0, 1), t.flatten()), x, y)
                          .detach().cpu())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
def test_gpt_trains_with_the_kernels_under_every_driver(mode, metrics):
    cpu_losses, cpu_params = _gpt_steps("cpu", "strict")
    torch._dynamo.reset()
    with kernels.enabled():
        losses, params = _gpt_steps("tpu", mode)
    ops = metrics()["ops"]
    assert "torchtpu::_kernel" in ops  # the kernels ran ...
    assert not any("attention" in name or "rms_norm" in name for name in ops)  # ... and no native attention or norm
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-5)
    for got, want in zip(params, cpu_params):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@needs_libtpu
@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2"])
def test_kernels_compile_for_tpu_as_mosaic(topology):
    f32 = torch.float32
    qkv = TensorSpec((1, 4, 256, 128), f32)
    lse = TensorSpec((1, 4, 256), f32)
    statics = dict(causal=True, scale=0.125, block_q=128, block_k=128)
    x, w = TensorSpec((256, 512), f32), TensorSpec((512,), f32)
    programs = {
        "flash_attention": builtin.attention_op.tpu_program(qkv, qkv, qkv, **statics),
        "flash_attention_backward": builtin._attention_backward_op.tpu_program(qkv, qkv, qkv, qkv, lse, qkv, **statics),
        "rms_norm": builtin.rms_norm_op.tpu_program(x, w, eps=1e-6),
        "rms_norm_backward": builtin._rms_norm_backward_op.tpu_program(x, w, x, eps=1e-6),
    }
    assert all("tpu_custom_call" in text for text in programs.values())
    _, results = aot.compile_programs([aot.Program(text, [name]) for name, text in programs.items()], topology)
    rejected = {r.program.op: r.error for r in results if not r.accepted}
    assert not rejected, rejected
    # The compiler's memory plan is there; its cost analysis sees a Mosaic kernel as opaque (no flops).
    assert all(r.peak_bytes >= r.memory["argument_bytes"] > 0 for r in results)


def test_transformers_models_take_the_attention_kernel(metrics):
    import transformers as hf

    from torchtpu.testing.hf_models import _decoder_common, _ids

    torch.manual_seed(0)
    cpu = hf.LlamaForCausalLM(hf.LlamaConfig(**_decoder_common())).eval()
    tpu = hf.LlamaForCausalLM._from_config(hf.LlamaConfig(**_decoder_common()), attn_implementation="tpu_pallas")
    tpu = tpu.eval().tpu()
    tpu.load_state_dict(cpu.state_dict())
    ids = _ids(seq=16)
    with torch.no_grad():
        expected = cpu(ids).logits
        got = tpu(ids.tpu()).logits.cpu()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert "torchtpu::_kernel" in metrics()["ops"]  # grouped-query heads repeated, then the kernel
    tokens = tpu.generate(ids[:, :8].tpu(), max_new_tokens=6, do_sample=False).cpu()
    assert torch.equal(tokens, cpu.generate(ids[:, :8], max_new_tokens=6, do_sample=False))
