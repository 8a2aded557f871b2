"""Builds docs/tpu_readiness.md and its figure: per workload and topology, the programs checked and accepted,
flops, bytes and HBM peaks from the TPU compiler, and a roofline step-time estimate from the chip's published
peak bf16 FLOP/s and HBM bandwidth, against the same step timed on the plugin torchtpu runs here.

    python -m torchtpu.aot report [--out docs/tpu_readiness.md] [--workload mlp,gpt] [--topology v5e:2x2]

Each workload runs in a fresh process (so every program it uses is built, and so recorded, there) under a
dispatch mode that counts the op calls of one steady-state step; each call is matched to the programs its
first occurrence built, which gives how often each program runs per step.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

# Published per-chip figures, from Google Cloud's TPU v6e page, which tabulates v5e beside v6e:
# https://cloud.google.com/tpu/docs/v6e (Peak compute per chip (bf16); HBM bandwidth per chip).
CHIPS = {
    "v5e": {"name": "TPU v5e", "bf16_flops": 197e12, "hbm_bytes_per_s": 819e9, "hbm_bytes": 16e9},
    "v6e": {"name": "TPU v6e (Trillium)", "bf16_flops": 918e12, "hbm_bytes_per_s": 1640e9, "hbm_bytes": 32e9},
}
SOURCE = "https://cloud.google.com/tpu/docs/v6e"


def _call_key(func, args, kwargs):
    import torch
    from torch.utils._pytree import tree_flatten

    parts = [str(func)]
    for leaf in tree_flatten((args, kwargs))[0]:
        if isinstance(leaf, torch.Tensor):
            parts.append((leaf.device.type, leaf.dtype, tuple(leaf.shape), tuple(leaf.stride())))
        elif isinstance(leaf, float):
            parts.append("float")  # Python floats are runtime operands: one program for every value
        else:
            parts.append(repr(leaf))
    return tuple(parts)


def measure_workload(name: str, warmup: int = 2, timed: int = 5) -> dict:
    """Runs in the workload's own process: programs, executions per step, and the step's time here."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import torchtpu
    from torchtpu import _C
    from torchtpu.aot.recorder import record
    from torchtpu.aot.workloads import WORKLOADS

    built_by: dict[tuple, list[int]] = {}
    counting = {"on": False, "calls": collections.Counter()}

    class CountCalls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            key = _call_key(func, args, kwargs or {})
            before = _C._aot_recorded_count()
            out = func(*args, **(kwargs or {}))
            after = _C._aot_recorded_count()
            if after > before or key not in built_by:
                built_by.setdefault(key, []).extend(range(before, after))
            if counting["on"]:
                counting["calls"][key] += 1
            return out

    with record() as recording, CountCalls():
        step = WORKLOADS[name](torch.device("tpu"))
        for _ in range(warmup):
            step()
        counting["on"] = True
        step()
        torch.tpu.synchronize()
        counting["on"] = False
    executions = collections.Counter()
    unmatched = 0
    for key, calls in counting["calls"].items():
        if not built_by.get(key) and any(isinstance(p, tuple) and p[0] == "tpu" for p in key[1:]):
            unmatched += calls
        for i in built_by.get(key, []):
            executions[i] += calls
    times = []
    for _ in range(timed):
        start = time.perf_counter()
        step()
        torch.tpu.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return {"workload": name, "platform": torchtpu._C._plugin_info()["platform"],
            "programs": [{"text": p.text, "ops": p.ops} for p in recording.programs],
            "executions": [executions.get(i, 0) for i in range(len(recording.programs))],
            "unmatched_calls": unmatched, "step_seconds": times[len(times) // 2]}


def _measure_in_child(name: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    code = (f"import json, torchtpu.aot.report as r; json.dump(r.measure_workload({name!r}), open({out!r}, 'w'))")
    subprocess.run([sys.executable, "-c", code], check=True, stderr=subprocess.DEVNULL)
    with open(out) as f:
        data = json.load(f)
    os.unlink(out)
    return data


def summarise(measured: dict, topology: str, results: list) -> dict:
    chip = CHIPS[topology.split(":")[0]]
    runs = measured["executions"]
    flops = sum(n * r.flops for n, r in zip(runs, results) if r.accepted)
    bytes_ = sum(n * r.bytes_accessed for n, r in zip(runs, results) if r.accepted)
    roofline = sum(n * max(r.flops / chip["bf16_flops"], r.bytes_accessed / chip["hbm_bytes_per_s"])
                   for n, r in zip(runs, results) if r.accepted)
    compiler = sum(n * r.cost.get("optimal_seconds", 0.0) for n, r in zip(runs, results)
                   if r.accepted and r.cost.get("optimal_seconds", -1.0) > 0)
    return {"workload": measured["workload"], "topology": topology, "programs": len(results),
            "accepted": sum(r.accepted for r in results),
            "rejected": [f"{r.program.op}: {r.error.strip().splitlines()[0] if r.error.strip() else '?'}"
                         for r in results if not r.accepted],
            "executions_per_step": sum(runs), "unmatched_calls": measured["unmatched_calls"],
            "flops_per_step": flops, "bytes_per_step": bytes_,
            "largest_program_peak_bytes": max((r.peak_bytes for r in results if r.accepted), default=0),
            "compile_seconds": sum(r.compile_seconds for r in results),
            "roofline_seconds": roofline, "compiler_optimal_seconds": compiler,
            "measured_step_seconds": measured["step_seconds"], "measured_platform": measured["platform"]}


def _figure(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    topologies = list(dict.fromkeys(r["topology"] for r in rows))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / (len(topologies) + 1)
    for t, topology in enumerate(topologies):
        values = [next(r["roofline_seconds"] for r in rows if r["workload"] == w and r["topology"] == topology)
                  for w in workloads]
        ax.bar([i + t * width for i in range(len(workloads))], [v * 1e6 for v in values], width,
               label=f"{topology} roofline (compiler's flops and bytes)")
    measured = [next(r["measured_step_seconds"] for r in rows if r["workload"] == w) for w in workloads]
    ax.bar([i + len(topologies) * width for i in range(len(workloads))], [m * 1e6 for m in measured], width,
           label=f"measured here ({rows[0]['measured_platform']} plugin, strict eager)", color="0.6")
    ax.set_yscale("log")
    ax.set_ylabel("one training / forward step (µs, log scale)")
    ax.set_xticks([i + width * len(topologies) / 2 for i in range(len(workloads))], workloads)
    ax.set_title("torchtpu programs compiled by libtpu for TPU topologies: roofline estimate vs. measured here")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    from torchtpu.aot.compiler import compile_for_topologies
    from torchtpu.aot.recorder import Program
    from torchtpu.aot.workloads import WORKLOADS

    parser = argparse.ArgumentParser(prog="python -m torchtpu.aot report")
    parser.add_argument("--out", default="docs/tpu_readiness.json", help="JSON of the figures (the .md is written by hand from it)")
    parser.add_argument("--figure", default="docs/tpu_readiness.png")
    parser.add_argument("--workload", default="all")
    parser.add_argument("--topology", action="append")
    options = parser.parse_args(argv)
    names = list(WORKLOADS) if options.workload == "all" else options.workload.split(",")
    topologies = options.topology or ["v5e:2x2", "v6e:2x2"]
    rows = []
    for name in names:
        measured = _measure_in_child(name)
        programs = [Program(p["text"], p["ops"]) for p in measured["programs"]]
        for topology, (_, results) in compile_for_topologies(programs, topologies).items():
            row = summarise(measured, topology, results)
            rows.append(row)
            print(json.dumps(row))
    with open(options.out, "w") as f:
        json.dump(rows, f, indent=1)
    _figure(rows, options.figure)
    return 0 if all(not r["rejected"] for r in rows) else 1
