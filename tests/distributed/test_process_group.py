"""The torch.distributed backend "tpu_dist" under torchrun (2 processes, one tpu device each): every collective
(also under TORCH_DISTRIBUTED_DEBUG=DETAIL, which catches mismatched calls); DDP (eager and compiled), FSDP2
(fully_shard) and DTensor tensor parallelism training the small GPT to the parameters of one CPU process; transformers' tp_plan="auto" choosing "tpu_dist" by itself and giving CPU's logits."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch.distributed as dist

WORKER = pathlib.Path(__file__).with_name("worker.py")


def _torchrun(case: str, *args: str, processes: int = 2, **extra_env: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
               str(WORKER), case, *args]
    env = dict(os.environ, TORCHTPU_NUM_DEVICES="1", OMP_NUM_THREADS="1", **extra_env)
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    # Ranks print at once, so their lines may run together: count the reports, not the lines.
    ranks = set(re.findall(rf"OK {case} rank (\d+)", run.stdout))
    assert run.returncode == 0 and len(ranks) == processes, (run.stdout[-3000:], run.stderr[-6000:])


def test_backend_is_registered_for_tpu():
    assert "TPU_DIST" in dist.Backend._plugins
    assert dist.Backend.default_device_backend_map.get("tpu") == "tpu_dist"


@pytest.mark.parametrize("case", ["collectives", "ddp", "sync_batch_norm", "fsdp", "tp"])
def test_under_torchrun(case):
    _torchrun(case)


def test_debug_detail_checks_collectives_across_ranks():
    _torchrun("debug_detail", TORCH_DISTRIBUTED_DEBUG="DETAIL")


def test_transformers_tensor_parallel_picks_tpu_dist(tmp_path):
    import torch
    import transformers as hf

    from torchtpu.testing.hf_models import _decoder_common

    torch.manual_seed(0)
    hf.LlamaForCausalLM(hf.LlamaConfig(**_decoder_common())).save_pretrained(tmp_path)
    _torchrun("hf_tp", str(tmp_path))


def test_transformers_trainer_under_torchrun_takes_tpu_dist(tmp_path):
    _torchrun("trainer", str(tmp_path))
