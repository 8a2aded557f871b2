"""F.scaled_dot_product_attention on tpu: one program forward and one backward (the "overrideable" SDPA
backend), matching CPU in values and gradients, grouped-query attention (`enable_gqa`) included; dropout
takes PyTorch's math path, still natively. Keys and values that a growing cat left with spare capacity
are read up to a runtime length (one program per capacity, tests/test_growth.py)."""
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
    "gqa": dict(shape=(2, 4, 5, 8), kv_heads=2, enable_gqa=True),
    "gqa_causal_decode": dict(shape=(1, 6, 1, 8), kv_heads=2, kv_length=9, causal=True, enable_gqa=True),
}


def inputs(shape, kv_length=None, mask=None, dtype=torch.float32, kv_heads=None):
    b, h, length, e = shape
    s = kv_length or length
    q = torch.randn(b, h, length, e, dtype=dtype)
    kv_shape = (b, kv_heads or h, s, e)
    k, v = torch.randn(kv_shape, dtype=dtype), torch.randn(kv_shape, dtype=dtype)
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
    q, k, v, attn_mask = inputs(case.pop("shape"), case.pop("kv_length", None), case.pop("mask", None),
                                kv_heads=case.pop("kv_heads", None))
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


def test_dropout_takes_the_math_path_natively(metrics):
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8)
    out = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), dropout_p=0.5)
    assert out.shape == (1, 4, 5, 8)
    assert "aten::_scaled_dot_product_fused_attention_overrideable" not in metrics()["ops"]
    assert fallback_ops() == {}
