"""Tensors that grow by appends (a KV cache, generated tokens, an attention mask): `torch.cat([t, piece])`
with a small piece keeps spare capacity in the storage, so the appends, reads of the last position and
attention over the grown keys compile once per power-of-two capacity, not once per length. The tensors
are exactly CPU's (sizes, contiguous strides, values); only their storage is larger."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops


def compiles(op: str) -> int:
    return torchtpu.metrics()["ops"].get(op, {}).get("compiles", 0)


def test_appends_match_cpu_and_compile_per_capacity(metrics):
    torch.manual_seed(0)
    cpu = torch.randn(2, 3, 8, 4)
    tpu = cpu.to("tpu")
    for _ in range(60):
        piece = torch.randn(2, 3, 1, 4)
        cpu = torch.cat([cpu, piece], dim=2)
        tpu = torch.cat([tpu, piece.to("tpu")], dim=2)
        assert tpu.shape == cpu.shape and tpu.stride() == cpu.stride() and tpu.is_contiguous()
    assert_close(tpu.cpu(), cpu, rtol=0, atol=0)
    # 68 positions: capacities 16, 32, 64 and 128; two programs each (entering it, appending within it).
    assert compiles("torchtpu::_append_rows") <= 8
    assert "aten::cat" not in metrics()["ops"]
    assert fallback_ops() == {}


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_appends_along_any_dim(dim):
    cpu = torch.arange(24.0).reshape(4, 6) if dim != 0 else torch.arange(48.0).reshape(8, 6)
    tpu = cpu.to("tpu")
    for step in range(5):
        shape = list(cpu.shape)
        shape[dim] = 1
        piece = torch.full(shape, float(step))
        cpu, tpu = torch.cat([cpu, piece], dim), torch.cat([tpu, piece.to("tpu")], dim)
    assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64, torch.bfloat16, torch.float32,
                                   torch.complex64])
def test_appends_of_every_dtype_match_cpu(dtype):
    base, piece = torch.ones(2, 8).to(dtype), torch.zeros(2, 1).to(dtype)
    grown = torch.cat([torch.cat([base.to("tpu"), piece.to("tpu")], 1), piece.to("tpu")], 1)
    assert torch.equal(grown.cpu(), torch.cat([base, piece, piece], 1))
    assert fallback_ops() == {}


def test_views_whose_strides_change_order_keep_cpu_strides():
    # Two views of one grown tensor that share a program but order their strides differently: results are
    # laid out as CPU lays them out (by the input's stride order), so `.view` fails where CPU's fails.
    cpu = torch.cat([torch.arange(12.0).reshape(2, 6), torch.ones(2, 1)], 1)
    tpu = torch.cat([torch.arange(12.0).reshape(2, 6).to("tpu"), torch.ones(2, 1, device="tpu")], 1)
    for size, stride in (((2, 3), (5, 2)), ((2, 3), (2, 5))):
        expected = cpu.as_strided(size, stride) + 1
        got = tpu.as_strided(size, stride) + 1
        assert got.stride() == expected.stride()
        assert torch.equal(got.cpu(), expected)


def test_a_grown_tensor_behaves_like_any_other():
    base = torch.randn(1, 12)
    grown = torch.cat([base.to("tpu"), torch.ones(1, 1, device="tpu")], 1)
    expected = torch.cat([base, torch.ones(1, 1)], 1)
    # The old tensor is untouched, writes into the new one stay in it, views and reshapes work.
    grown[0, 3] = 7.0
    expected[0, 3] = 7.0
    assert_close(grown.cpu(), expected)
    assert_close(grown.view(13).cpu(), expected.view(13))
    assert_close((grown[:, -1:] * 2).cpu(), expected[:, -1:] * 2)
    # Appending twice to the same prefix gives two independent tensors.
    a = torch.cat([grown, torch.full((1, 1), 2.0, device="tpu")], 1)
    b = torch.cat([grown, torch.full((1, 1), 3.0, device="tpu")], 1)
    assert a[0, -1].item() == 2.0 and b[0, -1].item() == 3.0
    assert_close(a[:, :13].cpu(), expected)


def test_views_of_a_grown_batch_compile_per_capacity(metrics):
    # x[:, -1:] of a [2, L] tensor has strides (L, 1): the row length, new at every append. Programs take
    # such strides as operands, so reading, computing on and writing the last columns compiles per capacity.
    torch.manual_seed(0)
    cpu = torch.randint(0, 50, (2, 5))
    tpu = cpu.to("tpu")
    eos = torch.tensor([7, 11])
    for step in range(40):
        piece = torch.randint(0, 50, (2, 1))
        cpu, tpu = torch.cat([cpu, piece], 1), torch.cat([tpu, piece.to("tpu")], 1)
        assert_close(tpu[:, -1:].clone().cpu(), cpu[:, -1:].clone(), rtol=0, atol=0)
        assert_close((tpu[:, -3:] + 1).cpu(), cpu[:, -3:] + 1, rtol=0, atol=0)
        assert_close(torch.isin(tpu[:, -1:], eos.to("tpu")).cpu(), torch.isin(cpu[:, -1:], eos), rtol=0, atol=0)
        cpu[:, -2] += step
        tpu[:, -2] += step
    # Lengths 6..45 span capacities 16, 32 and 64 (the storage's length is part of a program's key).
    view_ops = ("aten::clone", "aten::add.Tensor", "aten::isin.Tensor_Tensor", "aten::add_.Tensor")
    assert all(compiles(op) <= 3 for op in view_ops), {op: compiles(op) for op in view_ops}
    assert_close(tpu.cpu(), cpu, rtol=0, atol=0)
    assert fallback_ops() == {}


def test_cat_errors_read_as_on_cpu():
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([torch.zeros(2, 12, device="tpu"), torch.zeros(3, 1, device="tpu")], 1)


def test_mixed_dtypes_take_the_plain_cat():
    a, b = torch.arange(12).reshape(1, 12), torch.ones(1, 1)
    assert_close(torch.cat([a.to("tpu"), b.to("tpu")], 1).cpu(), torch.cat([a, b], 1))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_over_grown_keys_compiles_per_capacity(causal, metrics):
    torch.manual_seed(0)
    k_cpu, v_cpu = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    k, v = k_cpu.to("tpu"), v_cpu.to("tpu")
    for _ in range(40):
        new_k, new_v = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
        k_cpu, v_cpu = torch.cat([k_cpu, new_k], 2), torch.cat([v_cpu, new_v], 2)
        k, v = torch.cat([k, new_k.to("tpu")], 2), torch.cat([v, new_v.to("tpu")], 2)
        q = torch.randn(1, 4, 1, 16)
        out = F.scaled_dot_product_attention(q.to("tpu"), k, v, is_causal=causal, enable_gqa=True)
        assert_close(out.cpu(), F.scaled_dot_product_attention(q, k_cpu, v_cpu, is_causal=causal, enable_gqa=True),
                     rtol=1e-4, atol=1e-5)
    # Lengths 9..48: capacities 16, 32 and 64.
    assert compiles("torchtpu::_attention_prefix") <= 3
    assert fallback_ops() == {}


def test_gradients_through_grown_keys_match_cpu():
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8)
    extra = torch.randn(1, 2, 1, 8)

    def run(device):
        qd, kd, vd = (t.to(device).requires_grad_() for t in (q, k, v))
        kk, vv = torch.cat([kd, extra.to(device)], 2), torch.cat([vd, extra.to(device)], 2)
        F.scaled_dot_product_attention(qd, kk, vv).sum().backward()
        return [t.grad.cpu() for t in (qd, kd, vd)]

    for got, expected in zip(run("tpu"), run("cpu")):
        assert_close(got, expected, rtol=1e-4, atol=1e-5)


def first_generate_compiles(inputs: dict) -> tuple[int, int]:
    """Compiles of two first `generate` calls of a tiny HF Llama on tpu (10, then 90 new tokens), each checked
    token for token against CPU. `inputs`: `generate`'s tensor arguments, on the CPU."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model_tpu = transformers.LlamaForCausalLM(config).eval()
    model_tpu.load_state_dict(model.state_dict())
    model_tpu.to("tpu")

    def first_call(new_tokens):
        before = sum(op["compiles"] for op in torchtpu.metrics()["ops"].values())
        kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        out = model_tpu.generate(**{name: t.to("tpu") for name, t in inputs.items()}, **kwargs)
        assert torch.equal(out.cpu(), model.generate(**inputs, **kwargs))
        return sum(op["compiles"] for op in torchtpu.metrics()["ops"].values()) - before

    return first_call(10), first_call(90)  # lengths up to 16: one capacity; up to 96: four more


def test_hf_generate_first_call_compiles_per_bucket_not_per_token():
    torch.manual_seed(1)
    short, long = first_generate_compiles({"input_ids": torch.randint(0, 128, (1, 6))})
    # Only the new capacities compile, a few programs each; per token it would be several per position.
    assert long <= short and long < 90, (short, long)


def test_hf_generate_for_a_batch_compiles_per_bucket_not_per_token():
    # With two prompts, `input_ids[:, -1:]` and the stopping check's views of the growing ids have the row
    # length as a stride; they must not compile per token either.
    torch.manual_seed(1)
    short, long = first_generate_compiles({"input_ids": torch.randint(0, 128, (2, 6)),
                                           "attention_mask": torch.ones(2, 6, dtype=torch.long)})
    assert long <= short and long < 90, (short, long)
