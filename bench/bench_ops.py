"""Per-op latency of the ``tpu`` device against CPU torch, measured in one process.

Benchmarks: a 16-element add (dispatch overhead dominates), a 256x256 matmul (some real compute)
and one training step of a small MLP (many small ops, autograd and the optimizer).

Timing method: every timed iteration ends with ``torch.tpu.synchronize()`` on tpu (a no-op on CPU),
so each sample is the full latency of one iteration, queueing and execution included. The device
runs asynchronously; without the sync we would only time how fast work is enqueued. After warm-up,
cpu and tpu are timed in alternating rounds and the ratio is tpu median / cpu median.

Run:  .venv/bin/python bench/bench_ops.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

import torchtpu
from torchtpu.metrics import fallback_ops
from workloads import make_gpt_adamw_step, make_kv_cache_sweep, make_llama_generate, make_mlp_adamw_cosine_step

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROUNDS = 10  # cpu and tpu alternate this many times within each benchmark

# One timed iteration; returns its result.
Step = Callable[[], torch.Tensor]


@dataclass
class Timing:
    median_us: float
    min_us: float
    p90_us: float
    first_call_us: float  # includes compilation on tpu; not part of the median
    first_call_compiles: int  # tpu programs compiled by the first call
    timed_compiles: int  # tpu programs compiled while timing (always 0 for cpu); 0 = all cache hits
    peak_device_mib: float  # tpu: peak live device memory while timing (0 for cpu)
    samples_us: list[float]


@dataclass
class Benchmark:
    name: str
    make: Callable[[torch.device], Step]  # builds inputs on the device, returns one iteration
    reps: int


def make_add(device: torch.device) -> Step:
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)

    def step() -> torch.Tensor:
        return torch.add(a, b)

    return step


def make_matmul(device: torch.device) -> Step:
    a = torch.randn(256, 256, device=device)
    b = torch.randn(256, 256, device=device)

    def step() -> torch.Tensor:
        return torch.mm(a, b)

    return step


def make_mlp_step(device: torch.device) -> Step:
    torch.manual_seed(0)  # same initial weights on both devices
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 64).to(device)
    y = torch.randn(32, 10).to(device)

    def step() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def make_matmul_n(n: int, dtype: torch.dtype) -> Callable[[torch.device], Step]:
    def make(device: torch.device) -> Step:
        a = torch.randn(n, n).to(device=device, dtype=dtype)
        b = torch.randn(n, n).to(device=device, dtype=dtype)
        return lambda: torch.mm(a, b)

    return make


def make_conv2d(device: torch.device) -> Step:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(32, 64, 3, padding=1).to(device)
    x = torch.randn(8, 32, 32, 32).to(device)
    return lambda: conv(x)


def make_softmax(device: torch.device) -> Step:
    x = torch.randn(512, 1024).to(device)
    return lambda: torch.softmax(x, dim=-1)


def make_layernorm(device: torch.device) -> Step:
    norm = torch.nn.LayerNorm(1024).to(device)
    x = torch.randn(512, 1024).to(device)
    return lambda: norm(x)


def make_attention(seq: int) -> Callable[[torch.device], Step]:
    def make(device: torch.device) -> Step:
        q, k, v = (torch.randn(4, 8, seq, 64).to(device) for _ in range(3))
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return make


def suites(scale: int) -> dict[str, list[Benchmark]]:
    """Named groups of benchmarks; `scale` divides the repetitions (for --quick)."""
    return {
        "ops": [
            Benchmark("add 16 f32", make_add, 5000 // scale),
            Benchmark("matmul 256x256 f32", make_matmul, 1000 // scale),
            Benchmark("mlp train step", make_mlp_step, 1000 // scale),
        ],
        "families": [
            Benchmark("matmul 256 f32", make_matmul_n(256, torch.float32), 500 // scale),
            Benchmark("matmul 1024 f32", make_matmul_n(1024, torch.float32), 50 // scale),
            Benchmark("matmul 1024 bf16", make_matmul_n(1024, torch.bfloat16), 20 // scale),
            Benchmark("conv2d 8x32x32x32 3x3", make_conv2d, 50 // scale),
            Benchmark("softmax 512x1024", make_softmax, 200 // scale),
            Benchmark("layernorm 512x1024", make_layernorm, 200 // scale),
            Benchmark("attention T=128", make_attention(128), 50 // scale),
            Benchmark("attention T=512", make_attention(512), 20 // scale),
        ],
        "loops": [
            Benchmark("gpt AdamW+clip step", make_gpt_adamw_step, 60 // scale),
            Benchmark("mlp AdamW+cosine step", make_mlp_adamw_cosine_step, 500 // scale),
            Benchmark("kv-cache 256 writes", make_kv_cache_sweep, 20 // scale),
            Benchmark("llama generate 32", make_llama_generate(32), 20 // scale),
        ],
    }


def synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "tpu":
        return torch.tpu.synchronize
    return lambda: None  # CPU torch ops are synchronous


def compiles() -> int:
    """Total tpu program compilations so far (torchtpu's counters; CPU ops never change it)."""
    return sum(op["compiles"] for op in torchtpu.metrics()["ops"].values())


def warm_up(step: Step, sync: Callable[[], None], iters: int) -> tuple[float, int]:
    """Runs ``1 + iters`` iterations that are not sampled; returns the first one's latency in µs and the
    programs it compiled."""
    compiles_before = compiles()
    t0 = time.perf_counter_ns()
    step()
    sync()
    first_call_ns = time.perf_counter_ns() - t0
    first_call_compiles = compiles() - compiles_before
    # More than one warm-up call: the optimizer's momentum buffers are created on the first step, so
    # the second step runs (and compiles) different programs from the first.
    for _ in range(iters):
        step()
    sync()
    return first_call_ns / 1e3, first_call_compiles


def time_iters(step: Step, sync: Callable[[], None], n: int) -> list[float]:
    """Latency in µs of each of ``n`` iterations, each ended by ``sync``."""
    samples_ns = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        step()
        sync()  # waits for all queued work, so the sample is the work's latency, not its enqueue
        samples_ns.append(time.perf_counter_ns() - t0)
    return [ns / 1e3 for ns in samples_ns]


def summarize(samples_us: list[float], first_call: tuple[float, int], timed_compiles: int,
              peak_device_mib: float = 0.0) -> Timing:
    return Timing(
        median_us=statistics.median(samples_us),
        min_us=min(samples_us),
        p90_us=statistics.quantiles(samples_us, n=10)[-1],
        first_call_us=first_call[0],
        first_call_compiles=first_call[1],
        peak_device_mib=peak_device_mib,
        timed_compiles=timed_compiles,
        samples_us=samples_us,
    )


def measure(bench: Benchmark, warmup: int) -> tuple[Timing, Timing]:
    """CPU and tpu timings of ``bench``, ``bench.reps`` samples each.

    The two devices are timed in alternating rounds rather than one after the other, so a burst of
    load from elsewhere on the machine hits both and skews the ratio less.
    """
    devices = [torch.device("cpu"), torch.device("tpu")]
    steps = [bench.make(d) for d in devices]
    syncs = [synchronizer(d) for d in devices]
    first_calls = [warm_up(step, sync, warmup) for step, sync in zip(steps, syncs)]

    compiles_before = compiles()
    torch.tpu.reset_peak_memory_stats()
    samples: list[list[float]] = [[], []]
    per_round = max(1, bench.reps // ROUNDS)
    for _ in range(ROUNDS):
        for dev_samples, step, sync in zip(samples, steps, syncs):
            dev_samples += time_iters(step, sync, per_round)
    timed_compiles = compiles() - compiles_before

    cpu_t = summarize(samples[0], first_calls[0], 0)
    tpu_t = summarize(samples[1], first_calls[1], timed_compiles, torch.tpu.max_memory_allocated() / 2**20)
    return cpu_t, tpu_t


def run(benchmarks: list[Benchmark], warmup: int) -> list[dict]:
    results = []
    for i, bench in enumerate(benchmarks, 1):
        print(f"[{i}/{len(benchmarks)}] {bench.name}: {bench.reps} reps per device ...", flush=True)
        cpu_t, tpu_t = measure(bench, warmup)
        results.append(
            {
                "name": bench.name,
                "reps": len(cpu_t.samples_us),
                "cpu": asdict(cpu_t),
                "tpu": asdict(tpu_t),
                "ratio_tpu_over_cpu": tpu_t.median_us / cpu_t.median_us,
            }
        )
        if tpu_t.timed_compiles:
            print(f"  warning: {tpu_t.timed_compiles} tpu compiles in the timed loop; raise warmup")
    return results


def print_table(results: list[dict]) -> None:
    header = (f"{'benchmark':<24} {'cpu median (µs)':>16} {'tpu median (µs)':>16} {'tpu/cpu':>9}"
              f" {'tpu 1st call (ms)':>18} {'1st-call compiles':>18} {'timed compiles':>15} {'tpu peak (MiB)':>15}")
    print()
    print(header)
    print("-" * len(header))
    for r in results:
        tpu = r["tpu"]
        print(
            f"{r['name']:<24} {r['cpu']['median_us']:>16.1f} {tpu['median_us']:>16.1f}"
            f" {r['ratio_tpu_over_cpu']:>8.2f}x {tpu['first_call_us'] / 1e3:>18.1f} {tpu['first_call_compiles']:>18}"
            f" {tpu['timed_compiles']:>15} {tpu['peak_device_mib']:>15.1f}"
        )


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # headless: write a file, never open a window
    import matplotlib.pyplot as plt

    names = [r["name"] for r in results]
    cpu = [r["cpu"]["median_us"] for r in results]
    tpu = [r["tpu"]["median_us"] for r in results]
    xs = range(len(results))
    width = 0.38

    fig, ax = plt.subplots(figsize=(8, 4.8))
    series = ((-width / 2, cpu, "cpu (torch)"), (width / 2, tpu, "tpu (torchtpu)"))
    for offset, values, label in series:
        bars = ax.bar([x + offset for x in xs], values, width, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("median latency (µs, log scale)")
    ax.set_xticks(list(xs), names)
    ax.set_title("Median per-iteration latency, tpu vs cpu (same process)")
    # Log axis: the bottom well below the smallest bar so it stays visible, headroom for the labels.
    ax.set_ylim(min(cpu + tpu) / 4, max(cpu + tpu) * 8)
    for x, r, c, t in zip(xs, results, cpu, tpu):
        ax.annotate(
            f"tpu/cpu = {r['ratio_tpu_over_cpu']:.2f}x",
            (x, max(c, t) * 2.2),
            ha="center",
            fontsize=9,
            fontweight="bold",
        )
    ax.legend(loc="upper left")
    ax.grid(axis="y", which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="10x fewer repetitions and fewer warm-ups (smoke run)"
    )
    parser.add_argument("--suite", choices=["ops", "families", "loops"], default="ops",
                        help="ops: per-op overhead and a training step; families: matmul, conv, softmax, "
                        "layernorm, attention at a few sizes; loops: the training and decode loops users run "
                        "(bench/workloads.py)")
    args = parser.parse_args()

    scale = 10 if args.quick else 1
    warmup = 3 if args.quick else 10
    benchmarks = [b for b in suites(scale)[args.suite] if b.reps > 0]

    # Other processes compete with both torch's and the PJRT plugin's threads; keep the load average
    # from before the run (during it, it counts this process too) so a contended run shows.
    load = os.getloadavg()[0]
    start = time.perf_counter()
    results = run(benchmarks, warmup)
    elapsed = time.perf_counter() - start
    print_table(results)
    # An op that fell back to CPU would make the tpu numbers measure something else.
    fallbacks = fallback_ops()
    if fallbacks:
        print(f"warning: tpu ops that ran through the CPU fallback: {fallbacks}")

    RESULTS_DIR.mkdir(exist_ok=True)
    report = {
        "meta": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "loadavg_1min_before": load,
            "plugin": torchtpu.plugin_info(),
            "quick": args.quick,
            "warmup_iters": warmup,
            "timing": "per-iteration perf_counter_ns; torch.tpu.synchronize() ends each tpu iteration;"
            f" cpu and tpu alternate in {ROUNDS} rounds",
            "wall_s": elapsed,
            "tpu_cpu_fallbacks": fallbacks,
        },
        "results": results,
    }
    json_path = RESULTS_DIR / f"bench_{args.suite}.json"
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    png_path = RESULTS_DIR / f"bench_{args.suite}.png"
    plot(results, png_path)
    print(f"\n{elapsed:.1f} s of benchmarking; 1-min load average before it: {load:.2f}"
          f" on {os.cpu_count()} cpus")
    print(f"wrote {json_path} and {png_path}")


if __name__ == "__main__":
    main()
