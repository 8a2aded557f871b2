"""Inference with transformers on tpu: loading straight onto the device, pipeline, sampling with the device
generator, beam search, saving from tpu, bfloat16 loading. Models and tokenizer are built locally."""
import pytest
import torch

import torchtpu

pytest.importorskip("transformers")

import transformers as hf  # noqa: E402

from torchtpu.testing.hf_models import architectures, word_tokenizer  # noqa: E402

from helpers import fused_rounds_in_threads, run_python  # noqa: E402

ARCHITECTURES = architectures()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A saved tiny Llama with a word-level tokenizer, as a folder from_pretrained and pipeline can read."""
    folder = tmp_path_factory.mktemp("llama")
    ARCHITECTURES["llama"].build().save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    return folder


def prompt():
    return torch.randint(3, 100, (2, 6), generator=torch.Generator().manual_seed(3))


def test_pipeline_text_generation_matches_cpu(llama_dir):
    tpu = hf.pipeline("text-generation", model=str(llama_dir), device="tpu")
    assert tpu.model.device.type == "tpu"
    cpu = hf.pipeline("text-generation", model=str(llama_dir), device="cpu")
    text = "w1 w2 w3 w4"
    assert tpu(text, max_new_tokens=5, do_sample=False) == cpu(text, max_new_tokens=5, do_sample=False)


def test_sampling_uses_the_seeded_device_generator(llama_dir):
    model = hf.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu")
    ids = prompt().to("tpu")
    settings = dict(do_sample=True, max_new_tokens=6, top_k=20, top_p=0.9, temperature=0.8)
    torchtpu.reset_metrics()
    torch.manual_seed(123)
    first = model.generate(ids, **settings).cpu()
    torch.manual_seed(123)
    again = model.generate(ids, **settings).cpu()
    torch.manual_seed(124)
    other = model.generate(ids, **settings).cpu()
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    ops = torchtpu.metrics()["ops"]
    assert ops["aten::multinomial"]["executions"] > 0 and ops["aten::multinomial"]["fallbacks"] == 0


def test_beam_search_matches_cpu(llama_dir, metrics):
    tpu_model = hf.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu")
    cpu_model = hf.AutoModelForCausalLM.from_pretrained(llama_dir)
    settings = dict(num_beams=3, max_new_tokens=5, do_sample=False)
    assert torch.equal(tpu_model.generate(prompt().to("tpu"), **settings).cpu(), cpu_model.generate(prompt(), **settings))
    assert all(s["fallbacks"] == 0 for s in metrics()["ops"].values())


def test_save_pretrained_from_tpu_keeps_tied_weights(tmp_path):
    model = ARCHITECTURES["gpt2"].build().to("tpu")  # GPT-2 ties its LM head to the token embedding
    assert model.lm_head.weight is model.transformer.wte.weight
    with torch.no_grad():
        model.transformer.wte.weight.add_(0.5)  # a change made on the device must reach the file
    model.save_pretrained(tmp_path)
    loaded = hf.GPT2LMHeadModel.from_pretrained(tmp_path, device_map="tpu")
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu()), name


def test_bfloat16_loading(llama_dir):
    model = hf.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu", dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.device.type == "tpu"
    cpu = hf.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.bfloat16)
    ids = prompt()
    with torch.no_grad():
        logits = model(ids.to("tpu")).logits
        # bfloat16 on both sides, summed in different orders: a few bfloat16 ulps at |logit| < 1
        torch.testing.assert_close(logits.cpu(), cpu(ids).logits, atol=2e-2, rtol=0)
        assert torch.equal(model.generate(ids.to("tpu"), max_new_tokens=3, do_sample=False).cpu()[:, :6], ids)


def test_static_cache_generation_compiles_with_the_tpu_backend_and_then_never_again():
    """transformers compiles the decode step with torch.compile(backend="tpu") for a static cache."""
    torch._dynamo.reset()
    model = ARCHITECTURES["llama"].build().eval()
    ids = prompt()
    expected = model.generate(ids, max_new_tokens=8, do_sample=False)
    model.to("tpu")
    # Read before the second call: in fused mode the first call's last ops would otherwise open the second
    # call's first trace, a trace of a new shape.
    first = model.generate(ids.to("tpu"), max_new_tokens=8, do_sample=False, cache_implementation="static").cpu()
    if torchtpu.current_eager_mode() == "fused":  # the eager ops between decode steps compile at a second sight
        model.generate(ids.to("tpu"), max_new_tokens=8, do_sample=False, cache_implementation="static").cpu()
    torchtpu.reset_metrics()
    again = model.generate(ids.to("tpu"), max_new_tokens=8, do_sample=False, cache_implementation="static")
    assert first.tolist() == expected.tolist() == again.cpu().tolist()
    metrics = torchtpu.metrics()
    # The decode steps replayed their captured program; nothing compiled.
    assert metrics["compiled"]["replays"] > 0 and metrics["fused"]["compiles"] == 0
    torch._dynamo.reset()


def test_default_cache_generation_compiles_nothing_the_second_time(llama_dir):
    """A second `generate` with the default dynamic cache runs only programs the first one built (an op whose
    rule makes a scalar a compile-time value, such as RMSNorm's pow(2), files its first program too)."""
    model = hf.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu")
    ids = prompt().to("tpu")
    first = model.generate(ids, max_new_tokens=12, do_sample=False).cpu()
    torchtpu.reset_metrics()
    again = model.generate(ids, max_new_tokens=12, do_sample=False).cpu()
    assert torch.equal(first, again)
    compiled = {op: c["compiles"] for op, c in torchtpu.metrics()["ops"].items() if c["compiles"]}
    assert compiled == {}


def test_threads_serving_generate_in_fused_mode_settle(llama_dir):
    """Two threads answering the same requests at once, in fused mode: each thread records its own trace, so a
    round of requests after the first compiles nothing and every answer is CPU's."""
    model = hf.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu")
    cpu_model = hf.AutoModelForCausalLM.from_pretrained(llama_dir)
    prompts = [prompt()[:1], prompt()[1:]]
    expected = [cpu_model.generate(p, max_new_tokens=8, do_sample=False) for p in prompts]
    wrong = []

    def answer(i):
        got = model.generate(prompts[i].to("tpu"), max_new_tokens=8, do_sample=False).cpu()
        if not torch.equal(got, expected[i]):
            wrong.append((i, got))

    compiles = fused_rounds_in_threads(answer, rounds=3)
    assert wrong == [] and compiles[1:] == [0, 0], (wrong, compiles)


def test_device_map_auto_places_the_model_on_tpu(llama_dir):
    model = hf.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="auto")
    assert {p.device for p in model.parameters()} == {torch.device("tpu", 0)}
    cpu_model = hf.AutoModelForCausalLM.from_pretrained(llama_dir)
    settings = dict(max_new_tokens=5, do_sample=False)
    assert torch.equal(model.generate(prompt().to("tpu"), **settings).cpu(), cpu_model.generate(prompt(), **settings))


def test_max_memory_names_chips_as_tpu_devices(llama_dir):
    with pytest.raises(ValueError, match="tpu:7"):
        hf.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="auto", max_memory={"tpu:7": "1GB"})
    for key in (0, "tpu:0", torch.device("tpu", 0)):
        model = hf.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="auto", max_memory={key: "1GB"})
        assert {p.device for p in model.parameters()} == {torch.device("tpu", 0)}


def test_device_map_auto_splits_layers_over_chips():
    # Four virtual chips in a child process: accelerate balances the layers over them and moves activations
    # between chips, as over several GPUs; a max_memory naming chip 1 alone puts everything there.
    result = run_python("""
        import torch, tempfile, torchtpu, transformers as hf
        from torchtpu.testing.hf_models import architectures
        folder = tempfile.mkdtemp()
        architectures()["llama"].build().save_pretrained(folder)
        cpu_model = hf.AutoModelForCausalLM.from_pretrained(folder)
        ids = torch.randint(3, 100, (2, 6), generator=torch.Generator().manual_seed(3))
        settings = dict(max_new_tokens=5, do_sample=False)
        expected = cpu_model.generate(ids, **settings)
        for device_map in ("auto", "balanced"):
            model = hf.AutoModelForCausalLM.from_pretrained(folder, device_map=device_map)
            chips = {p.device.index for p in model.parameters()}
            assert {p.device.type for p in model.parameters()} == {"tpu"} and len(chips) > 1, chips
            assert torch.equal(model.generate(ids.to("tpu"), **settings).cpu(), expected)
            logits = model(ids.to("tpu")).logits.cpu()
            torch.testing.assert_close(logits, cpu_model(ids).logits, rtol=1e-5, atol=1e-5)
        model = hf.AutoModelForCausalLM.from_pretrained(folder, device_map="auto", max_memory={"tpu:1": "1GB"})
        assert {p.device for p in model.parameters()} == {torch.device("tpu", 1)}
        print("ok")
    """, TORCHTPU_NUM_DEVICES="4")
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
