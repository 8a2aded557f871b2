"""The on-disk program cache (tier 2): a second process loads what the first compiled; truncated, garbled
and foreign entries are misses with a warning; concurrent writers are safe; the directory stays within
its bound; different device counts do not share entries. Each process costs seconds, so one cold run
fills a directory that the other tests copy."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

import torchtpu
from helpers import run_python

# A few ops, their result and the disk-cache figures, as JSON on the last line.
WORKLOAD = """
import json, torch, torchtpu
x = torch.arange(12.0).reshape(3, 4).to("tpu")
y = (torch.softmax(x * 0.5, dim=1) @ x.t()).sum(0) + torch.tensor(1.5)
result = y.cpu().tolist()  # before the figures: in fused mode the ops run (their programs compiled) at this read
s = torchtpu.cache.stats()
print(json.dumps({"result": result, **{k: s[k] for k in ("hits", "misses", "writes", "rejected", "entries", "evictions", "bytes")}}))
"""


def run(cache_dir, **env):
    done = run_python(WORKLOAD, TORCHTPU_CACHE_DIR=str(cache_dir), **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def entries(cache_dir):
    return sorted(pathlib.Path(cache_dir).glob("*.xla"))


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A directory filled by one cold process, and that process's figures."""
    directory = tmp_path_factory.mktemp("filled")
    cold, _ = run(directory)
    assert cold["misses"] > 0 and cold["writes"] == cold["misses"] == len(entries(directory))
    return directory, cold


def copy_of(filled, tmp_path):
    target = tmp_path / "cache"
    shutil.copytree(filled[0], target)
    return target


def test_a_second_process_loads_instead_of_compiling(filled, tmp_path):
    warm, _ = run(copy_of(filled, tmp_path))
    cold = filled[1]
    assert warm["misses"] == 0 and warm["hits"] == cold["misses"] + cold["hits"]
    assert warm["result"] == cold["result"]


def test_damaged_entries_are_misses_with_a_warning(filled, tmp_path):
    directory = copy_of(filled, tmp_path)
    damaged = entries(directory)
    for i, path in enumerate(damaged):
        data = bytearray(path.read_bytes())
        if i % 3 == 0:  # truncated
            data = data[: len(data) // 2]
        elif i % 3 == 1:  # garbled payload
            for j in range(len(data) - 64, len(data)):
                data[j] ^= 0x5A
        else:  # written under another configuration
            data = data.replace(b"devices 1", b"devices 9")
        path.write_bytes(bytes(data))
    warm, stderr = run(directory)
    assert warm["result"] == filled[1]["result"]
    assert warm["rejected"] == len(damaged) == warm["writes"] and warm["hits"] == 0
    assert "ignoring program cache entry" in stderr and "checksum mismatch" in stderr and "truncated" in stderr
    # Rewritten whole: the next process loads them all.
    again, stderr = run(directory)
    assert again["rejected"] == 0 and again["misses"] == 0 and "ignoring" not in stderr


def test_concurrent_writers_share_one_directory(filled, tmp_path):
    env = {**os.environ, "TORCHTPU_CACHE_DIR": str(tmp_path)}
    env["PYTHONPATH"] = str(pathlib.Path(torchtpu.__file__).parent.parent)
    procs = [subprocess.Popen([sys.executable, "-c", WORKLOAD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        assert "ignoring" not in err
        assert json.loads(out.strip().splitlines()[-1])["result"] == filled[1]["result"]
    assert not list(tmp_path.glob("*.tmp*"))  # no temporary file left behind
    assert len(entries(tmp_path)) == len(entries(filled[0]))  # the same programs, one entry each


def test_the_directory_stays_within_its_bound(filled, tmp_path):
    bound = filled[1]["bytes"] // 2
    bounded, _ = run(tmp_path, TORCHTPU_CACHE_MAX_BYTES=str(bound))
    assert bounded["evictions"] > 0
    assert sum(p.stat().st_size for p in entries(tmp_path)) <= bound
    assert bounded["result"] == filled[1]["result"]


def test_device_counts_do_not_share_entries(filled, tmp_path):
    two, _ = run(copy_of(filled, tmp_path), TORCHTPU_NUM_DEVICES="2")
    assert two["hits"] == 0 and two["result"] == filled[1]["result"]


def test_a_fused_program_on_disk_runs_at_the_first_sight_of_its_trace(tmp_path):
    """A new trace shape runs op by op until it repeats (docs/modes.md), unless an earlier process compiled
    its program: then the program is loaded and runs at once."""
    script = """
        import json, os, torch, torchtpu
        torchtpu.eager_mode("fused")
        x = torch.arange(12.0).reshape(3, 4).to("tpu")
        for _ in range(int(os.environ["ROUNDS"])):
            y = (torch.softmax(x * 0.5, dim=1) @ x.t()).sum(0).cpu()
        f = torchtpu.metrics()["fused"]
        print(json.dumps([y.tolist(), f["compiles"], f["op_by_op_runs"], torchtpu.cache.stats()["misses"]]))
        """
    figures = []
    for rounds in ("2", "1"):
        done = run_python(script, TORCHTPU_CACHE_DIR=str(tmp_path), ROUNDS=rounds)
        assert done.returncode == 0, done.stderr
        figures.append(json.loads(done.stdout.strip().splitlines()[-1]))
    (cold_y, cold_compiles, cold_op_by_op, _), (warm_y, warm_compiles, warm_op_by_op, warm_misses) = figures
    assert (cold_compiles, cold_op_by_op) == (1, 1)  # op by op, then compiled at the second sight
    assert (warm_compiles, warm_op_by_op, warm_misses) == (1, 0, 0)  # loaded, not compiled, at the first
    assert warm_y == cold_y


def test_opt_out(tmp_path):
    off, _ = run(tmp_path, TORCHTPU_DISK_CACHE="0")
    assert off["writes"] == 0 and entries(tmp_path) == []


def test_stats_and_clear_in_process():
    (torch.arange(5.0, device="tpu") * 3).cpu()  # something compiled (or loaded) by this process
    stats = torchtpu.cache.stats()
    assert stats["enabled"] and stats["entries"] > 0 and stats["programs"] > 0
    assert stats["directory"] == os.environ["TORCHTPU_CACHE_DIR"]
    torchtpu.cache.clear()
    assert torchtpu.cache.stats()["entries"] == 0
    assert (torch.arange(5.0, device="tpu") * 3).cpu().tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]  # still usable
