"""``python -m torchtpu.aot check --topology v5e:2x2 [--topology v6e:2x2] script.py [args...]``

Runs the script (or ``--workload NAME``, one of torchtpu.aot.workloads) on the device torchtpu loads here
(the CPU plugin in development), records every distinct program it emits, compiles each for the topologies
through libtpu, and prints per topology how many were accepted and, for each rejected program, the op that
built it and the compiler's message. Exits 1 when any program is rejected.
"""
from __future__ import annotations

import argparse
import json
import runpy
import sys
import time

import torch

import torchtpu
from torchtpu.aot.compiler import Result, compile_for_topologies
from torchtpu.aot.recorder import record
from torchtpu.aot.workloads import WORKLOADS


def _run_script(path: str, args: list[str]) -> None:
    saved = sys.argv
    sys.argv = [path, *args]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise
    finally:
        sys.argv = saved


def _run_workloads(names: list[str], steps: int, recording) -> list[tuple[str, int]]:
    """Runs each workload in turn; returns (name, number of programs recorded by the end of it). A program
    is attributed to the first workload that built it."""
    from torchtpu.aot.workloads import WORKLOADS

    ends = []
    for name in names:
        step = WORKLOADS[name](torch.device("tpu"))
        for _ in range(steps):
            step()
        torch.tpu.synchronize()
        ends.append((name, len(recording.snapshot())))
    return ends


def result_json(r: Result) -> dict:
    entry = {"op": r.program.op, "ops": r.program.ops, "digest": r.program.digest, "accepted": r.accepted,
             "partitions": r.program.partitions, "compile_seconds": round(r.compile_seconds, 4)}
    if r.accepted:
        entry.update(flops=r.flops, bytes_accessed=r.bytes_accessed,
                     transcendentals=max(0.0, r.cost.get("transcendentals", 0.0)),
                     optimal_seconds=r.cost.get("optimal_seconds", -1.0), memory=r.memory)
    else:
        entry.update(error=r.error, crashed=r.crashed)
    return entry


def check(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchtpu.aot check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topology", action="append", help="e.g. v5e:2x2, v6e:2x2, v5p:2x2x1 (repeatable)")
    parser.add_argument("--workload", help="built-in workloads instead of a script: names separated by commas, "
                        "or 'all' (" + ", ".join(WORKLOADS) + ")")
    parser.add_argument("--steps", type=int, default=3, help="steps of a --workload (default 3)")
    parser.add_argument("--json", help="write every program's result here")
    parser.add_argument("--save-programs", help="write each program's StableHLO into this folder")
    parser.add_argument("script", nargs="?")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if (options.workload is None) == (options.script is None):
        parser.error("give a script or --workload")
    topologies = options.topology or ["v5e:2x2"]

    workloads = []
    if options.workload:
        workloads = list(WORKLOADS) if options.workload == "all" else options.workload.split(",")
        unknown = [w for w in workloads if w not in WORKLOADS]
        if unknown:
            parser.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    start = time.perf_counter()
    with record() as recording:
        if workloads:
            ends = _run_workloads(workloads, options.steps, recording)
        else:
            _run_script(options.script, options.args)
    run_seconds = time.perf_counter() - start
    programs = recording.programs
    name = options.workload or options.script
    # Which workload first built each program (a script is one workload).
    owner = [name] * len(programs)
    if workloads:
        begin = 0
        for workload, end in ends:
            owner[begin:end] = [workload] * (end - begin)
            begin = end
    print(f"torchtpu.aot: {name} emitted {len(programs)} distinct programs on {torchtpu._C._plugin_info()['platform']} "
          f"in {run_seconds:.1f} s")
    if workloads:
        print("  first built by: " + ", ".join(f"{w} {owner.count(w)}" for w in workloads))
    if options.save_programs:
        import os

        os.makedirs(options.save_programs, exist_ok=True)
        for i, p in enumerate(programs):
            with open(os.path.join(options.save_programs, f"{i:04d}_{p.op.replace('::', '.')}.mlir"), "w") as f:
                f.write(p.text)

    start = time.perf_counter()
    compiled = compile_for_topologies(programs, topologies)
    compile_seconds = time.perf_counter() - start
    rejected_any = False
    report = {"workload": name, "programs": len(programs), "run_seconds": run_seconds,
              "compile_wall_seconds": compile_seconds, "topologies": {}}
    for topology_name, (topology, results) in compiled.items():
        rejected = [r for r in results if not r.accepted]
        rejected_any |= bool(rejected)
        flops = sum(r.flops for r in results)
        peak = max((r.peak_bytes for r in results), default=0)
        print(f"  {topology_name} ({topology.device_kind}, {topology.num_devices} chips): "
              f"{len(results) - len(rejected)}/{len(results)} accepted, {flops:.3g} flops over the distinct "
              f"programs, largest peak {peak / 2**20:.2f} MiB, compile {sum(r.compile_seconds for r in results):.1f} s")
        for r in rejected:
            first = (r.error.strip().splitlines() or ["?"])[0]
            i = programs.index(r.program)
            print(f"    REJECTED {r.program.op} in {owner[i]} [{r.program.digest}]{' (compiler aborted)' if r.crashed else ''}: {first}")
        report["topologies"][topology_name] = {
            "device_kind": topology.device_kind, "num_devices": topology.num_devices,
            "platform_version": topology.platform_version, "api_version": list(topology.api_version),
            "results": [dict(result_json(r), workload=w) for r, w in zip(results, owner)]}
    if options.json:
        with open(options.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if rejected_any else 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "check":
        return check(argv[1:])
    if argv and argv[0] == "report":
        from torchtpu.aot import report

        return report.main(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
