"""The torch.distributed backend "tpu_dist" under torchrun (2 processes, one tpu device each): every collective,
DDP and FSDP2 (fully_shard) training the small GPT to the parameters of one CPU process on the whole batch."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch.distributed as dist

WORKER = pathlib.Path(__file__).with_name("worker.py")


def _torchrun(case: str, processes: int = 2) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
               str(WORKER), case]
    env = dict(os.environ, TORCHTPU_NUM_DEVICES="1", OMP_NUM_THREADS="1")
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    oks = [line for line in run.stdout.splitlines() if line.startswith(f"OK {case}")]
    assert run.returncode == 0 and len(oks) == processes, (run.stdout[-3000:], run.stderr[-6000:])


def test_backend_is_registered_for_tpu():
    assert "TPU_DIST" in dist.Backend._plugins
    assert dist.Backend.default_device_backend_map.get("tpu") == "tpu_dist"


@pytest.mark.parametrize("case", ["collectives", "ddp", "fsdp"])
def test_under_torchrun(case):
    _torchrun(case)
