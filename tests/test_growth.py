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


def penalty_step(ids: torch.Tensor, scores: torch.Tensor, cache: torch.Tensor, order: torch.Tensor):
    """What generation does at each token with tensors that grow: a repetition penalty over the generated ids,
    a beam reorder of the KV cache, counts of a mask; on whichever device the arguments are."""
    picked = scores.gather(1, ids.clamp(max=scores.shape[1] - 1))
    picked = torch.where(picked < 0, picked * 1.5, picked / 1.5)
    penalised = scores.scatter(1, ids, picked)
    mask = (ids % 3) != 0
    return (penalised, cache.index_select(0, order) * 2, mask.sum(), mask.long().cumsum(-1),
            (ids - 1).amax(-1), torch.isin(ids, torch.tensor([3, 5], device=ids.device)))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_ops_over_grown_tensors_compile_per_capacity(mode, metrics):
    # Elementwise ops, gather/scatter by grown indices, a beam reorder of a grown cache and sums read grown
    # tensors padded to their capacity (aten/append.h): one program per capacity, CPU's values.
    torch.manual_seed(0)
    ids_cpu, cache_cpu = torch.randint(0, 50, (2, 5)), torch.randn(4, 2, 5, 8)
    ids, cache = ids_cpu.to("tpu"), cache_cpu.to("tpu")
    order_cpu = torch.tensor([1, 0, 3, 2])
    with torchtpu.eager_mode(mode):
        for _ in range(40):
            piece, kv = torch.randint(0, 50, (2, 1)), torch.randn(4, 2, 1, 8)
            ids_cpu, cache_cpu = torch.cat([ids_cpu, piece], 1), torch.cat([cache_cpu, kv], 2)
            ids, cache = torch.cat([ids, piece.to("tpu")], 1), torch.cat([cache, kv.to("tpu")], 2)
            scores_cpu = torch.randn(2, 50)  # wider than the ids get: a tensor of their length would not line up
            got = penalty_step(ids, scores_cpu.to("tpu"), cache, order_cpu.to("tpu"))
            expected = penalty_step(ids_cpu, scores_cpu, cache_cpu, order_cpu)
            for g, e in zip(got, expected):
                assert g.shape == e.shape and g.stride() == e.stride() and g.dtype == e.dtype
                assert_close(g.cpu(), e, rtol=1e-6, atol=0)
            # The reordered cache grows on: appending to it reads no more than a cat of the cache did.
            cache, cache_cpu = cache.index_select(0, order_cpu.to("tpu")), cache_cpu.index_select(0, order_cpu)
    # Lengths 6..45: capacities 16, 32 and 64, one program each, and one more at lengths 16 and 32, where a
    # grown tensor fills its storage (no room: it runs as shaped).
    ops = ("aten::gather", "aten::scatter.src", "aten::where.self", "aten::index_select", "aten::sum",
           "aten::cumsum", "aten::amax", "aten::isin.Tensor_Tensor", "aten::remainder.Scalar", "torchtpu::_append_rows")
    counts = {op: compiles(op) for op in ops}
    assert all(n <= 5 for op, n in counts.items() if op != "torchtpu::_append_rows"), counts  # noqa
    assert counts["torchtpu::_append_rows"] <= 8, counts
    assert fallback_ops() == {}


def test_a_result_over_grown_tensors_is_a_grown_tensor():
    grown = torch.cat([torch.arange(12.0).reshape(2, 6).to("tpu"), torch.ones(2, 1, device="tpu")], 1)
    doubled = grown * 2
    assert doubled.shape == (2, 7) and doubled.is_contiguous()
    assert doubled.untyped_storage().nbytes() == 2 * 16 * 4  # room for 16 rows, as its input has
    longer = torch.cat([doubled, torch.full((2, 1), 5.0, device="tpu")], 1)
    expected = torch.cat([torch.cat([torch.arange(12.0).reshape(2, 6), torch.ones(2, 1)], 1) * 2,
                          torch.full((2, 1), 5.0)], 1)
    assert torch.equal(longer.cpu(), expected)
    assert torch.equal(doubled.view(14).cpu(), expected[:, :7].reshape(14))


def test_calls_that_cannot_run_padded_run_as_shaped():
    base, piece = torch.arange(12.0).reshape(2, 6), torch.ones(2, 1)
    grown = torch.cat([base.to("tpu"), piece.to("tpu")], 1)
    expected = torch.cat([base, piece], 1)
    # A tensor of the same length that has not grown, and one that grew to another length.
    plain = torch.arange(14.0).reshape(2, 7)
    assert torch.equal((grown + plain.to("tpu")).cpu(), expected + plain)
    other = torch.cat([grown, piece.to("tpu")], 1)
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        grown + other
    # Writes into a grown tensor, and reductions that mix rows, keep their shapes too.
    grown.mul_(2)
    assert torch.equal(grown.cpu(), expected * 2)
    assert_close(grown.softmax(-1).cpu(), (expected * 2).softmax(-1))
    assert_close(grown.mean(-1).cpu(), (expected * 2).mean(-1))


def test_indices_past_a_grown_length_raise_as_on_cpu():
    # An index into the grown dim itself is checked against the length, not the capacity.
    grown = torch.cat([torch.arange(12.0).reshape(2, 6).to("tpu"), torch.ones(2, 1, device="tpu")], 1)
    past = torch.full((2, 1), 9, device="tpu")
    with pytest.raises(RuntimeError, match="index 9 is out of bounds for dimension 1 with size 7"):
        grown.gather(1, past).cpu()
    with pytest.raises((IndexError, RuntimeError), match="index out of range in self"):
        grown.index_select(1, torch.tensor([9], device="tpu")).cpu()
    assert torch.equal(grown.gather(1, torch.full((2, 1), 6, device="tpu")).cpu(), torch.ones(2, 1))


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


def first_generate_compiles(inputs: dict, **settings) -> tuple[int, int]:
    """Compiles of two first `generate` calls of a tiny HF Llama on tpu (10, then 90 new tokens), each checked
    token for token against CPU. `inputs`: `generate`'s tensor arguments, on the CPU; `settings`: more of its
    arguments."""
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
        kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, **settings)
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


@pytest.mark.parametrize("setting", [{"repetition_penalty": 1.3}, {"num_beams": 2}])
def test_hf_generate_with_a_penalty_or_beams_compiles_per_bucket_not_per_token(setting):
    # The penalty gathers and scatters the scores at every generated id, and beam search reorders the cache:
    # both read tensors of the growing length.
    torch.manual_seed(1)
    short, long = first_generate_compiles({"input_ids": torch.randint(0, 128, (2, 6)),
                                           "attention_mask": torch.ones(2, 6, dtype=torch.long)}, **setting)
    # Per token, the 80 tokens past the first call's capacity would compile 6-7 programs each (about 500); per
    # capacity the second call compiles the new capacities' few, and beam search's programs for its new length.
    assert long < 90, (short, long)
