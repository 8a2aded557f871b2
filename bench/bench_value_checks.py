"""What device-side value checks cost on the GPT training step (`workloads.py`: 2 layers, d 128, AdamW,
clipping, cross entropy; its embedding and nll_loss, forward and backward, check their indices and
targets): checks on and off, alternating in rounds in one process (a round: --steps steps with checks on
and as many off, the order alternating), in strict and fused mode, with `.item()` on the loss every step
(the sync point that reads the checks). Reports the median step per setting and the quartiles of the
per-round difference, which cancels most of a shared machine's drift. Writes results/bench_value_checks.json.

    .venv/bin/python bench/bench_value_checks.py [--rounds 300] [--steps 1]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

import torch

import torchtpu
from workloads import make_gpt_adamw_step

HERE = pathlib.Path(__file__).resolve().parent


def timed(step, mode, checks, n):
    samples = []
    with torchtpu.eager_mode(mode), torchtpu.value_checks(checks):
        for _ in range(n):
            start = time.perf_counter()
            step().item()
            samples.append(time.perf_counter() - start)
    return samples


def isolated_cost_us(rounds=40, n=50):
    """The checks alone: an embedding lookup and a cross entropy (two checked ops) and the `.item()` that
    reads the checks, on and off, in alternating blocks; medians per setting."""
    weight = torch.randn(256, 128, device="tpu")
    tokens = torch.randint(0, 256, (8, 64), device="tpu")
    logits, targets = torch.randn(512, 256, device="tpu"), torch.randint(0, 256, (512,), device="tpu")

    def block(checks, count):
        samples = []
        with torchtpu.value_checks(checks):
            for _ in range(count):
                start = time.perf_counter()
                (torch.nn.functional.embedding(tokens, weight).sum()
                 + torch.nn.functional.cross_entropy(logits, targets)).item()
                samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    for checks in (True, False) * 2:
        block(checks, 5)
    medians = {True: [], False: []}
    for r in range(rounds):
        for checks in ((True, False) if r % 2 == 0 else (False, True)):
            medians[checks].append(block(checks, n))
    return {checks: statistics.median(v) * 1e6 for checks, v in medians.items()}


def quartiles(values):
    v = sorted(values)
    return v[len(v) // 4], statistics.median(v), v[3 * len(v) // 4]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--steps", type=int, default=1, help="steps per round and setting")
    args = parser.parse_args()
    torch.set_num_threads(2)
    load_before = os.getloadavg()
    results = {"rounds": args.rounds, "steps_per_round": args.steps}
    for mode in ("strict", "fused"):
        step = make_gpt_adamw_step(torch.device("tpu"))
        for checks in (True, False) * 2:
            timed(step, mode, checks, 3)  # warm-up: each setting compiles its programs once
        samples = {True: [], False: []}
        differences = []  # per round: checks on minus off (medians of its steps)
        for r in range(args.rounds):
            # Alternate which setting goes first, so a drift in machine load hits both alike.
            medians = {}
            for checks in ((True, False) if r % 2 == 0 else (False, True)):
                s = timed(step, mode, checks, args.steps)
                samples[checks] += s
                medians[checks] = statistics.median(s)
            differences.append((medians[True] - medians[False]) * 1e3)
        on, off = statistics.median(samples[True]) * 1e3, statistics.median(samples[False]) * 1e3
        q1, diff, q3 = quartiles(differences)
        results[mode] = {"median_ms_checks_on": on, "median_ms_checks_off": off,
                         "round_difference_ms_quartiles": [q1, diff, q3], "overhead": diff / off}
        print(f"{mode:6} median step: checks on {on:6.2f} ms, off {off:6.2f} ms; per-round difference on - off: "
              f"median {diff:+.3f} ms ({100 * diff / off:+.1f}%), quartiles [{q1:+.2f}, {q3:+.2f}] ms", flush=True)
    isolated = isolated_cost_us()
    results["isolated_us"] = {"checks_on": isolated[True], "checks_off": isolated[False]}
    print(f"isolated: embedding + cross_entropy + .item(): checks on {isolated[True]:.0f} us, off "
          f"{isolated[False]:.0f} us ({isolated[True] - isolated[False]:+.0f} us)")
    results["loadavg_before"] = load_before
    results["loadavg_after"] = os.getloadavg()
    print(f"load average (1, 5, 15 min) before {load_before}, after {results['loadavg_after']} on "
          f"{os.cpu_count()} cpus")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_value_checks.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {out / 'bench_value_checks.json'}")


if __name__ == "__main__":
    main()
