"""Soak: many training steps of the small GPT in strict and fused mode, each mode in a fresh process,
sampling host memory (RSS), device memory (`torch.tpu.memory_allocated`), the step time and the programs
compiled every K steps. After warm-up both memories must stay flat and nothing may compile. Writes
`<out>/soak.json` and `<out>/soak.png` (default `bench/results/`).

    nice .venv/bin/python bench/soak.py [--steps 10000] [--every 100] [--warmup N] [--out DIR] [--check]

The model is `torchtpu.testing.models.SmallGPT` (2 layers, d 32, context 16), batch 8 of fresh random
tokens uploaded every step, AdamW with a cosine learning-rate schedule (a new learning rate every step)
and gradient clipping. `--check` exits 1 when memory grows or programs compile after warm-up.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
MODES = ("strict", "fused")
# Host memory after warm-up may drift by allocator noise, not grow with the steps: the fitted growth over
# the measured steps stays under this many MiB (the process holds some 450-650 MiB: torch, the plugin).
RSS_GROWTH_LIMIT_MIB = 8.0
# Device memory after warm-up moves only with the per-thread cache of scalar operands (aten/
# scalar_operands.cc): a changing value (the scheduled learning rate, Adam's bias corrections) adds an
# 8-byte buffer until 1024 are held, then the cache starts over. Two threads dispatch (main, autograd).
DEVICE_DRIFT_LIMIT_BYTES = 2 * 1024 * 8


def rss_mib() -> float:
    pages = int(pathlib.Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def soak_one_mode(mode: str, steps: int, every: int) -> list[dict]:
    """Runs in the child process: the training loop in `mode`, one sample every `every` steps."""
    import torch
    import torch.nn.functional as F

    import torchtpu
    from torchtpu.testing.models import SmallGPT, train_step

    torch.manual_seed(0)
    model = SmallGPT().to("tpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    data = torch.Generator().manual_seed(1)

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def compiles() -> int:
        m = torchtpu.metrics()
        return sum(op["compiles"] for op in m["ops"].values()) + m["fused"]["compiles"]

    samples, times = [], []
    with torchtpu.eager_mode(mode):
        for step in range(1, steps + 1):
            tokens = torch.randint(0, 64, (8, 17), generator=data)
            start = time.perf_counter()
            x, y = tokens[:, :-1].to("tpu"), tokens[:, 1:].to("tpu")
            loss = train_step(model, optimizer, loss_fn, x, y, clip=1.0, scheduler=scheduler)
            if step % every == 0 or step == 1:
                value = loss.item()  # the sync point a training loop logs at
                times.append(time.perf_counter() - start)
                samples.append({"step": step, "rss_mib": rss_mib(), "device_bytes": torch.tpu.memory_allocated(),
                                "step_ms": statistics.median(times) * 1e3, "compiles": compiles(), "loss": value})
                times = []
            else:
                times.append(time.perf_counter() - start)
    return samples


def slope_per_1000(samples: list[dict], key: str) -> float:
    """Least-squares slope of samples[key] against the step, per 1000 steps."""
    xs = [s["step"] for s in samples]
    ys = [s[key] for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def summarize(samples: list[dict], warmup: int) -> dict:
    after = [s for s in samples if s["step"] >= warmup]
    span = after[-1]["step"] - after[0]["step"]
    rss_slope = slope_per_1000(after, "rss_mib")
    return {
        "steps": samples[-1]["step"],
        "warmup": warmup,
        "rss_mib_first": samples[0]["rss_mib"],
        "rss_mib_after_warmup": after[0]["rss_mib"],
        "rss_mib_end": samples[-1]["rss_mib"],
        "rss_mib_per_1000_steps": rss_slope,
        "rss_fitted_growth_mib": rss_slope * span / 1000,
        "device_bytes_after_warmup": after[0]["device_bytes"],
        "device_bytes_end": samples[-1]["device_bytes"],
        "device_bytes_range_after_warmup": max(s["device_bytes"] for s in after) - min(s["device_bytes"] for s in after),
        "compiles_after_warmup": samples[-1]["compiles"] - after[0]["compiles"],
        "step_ms_median_after_warmup": statistics.median(s["step_ms"] for s in after),
        "step_ms_median_last_tenth": statistics.median(s["step_ms"] for s in after[-max(1, len(after) // 10):]),
        "loss_first": samples[0]["loss"],
        "loss_end": samples[-1]["loss"],
    }


def problems(summary: dict) -> list[str]:
    found = []
    if summary["compiles_after_warmup"]:
        found.append(f"{summary['compiles_after_warmup']} programs compiled after warm-up")
    if summary["device_bytes_range_after_warmup"] > DEVICE_DRIFT_LIMIT_BYTES:
        found.append(f"device memory moved by {summary['device_bytes_range_after_warmup']} bytes after warm-up")
    if summary["rss_fitted_growth_mib"] > RSS_GROWTH_LIMIT_MIB:
        found.append(f"host memory grew {summary['rss_fitted_growth_mib']:.1f} MiB after warm-up")
    return found


def plot(results: dict, path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for mode, run in results["modes"].items():
        steps = [s["step"] for s in run["samples"]]
        axes[0].plot(steps, [s["rss_mib"] for s in run["samples"]], label=mode)
        axes[1].plot(steps, [s["device_bytes"] / 2**20 for s in run["samples"]], label=mode)
        axes[2].plot(steps, [s["step_ms"] for s in run["samples"]], label=mode)
    for ax, title in zip(axes, ("host memory (RSS, MiB)", "device memory allocated (MiB)",
                                f"step time (ms, median of {results['every']})")):
        ax.set_title(title)
        ax.set_xlabel("training step")
        ax.axvline(results["warmup"], color="#999", linestyle=":", linewidth=1)
        ax.legend()
    # The first sample (step 1, compiling every program) would flatten the rest: the axis stops at 3x the
    # slowest median after warm-up.
    slowest = max(run["summary"]["step_ms_median_after_warmup"] for run in results["modes"].values())
    axes[2].set_ylim(0, 3 * slowest)
    fig.suptitle(f"small GPT, {results['steps']} AdamW steps per mode (warm-up to the dotted line)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--warmup", type=int, help="steps before the flatness checks (default: a tenth, at least 50)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    parser.add_argument("--check", action="store_true", help="exit 1 if memory grows or programs compile after warm-up")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(soak_one_mode(args.child, args.steps, args.every)))
        return 0

    warmup = args.warmup if args.warmup is not None else max(50, args.steps // 10)
    results = {"steps": args.steps, "every": args.every, "warmup": warmup, "modes": {}}
    failed = False
    for mode in args.modes:
        started = time.time()
        child = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(args.steps),
                                "--every", str(args.every)], capture_output=True, text=True)
        if child.returncode != 0:
            print(child.stderr[-3000:], file=sys.stderr)
            return 1
        samples = json.loads(child.stdout.strip().splitlines()[-1])
        summary = summarize(samples, warmup)
        summary["wall_s"] = time.time() - started
        results["modes"][mode] = {"summary": summary, "samples": samples}
        found = problems(summary)
        failed |= bool(found)
        print(f"{mode}: {summary['steps']} steps in {summary['wall_s']:.0f} s; RSS {summary['rss_mib_first']:.0f} -> "
              f"{summary['rss_mib_after_warmup']:.0f} (warm) -> {summary['rss_mib_end']:.0f} MiB, "
              f"{summary['rss_mib_per_1000_steps']:+.2f} MiB/1000 steps after warm-up; device "
              f"{summary['device_bytes_after_warmup']} -> {summary['device_bytes_end']} bytes; step "
              f"{summary['step_ms_median_after_warmup']:.2f} ms median ({summary['step_ms_median_last_tenth']:.2f} "
              f"in the last tenth); {summary['compiles_after_warmup']} compiles after warm-up; loss "
              f"{summary['loss_first']:.3f} -> {summary['loss_end']:.3f}" + (f"; PROBLEMS: {found}" if found else ""),
              flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results["load_average"] = pathlib.Path("/proc/loadavg").read_text().split()[:3]
    (args.out / "soak.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "soak.png")
    print(f"wrote {args.out / 'soak.json'} and {args.out / 'soak.png'}")
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
