"""Data-parallel training over the ``tpu_dist`` backend (torchrun, one process per tpu device): step time and
per-process device memory against the number of processes (1, 2, 4), for DDP and FSDP2 (fully_shard).

The model is the small GPT of the tests at d 128, 2 layers, context 64, batch 8 per process, AdamW. Each
process times 5 steps after 2 of warm-up (median) and reports its device memory after the last step
(parameters, gradients and AdamW state; FSDP2 keeps 1/N of each). On the CPU plugin the collectives go
through the host (Gloo), and this machine has 2 cores: beyond 2 processes the processes share cores, so the
step time shows that, not scaling. Writes results/bench_distributed.{json,png}.

    .venv/bin/python bench/bench_distributed.py
"""
from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

PROCESSES = (1, 2, 4)
STRATEGIES = ("ddp", "fsdp")


def worker(strategy: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import torchtpu  # noqa: F401
    from torchtpu.testing.models import SmallGPT

    dist.init_process_group("tpu_dist")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = SmallGPT(vocab=256, dim=128, heads=4, layers=2, context=64).tpu()
    if strategy == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("tpu", (size,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 256, (8, 65), generator=torch.Generator().manual_seed(rank)).tpu()

    def step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        loss.item()

    for _ in range(2):
        step()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    result = {"median_ms": statistics.median(samples) * 1e3, "device_bytes": torch.tpu.memory_allocated()}
    pathlib.Path(out_dir, f"{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def run(strategy: str, processes: int) -> dict:
    with tempfile.TemporaryDirectory() as out_dir:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
                   __file__, "--worker", strategy, out_dir]
        env = dict(os.environ, TORCHTPU_NUM_DEVICES="1", OMP_NUM_THREADS=str(max(1, 2 // processes)))
        subprocess.run(command, check=True, capture_output=True, env=env, timeout=900)
        ranks = [json.loads(p.read_text()) for p in sorted(pathlib.Path(out_dir).glob("*.json"))]
    return {"median_ms": max(r["median_ms"] for r in ranks),  # a step ends when the slowest rank's does
            "device_bytes_per_process": max(r["device_bytes"] for r in ranks)}


def main() -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import report

    results = {}
    for strategy in STRATEGIES:
        for processes in PROCESSES:
            r = results[f"{strategy} x{processes}"] = run(strategy, processes)
            print(f"  {strategy:5} {processes} processes: step {r['median_ms']:8.1f} ms, device memory per process "
                  f"{r['device_bytes_per_process'] / 2**20:6.2f} MiB", flush=True)
    results["1-min load average at the end (2 cpus)"] = float(pathlib.Path("/proc/loadavg").read_text().split()[0])
    report.write("bench_distributed", results, [
        ("step time (slowest rank), GPT d128", "ms (median)",
         {k: v["median_ms"] for k, v in results.items() if isinstance(v, dict)}),
        ("device memory per process", "MiB",
         {k: v["device_bytes_per_process"] / 2**20 for k, v in results.items() if isinstance(v, dict)}),
    ])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
