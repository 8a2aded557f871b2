"""torch.compile on the loops users run, in one process, alternating in rounds:

- the GPT training step (`workloads.py`: 2 layers, d 128, seq 64, batch 8, default AdamW, clipping): tpu
  with the model and `opt.step` each wrapped in torch.compile ("compiled"), tpu with the whole step function
  compiled ("compiled step"), tpu fused eager, CPU torch eager, and CPU torch.compile (inductor, model and
  `opt.step` compiled); the first step (capture and compile) timed on its own;
- Hugging Face Llama greedy decoding (2 layers, hidden 64): per-token time of `generate` with a static cache
  on tpu (transformers compiles the decode step with backend "tpu") vs the default dynamic cache on tpu
  (fused eager) vs CPU torch.

Caches start empty (fresh folders for tpu's program cache and inductor's), so first steps are cold compiles.
Writes results/bench_compile.{json,png}.

    .venv/bin/python bench/bench_compile.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile
import time

# Cold caches, so the first step shows the whole compile: tpu's program cache and inductor's, in fresh folders.
_CACHES = tempfile.TemporaryDirectory(prefix="bench_compile_")
os.environ["TORCHTPU_CACHE_DIR"] = os.path.join(_CACHES.name, "torchtpu")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHES.name, "inductor")

import torch  # noqa: E402  (after the cache folders are set)

import report  # noqa: E402
import torchtpu  # noqa: E402
from workloads import make_gpt_adamw_step  # noqa: E402

TPU, CPU = torch.device("tpu"), torch.device("cpu")


def run_step(step, fused: bool, on_tpu: bool) -> None:
    """One step, its loss read. On tpu it ends when the device has finished: the loss is ready before the
    optimizer step is, and work still running would take the cores from the next variant's step."""
    if fused:
        with torchtpu.eager_mode("fused"):
            step().item()
    else:
        step().item()
    if on_tpu:
        torch.tpu.synchronize()


def timed(fn, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def gpt(rounds: int) -> dict:
    variants = {  # name -> (step, runs in fused mode)
        "cpu eager": (make_gpt_adamw_step(CPU), False),
        "cpu inductor": (make_gpt_adamw_step(CPU, "inductor"), False),
        "tpu fused eager": (make_gpt_adamw_step(TPU), True),
        "tpu compiled": (make_gpt_adamw_step(TPU, "tpu"), False),
        "tpu compiled step": (make_gpt_adamw_step(TPU, "tpu", whole_step=True), False),
    }
    first = {}
    for name, (step, fused) in variants.items():
        print(f"  first step, {name} ...", flush=True)
        first[name] = timed(lambda: run_step(step, fused, name.startswith("tpu")), 1)[0]
        timed(lambda: run_step(step, fused, name.startswith("tpu")), 3)  # warm-up
    torchtpu.reset_metrics()
    samples = {name: [] for name in variants}
    for r in range(rounds):
        print(f"  round {r + 1}/{rounds}", flush=True)
        for name, (step, fused) in variants.items():
            samples[name] += timed(lambda: run_step(step, fused, name.startswith("tpu")), 5)
    m = torchtpu.metrics()
    return {"median_ms": {k: statistics.median(v) * 1e3 for k, v in samples.items()},
            "first_step_s": first,
            "tpu compiles after warm-up": m["fused"]["compiles"] + sum(op["compiles"] for op in m["ops"].values()),
            "compiled graph replays": m["compiled"]["replays"]}


def llama(rounds: int, new_tokens: int = 16) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(0)
    reference = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 256, (1, 8))
    models = {CPU: reference, TPU: LlamaForCausalLM(config).eval().to(TPU)}
    models[TPU].load_state_dict(reference.state_dict())
    variants = {  # name -> (device, cache implementation, fused)
        "cpu eager": (CPU, None, False),
        "tpu fused eager": (TPU, None, True),
        "tpu compiled (static cache)": (TPU, "static", False),
    }

    def generate(name):
        device, cache, fused = variants[name]
        kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        if cache:
            kwargs["cache_implementation"] = cache
        with torchtpu.eager_mode("fused" if fused else "strict"):
            return models[device].generate(prompt.to(device), **kwargs).cpu()

    first, tokens = {}, {}
    for name in variants:
        print(f"  first generate, {name} ...", flush=True)
        start = time.perf_counter()
        tokens[name] = generate(name).tolist()
        first[name] = time.perf_counter() - start
        generate(name)
    samples = {name: [] for name in variants}
    for r in range(rounds):
        for name in variants:
            samples[name] += timed(lambda: generate(name), 2)
    return {"median_ms_per_token": {k: statistics.median(v) * 1e3 / new_tokens for k, v in samples.items()},
            "first_generate_s": first, "same tokens as cpu": {k: v == tokens["cpu eager"] for k, v in tokens.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    print("GPT AdamW+clip training step:", flush=True)
    results = {"gpt AdamW+clip step": gpt(args.rounds)}
    print("HF Llama greedy decoding:", flush=True)
    results["llama decode"] = llama(args.rounds)
    results["1-min load average at the end (2 cpus)"] = float(pathlib.Path("/proc/loadavg").read_text().split()[0])

    g = results["gpt AdamW+clip step"]
    med = g["median_ms"]
    print(f"\nGPT step, median ms (first step in s):")
    for name, ms in med.items():
        print(f"  {name:18} {ms:8.2f} ms  {ms / med['cpu eager']:5.2f}x cpu eager  "
              f"{ms / med['cpu inductor']:5.2f}x inductor   first {g['first_step_s'][name]:.1f} s")
    print(f"  tpu compiles after warm-up: {g['tpu compiles after warm-up']}, "
          f"compiled graph replays: {g['compiled graph replays']}")
    h = results["llama decode"]
    print("HF Llama decoding, median ms per token (first generate in s):")
    for name, ms in h["median_ms_per_token"].items():
        print(f"  {name:28} {ms:7.2f} ms  {ms / h['median_ms_per_token']['cpu eager']:5.2f}x cpu   "
              f"first {h['first_generate_s'][name]:.1f} s   same tokens: {h['same tokens as cpu'][name]}")
    print(f"1-min load average at the end: {results['1-min load average at the end (2 cpus)']} on 2 cpus")

    report.write("bench_compile", results, [
        ("GPT AdamW+clip training step", "ms per step (median)", med),
        ("HF Llama greedy decoding", "ms per token (median)", h["median_ms_per_token"]),
    ])

if __name__ == "__main__":
    main()
