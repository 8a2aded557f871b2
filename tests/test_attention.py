"""F.scaled_dot_product_attention on tpu: one program forward and one backward (the "overrideable" SDPA
backend), matching CPU in values and gradients; dropout and grouped-query attention take PyTorch's math
path, still natively."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

CASES = {
    "causal": dict(shape=(2, 3, 6, 8), causal=True),
    "float_bias": dict(shape=(2, 3, 5, 8), mask="float"),
    "bool_mask": dict(shape=(1, 2, 4, 6), mask="bool"),
    "broadcast_bias": dict(shape=(2, 2, 5, 4), mask="row"),
    "cross_lengths": dict(shape=(2, 2, 3, 8), kv_length=7),
    "scale": dict(shape=(1, 2, 5, 8), causal=True, scale=0.3),
}


def inputs(shape, kv_length=None, mask=None, dtype=torch.float32):
    b, h, length, e = shape
    s = kv_length or length
    q = torch.randn(b, h, length, e, dtype=dtype)
    k, v = torch.randn(b, h, s, e, dtype=dtype), torch.randn(b, h, s, e, dtype=dtype)
    attn_mask = None
    if mask == "float":
        attn_mask = torch.randn(length, s, dtype=dtype)
    elif mask == "bool":
        attn_mask = torch.rand(length, s) > 0.3
        attn_mask[:, 0] = True  # every query sees a key (CPU's kernels differ on fully masked rows)
    elif mask == "row":
        attn_mask = torch.randn(b, 1, 1, s, dtype=dtype)
    return q, k, v, attn_mask


def run(q, k, v, attn_mask, device, causal=False, scale=None, **kwargs):
    q, k, v = (t.detach().to(device).requires_grad_() for t in (q, k, v))
    mask = None if attn_mask is None else attn_mask.to(device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, **kwargs)
    (out * torch.linspace(-1, 1, out.shape[-1], device=device)).sum().backward()
    return [t.detach().cpu() for t in (out, q.grad, k.grad, v.grad)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_attention_matches_cpu_in_one_program_each_way(name, metrics):
    case = dict(CASES[name])
    q, k, v, attn_mask = inputs(case.pop("shape"), case.pop("kv_length", None), case.pop("mask", None))
    expected = run(q, k, v, attn_mask, "cpu", **case)
    got = run(q, k, v, attn_mask, "tpu", **case)
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-4, atol=1e-5)
    ops = metrics()["ops"]
    assert ops["aten::_scaled_dot_product_fused_attention_overrideable"]["executions"] == 1
    assert ops["aten::_scaled_dot_product_fused_attention_overrideable_backward"]["executions"] == 1
    assert "aten::_softmax" not in ops
    assert fallback_ops() == {}


def test_bfloat16_attention_matches_cpu():
    q, k, v, _ = inputs((1, 2, 8, 16), dtype=torch.bfloat16)
    expected = run(q, k, v, None, "cpu", causal=True)
    got = run(q, k, v, None, "tpu", causal=True)
    for g, e in zip(got, expected):
        assert_close(g.float(), e.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("kwargs", [dict(dropout_p=0.0, enable_gqa=True), dict(dropout_p=0.5)], ids=["gqa", "dropout"])
def test_other_attention_takes_the_math_path_natively(kwargs, metrics):
    q = torch.randn(1, 4, 5, 8)
    heads = 2 if kwargs.get("enable_gqa") else 4
    k, v = torch.randn(1, heads, 5, 8), torch.randn(1, heads, 5, 8)
    out = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), **kwargs)
    if not kwargs["dropout_p"]:
        assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v, **kwargs), rtol=1e-4, atol=1e-5)
    assert "aten::_scaled_dot_product_fused_attention_overrideable" not in metrics()["ops"]
    assert fallback_ops() == {}
