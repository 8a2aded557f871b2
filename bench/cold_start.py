"""Cold vs warm start: time from process start to the end of the first GPT training step (`workloads.py`,
default AdamW + clipping) with an empty disk program cache and with the cache a previous process filled.
Rounds alternate cold and warm in fresh processes; prints medians and their ratio, writes
results/cold_start.{json,png}.

    .venv/bin/python bench/cold_start.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CHILD = """
import time, json, sys
start = time.perf_counter()
import torch, torchtpu
sys.path.insert(0, {bench!r})
from workloads import make_gpt_adamw_step
step = make_gpt_adamw_step(torch.device("tpu"))
step().item()
s = torchtpu.cache.stats()
print(json.dumps({{"seconds": time.perf_counter() - start, "hits": s["hits"], "misses": s["misses"]}}))
"""


def first_step(cache_dir: str) -> dict:
    env = dict(os.environ, TORCHTPU_CACHE_DIR=cache_dir)
    done = subprocess.run([sys.executable, "-c", CHILD.format(bench=str(HERE))], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cold, warm = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache_dir:
            cold.append(first_step(cache_dir))
            warm.append(first_step(cache_dir))
        print(f"round {r + 1}/{args.rounds}: cold {cold[-1]['seconds']:.2f} s ({cold[-1]['misses']} compiled), "
              f"warm {warm[-1]['seconds']:.2f} s ({warm[-1]['hits']} loaded, {warm[-1]['misses']} compiled)",
              flush=True)
    cold_median = statistics.median(c["seconds"] for c in cold)
    warm_median = statistics.median(w["seconds"] for w in warm)
    print(f"\nfirst GPT step in a fresh process: cold {cold_median:.2f} s, warm {warm_median:.2f} s, "
          f"warm / cold = {warm_median / cold_median:.3f}")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "cold_start.json").write_text(json.dumps({"cold": cold, "warm": warm}, indent=1))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(["empty cache", "filled cache"], [cold_median, warm_median], color=["#c44", "#4a4"])
    ax.set_ylabel("seconds to end of first step")
    ax.set_title(f"GPT first training step, fresh process (warm/cold {warm_median / cold_median:.2f})")
    fig.tight_layout()
    fig.savefig(out / "cold_start.png", dpi=120)


if __name__ == "__main__":
    main()
