"""Single-controller SPMD (torchtpu.distributed.Mesh / shard): one process drives 4 or 8 virtual chips of the
CPU plugin and XLA's partitioner splits each program. Each check runs in a child process with its chip count
(tests/distributed/spmd_checks.py)."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import torch

from helpers import _child_env
from torchtpu.distributed import Mesh, shard, sharding

CHECKS = pathlib.Path(__file__).with_name("spmd_checks.py")


def _run(devices: int, *check: str, env: dict[str, str] | None = None) -> None:
    env = _child_env({"TORCHTPU_NUM_DEVICES": str(devices), "OMP_NUM_THREADS": "1", **(env or {})})
    run = subprocess.run([sys.executable, str(CHECKS), *check], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0 and f"OK {check[0]}" in run.stdout, (run.stdout[-3000:], run.stderr[-6000:])


def test_sharded_values_ops_writes_and_memory_on_4_chips():
    _run(4, "values")


def test_bad_sharding_requests_raise_clear_errors():
    _run(4, "errors")


@pytest.mark.parametrize("devices", [4, 8])
@pytest.mark.parametrize("strategy", ["dp", "tp", "fsdp"])
def test_gpt_training_sharded_matches_cpu(strategy, devices):
    _run(devices, "train", strategy, "strict")


@pytest.mark.parametrize("mode", ["fused", "compiled"])
def test_gpt_training_sharded_in_fused_and_compiled_modes(mode):
    _run(4, "train", "fsdp", mode)


def test_gpt_training_sharded_in_fused_mode_op_by_op():
    """A fused trace run op by op (its program did not compile or failed at launch; forced here) gives each op
    the results of the ops before it in the form its own program reads, sharded or not."""
    _run(4, "train", "dp", "fused", env={"TORCHTPU_FUSED_OP_BY_OP": "1"})


def test_one_device_mesh_leaves_tensors_whole():
    if torch.tpu.device_count() != 1:
        pytest.skip("this process has several devices: the one-device case is checked where there is one")
    t = torch.arange(6.0, device="tpu")
    assert shard(t, Mesh((1,), ("d",)), ("d",)) is t
    assert sharding(t) is None
    torch.testing.assert_close((t * 2).cpu(), torch.arange(6.0) * 2)
