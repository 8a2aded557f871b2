"""Instructions per 16-float `x + y`, CPU torch against a recorded (fused-mode) tpu op, counted by callgrind.

Timing a sub-microsecond op on the shared 2-core VM varies by several percent between processes; instruction
counts do not, so this is the measure for changes to the recording path worth a few percent. Each side runs
twice under `valgrind --tool=callgrind`, counting only inside `THPVariable_add` and the fused flush, with 20
and 40 chunks of 500 adds after an 8-chunk warm-up; the difference over the 10k extra adds is the per-op
count, free of start-up and compiles. (The tpu count includes freeing the dead results' storages, which
happens at the flush; CPU torch frees its results outside the counted calls.) Prints the totals and the torchtpu functions costing at least 20
instructions an op (inclusive), and writes results/op_instructions.{json,png}. Needs valgrind; takes about
3 minutes.
"""
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import report

LOOP = r"""
import sys, torch, torchtpu
mode, chunks = sys.argv[1], int(sys.argv[2])
device = "cpu" if mode == "cpu" else "tpu"
x = torch.ones(16, device=device); y = x.clone()
with torchtpu.eager_mode("fused" if mode == "fused" else "strict"):
    for _ in range(8 + chunks):
        for _ in range(500):
            x + y
        if mode == "fused":
            torchtpu.eager.flush()
    torch.tpu.synchronize()
"""
EXTRA_OPS = 20 * 500


def inclusive_counts(mode: str, chunks: int, workdir: str) -> dict:
    out = os.path.join(workdir, f"{mode}_{chunks}.out")
    script = os.path.join(workdir, "loop.py")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no",
                    "--toggle-collect=torch::autograd::THPVariable_add*",
                    "--toggle-collect=torchtpu::aten::flush_trace*", sys.executable, script, mode, str(chunks)],
                   check=True, capture_output=True)
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                          check=True, capture_output=True, text=True).stdout
    counts = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(?:\?\?\?:|\S*?\.(?:c|cc|h|S):)?(.*?)(?: \[.*)?$", line)
        if match:
            counts[match.group(2)] = counts.get(match.group(2), 0) + int(match.group(1).replace(",", ""))
    return counts


def first_match(counts: dict, prefix: str) -> int:
    """The count of the function whose name starts with `prefix` (its largest, if several match)."""
    return round(max((n for name, n in counts.items() if name.startswith(prefix)), default=0))


def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        with open(os.path.join(workdir, "loop.py"), "w") as f:
            f.write(LOOP)
        runs = [(mode, chunks) for mode in ("cpu", "fused") for chunks in (20, 40)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(zip(runs, pool.map(lambda run: inclusive_counts(*run, workdir), runs)))
    per_op = {}
    for mode in ("cpu", "fused"):
        short, long = counts[(mode, 20)], counts[(mode, 40)]
        per_op[mode] = {name: (long.get(name, 0) - short.get(name, 0)) / EXTRA_OPS for name in long}
        print(f"{mode}: {per_op[mode]['PROGRAM TOTALS']:.0f} instructions per add")
    print(f"fused / cpu: {per_op['fused']['PROGRAM TOTALS'] / per_op['cpu']['PROGRAM TOTALS']:.3f}")
    print("torchtpu functions, inclusive instructions per recorded add:")
    ours = sorted(((n, name) for name, n in per_op["fused"].items() if "torchtpu::" in name and n >= 20),
                  reverse=True)
    for n, name in ours:
        print(f"  {n:7.0f}  {name[:120]}")
    totals = {mode: round(per_op[mode]["PROGRAM TOTALS"]) for mode in per_op}
    parts = {label: first_match(per_op["fused"], prefix) for label, prefix in (
        ("entry", "torchtpu::aten::unboxed::Entry<at::_ops::add_Tensor"),
        ("record", "torchtpu::aten::(anonymous namespace)::record("),
        ("op_key", "torchtpu::aten::op_key("),
        ("flush", "torchtpu::aten::flush_trace("))}
    report.write("op_instructions", {"per_add": totals, "torchtpu_inclusive": parts}, [
        ("instructions per x + y", "instructions", {"CPU torch": totals["cpu"], "tpu recorded": totals["fused"]}),
        ("inside the recorded add", "instructions", parts)])


if __name__ == "__main__":
    main()
