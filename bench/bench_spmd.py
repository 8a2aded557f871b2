"""Single-controller SPMD (torchtpu.distributed.shard): one process drives 1, 2, 4 and 8 virtual chips of the
CPU plugin; step time and device memory per chip against the chip count, for data parallelism (parameters
replicated, batch split), fully sharded parameters (FSDP-style, every parameter split along its first dim,
batch split) and Megatron tensor parallelism (attention and MLP split, batch whole).

The model is the small GPT of the tests at d 128, 2 layers, context 64, global batch 8, AdamW, strict eager
(every op one partitioned program). Each child process (one per chip count, as the count is fixed when the
plugin starts) times 5 steps after 2 of warm-up (median), counts the programs compiled while timing (0 is
steady state), reads each chip's device memory after the last step (parameters, gradients, AdamW state;
largest chip reported), and times CPU torch on the same step in rounds with it. The virtual chips share this
machine's 2 cores: the step time shows the partitioned programs' overhead, not scaling. Writes
results/bench_spmd.{json,png}.

    .venv/bin/python bench/bench_spmd.py
"""
from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

CHIPS = (1, 2, 4, 8)
STRATEGIES = ("dp", "fsdp", "tp")


def worker(chips: int) -> None:
    import copy

    import torch
    import torch.nn.functional as F

    import torchtpu
    from torchtpu.distributed import Mesh, shard
    from torchtpu.testing.models import SmallGPT

    torch.manual_seed(0)
    reference = SmallGPT(vocab=256, dim=128, heads=4, layers=2, context=64)
    data = torch.randint(0, 256, (8, 65))
    results = {}
    for strategy in STRATEGIES:
        model = copy.deepcopy(reference).to("tpu")
        mesh = Mesh((chips,), ("d",))
        if strategy == "dp":
            for p in model.parameters():
                shard(p, mesh)
        elif strategy == "fsdp":
            for p in model.parameters():
                shard(p, mesh, ("d",) + (None,) * (p.dim() - 1) if p.shape[0] % chips == 0 else None)
        else:
            for block in model.blocks:
                for column in (block.qkv, block.mlp[0]):
                    shard(column.weight, mesh, ("d", None))
                    shard(column.bias, mesh, ("d",))
                for row in (block.proj, block.mlp[2]):
                    shard(row.weight, mesh, (None, "d"))
            for p in model.parameters():
                if torchtpu.distributed.sharding(p) is None:
                    shard(p, mesh)
        batch = shard(data.to("tpu"), mesh, (None, None) if strategy == "tp" else ("d", None))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        cpu_model = copy.deepcopy(reference)
        cpu_optimizer = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3)

        def step(model, optimizer, data) -> float:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
            loss.backward()
            optimizer.step()
            return loss.item()

        for _ in range(2):
            step(model, optimizer, batch)
            step(cpu_model, cpu_optimizer, data)
        torchtpu.reset_metrics()
        tpu_samples, cpu_samples = [], []
        for _ in range(5):  # alternate, so a busy moment hits both
            start = time.perf_counter()
            step(model, optimizer, batch)
            tpu_samples.append(time.perf_counter() - start)
            start = time.perf_counter()
            step(cpu_model, cpu_optimizer, data)
            cpu_samples.append(time.perf_counter() - start)
        metrics = torchtpu.metrics()
        torch.tpu.synchronize()
        memory = [torch.tpu.memory_allocated(d) for d in range(chips)]
        results[strategy] = {"median_ms": statistics.median(tpu_samples) * 1e3,
                             "cpu_median_ms": statistics.median(cpu_samples) * 1e3,
                             "compiles_while_timing": sum(op["compiles"] for op in metrics["ops"].values()),
                             "device_bytes_max": max(memory), "device_bytes_total": sum(memory)}
        del model, optimizer, batch
    print(json.dumps(results))


def main() -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    results = {}
    for chips in CHIPS:
        env = dict(os.environ, TORCHTPU_NUM_DEVICES=str(chips))
        run = subprocess.run([sys.executable, __file__, "--worker", str(chips)], capture_output=True, text=True,
                             env=env, timeout=1800)
        if run.returncode != 0:
            raise SystemExit(f"the {chips}-chip run failed (exit status {run.returncode}):\n{run.stderr[-4000:]}")
        for strategy, r in json.loads(run.stdout.strip().splitlines()[-1]).items():
            results[f"{strategy} x{chips}"] = r
            print(f"  {strategy:4} {chips} chips: step {r['median_ms']:8.1f} ms (CPU torch {r['cpu_median_ms']:6.1f} ms, "
                  f"{r['median_ms'] / r['cpu_median_ms']:5.2f}x), compiles while timing {r['compiles_while_timing']}, "
                  f"device memory per chip {r['device_bytes_max'] / 2**20:6.2f} MiB", flush=True)
    results["1-min load average at the end (2 cpus)"] = float(pathlib.Path("/proc/loadavg").read_text().split()[0])
    write(results)


def write(results: dict) -> None:
    """results/bench_spmd.json, and a figure with one line per strategy against the chip count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from report import RESULTS

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_spmd.json").write_text(json.dumps(results, indent=1))
    fig, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    for strategy in STRATEGIES:
        runs = [results[f"{strategy} x{chips}"] for chips in CHIPS]
        time_ax.plot(CHIPS, [r["median_ms"] for r in runs], marker="o", label=strategy)
        memory_ax.plot(CHIPS, [r["device_bytes_max"] / 2**20 for r in runs], marker="o", label=strategy)
    time_ax.plot(CHIPS, [statistics.median(results[f"{s} x{c}"]["cpu_median_ms"] for s in STRATEGIES) for c in CHIPS],
                 linestyle="--", color="#888", label="CPU torch (1 process)")
    time_ax.set(title="step time, GPT d128, global batch 8", xlabel="chips", ylabel="ms (median)", xticks=CHIPS)
    memory_ax.set(title="device memory of the fullest chip", xlabel="chips", ylabel="MiB", xticks=CHIPS, ylim=(0, None))
    for ax in (time_ax, memory_ax):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "bench_spmd.png", dpi=120)
    plt.close(fig)
    print(f"wrote {RESULTS / 'bench_spmd'}.json and .png")

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]))
    else:
        main()
