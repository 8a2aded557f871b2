"""Eager modes on the loops users run: the GPT training step (`workloads.py`: 2 layers, d 128, AdamW,
clipping; the loss read every step, and every 10 steps as a loop that logs now and then does), the tiny
MLP step (AdamW + cosine schedule) and HF Llama greedy `generate` of 32 tokens (later calls), strict vs
fused on tpu vs CPU torch, alternating in rounds in one process. Also a 100-step run per mode counting
compiles and cache hits after warm-up, and the cost of one tiny op. Writes results/bench_modes.{json,png}.

    .venv/bin/python bench/bench_modes.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import time

import torch

import report
import torchtpu
from workloads import make_gpt_adamw_step, make_llama_generate, make_mlp_adamw_cosine_step

MODES = ("strict", "fused")


def timed(step, mode, n, read_every=1):
    """Seconds per step, its result read every `read_every` steps, as a loop that logs does. Each sample ends
    when the device has finished: reading the loss waits only for the forward pass, and a backward pass and
    optimizer step still running on tpu would take the cores from the CPU torch round that follows."""
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        with torchtpu.eager_mode(mode if mode != "cpu" else torchtpu.current_eager_mode()):
            for _ in range(read_every - 1):
                step()
            step().cpu()
            if mode != "cpu":
                torch.tpu.synchronize()
        samples.append((time.perf_counter() - start) / read_every)
    return samples


def compiles():
    m = torchtpu.metrics()
    return sum(op["compiles"] for op in m["ops"].values()) + m["fused"]["compiles"]


def hundred_steps(make, mode):
    step = make(torch.device("tpu"))
    with torchtpu.eager_mode(mode):
        # Warm-up: the first step's trace (new optimizer state) differs from the rest; fused mode compiles the
        # step's program when its trace shape comes a second time (docs/modes.md), at step 3.
        for _ in range(3):
            step().item()
        torchtpu.reset_metrics()
        for _ in range(100):
            step().item()
    m = torchtpu.metrics()
    hits = sum(op["cache_hits"] for op in m["ops"].values())
    lookups = hits + sum(op["compiles"] for op in m["ops"].values())
    return {"compiles_after_warmup": compiles(), "op_cache_hit_rate": hits / max(lookups, 1),
            "fused_programs_run": m["fused"]["programs_run"], "flushes": m["fused"]["flushes"]}


def tiny_op_us(mode, chunks=8, chunk=500):
    """One `x + y` of 16 floats, per op. Every mode runs the same loop: chunks of 500 adds, each chunk
    ending with a call (fused: the flush that runs the recorded adds; elsewhere a no-op)."""
    x = torch.ones(16, device="tpu") if mode != "cpu" else torch.ones(16)
    y = x.clone()
    end_chunk = torchtpu.eager.flush if mode == "fused" else (lambda: None)

    def loop():
        for _ in range(chunks):
            for _ in range(chunk):
                x + y
            end_chunk()
        if mode != "cpu":
            torch.tpu.synchronize()

    with torchtpu.eager_mode(mode if mode != "cpu" else "strict"):
        loop()  # warm-up: the fused program of 500 adds compiles here (at the second chunk)
        start = time.perf_counter()
        loop()
    return (time.perf_counter() - start) / (chunks * chunk) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    results = {}
    loops = (("gpt AdamW+clip step", make_gpt_adamw_step, 4, 1),
             ("gpt step, loss read every 10", make_gpt_adamw_step, 1, 10),
             ("mlp AdamW+cosine step", make_mlp_adamw_cosine_step, 40, 1),
             ("llama generate 32 tokens", make_llama_generate(32), 1, 1))
    for name, make, reps, read_every in loops:
        print(f"{name}: {args.rounds} rounds of {reps * read_every} steps per mode ...", flush=True)
        steps = {m: make(torch.device("tpu")) for m in MODES}
        steps["cpu"] = make(torch.device("cpu"))
        for m in steps:
            timed(steps[m], m, 3)  # warm-up
        samples = {m: [] for m in steps}
        for _ in range(args.rounds):
            for m in steps:
                samples[m] += timed(steps[m], m, reps, read_every)
        medians = {m: statistics.median(v) * 1e6 for m, v in samples.items()}
        results[name] = {"median_us": medians}
        if "step" in name and read_every == 1:
            results[name].update({f"{m} 100 steps": hundred_steps(make, m) for m in MODES})
    tiny = {m: [] for m in ("cpu", "strict", "fused")}
    for _ in range(args.rounds):
        for m in tiny:
            tiny[m].append(tiny_op_us(m))
    results["tiny add 16 f32 (µs)"] = {m: statistics.median(v) for m, v in tiny.items()}
    load = pathlib.Path("/proc/loadavg").read_text().split()[0]
    print(f"\n{'benchmark':28} {'cpu (µs)':>10} {'strict (µs)':>12} {'fused (µs)':>11} {'fused/strict':>13} "
          f"{'fused/cpu':>10}")
    for name, *_ in loops:
        m = results[name]["median_us"]
        print(f"{name:28} {m['cpu']:10.0f} {m['strict']:12.0f} {m['fused']:11.0f} {m['fused'] / m['strict']:12.2f}x "
              f"{m['fused'] / m['cpu']:9.2f}x")
        for mode in MODES:
            if mode + " 100 steps" in results[name]:
                print(f"    {mode} 100 steps after warm-up: {results[name][mode + ' 100 steps']}")
    t = results["tiny add 16 f32 (µs)"]
    print(f"tiny add: cpu {t['cpu']:.2f} µs, strict {t['strict']:.2f} µs, fused (recorded) {t['fused']:.2f} µs")
    print(f"1-min load average at the end: {load} on 2 cpus")
    report.write("bench_modes", results, [
        (name, "ms per step (median)", {"cpu torch": results[name]["median_us"]["cpu"] / 1e3,
                                        "tpu strict": results[name]["median_us"]["strict"] / 1e3,
                                        "tpu fused": results[name]["median_us"]["fused"] / 1e3})
        for name, *_ in loops])

if __name__ == "__main__":
    main()
