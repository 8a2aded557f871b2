"""torchtpu.aot: every program the test models emit compiles for real TPU topologies (libtpu, no TPU needed).

The CI step is test_every_workload_program_compiles_for_tpu: it runs the MLP, CNN, GPT, LSTM, an FFT mixer and a
Hugging Face Llama forward and training step on the CPU plugin in a fresh process, records each distinct program and
AOT-compiles them for v5e and v6e, failing on any rejected program with the op that built it. libtpu comes
from requirements.txt (the `torchtpu[tpu]` extra)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
import torch

import torchtpu.aot as aot
from torchtpu.aot.workloads import WORKLOADS

needs_libtpu = pytest.mark.skipif(aot.find_libtpu() is None, reason="libtpu is not installed (pip install torchtpu[tpu])")
TOPOLOGIES = ["v5e:2x2", "v6e:2x2"]


def test_recorder_keeps_each_distinct_program_once_with_its_ops():
    x = torch.randn(3, 5, device="tpu")  # built before recording: its program is not recorded
    with aot.record() as rec:
        y = torch.randn(7, 11, device="tpu")
        (y * 2).sum().cpu()
        (y * 2).sum().cpu()  # the same programs again: cache hits, nothing new
        x.sum().cpu()  # a program of a new shape (read: in fused mode no op of it waits for the next recording)
    ops = [p.op for p in rec.programs]
    assert "aten::mul.Tensor" in ops and "aten::sum" in ops
    assert len(rec.programs) == len({p.text for p in rec.programs})
    assert all(p.text.startswith("module @torchtpu") for p in rec.programs)
    with aot.record() as again:
        (y * 2).sum().cpu()
    assert again.programs == []  # already built: recording starts from what is built, not what runs


def _fake_compiler(tmp_path, body: str) -> str:
    """A stand-in for torchtpu_aot_compile speaking its protocol, to test the parent without libtpu."""
    path = tmp_path / "fake_compiler.sh"
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_program_that_kills_the_compiler_is_charged_and_the_rest_still_compile(tmp_path, monkeypatch):
    body = r'''
echo '{"topology": "fake", "platform": "tpu", "platform_version": "0", "device_kind": "fake", "num_devices": 4, "api_version": [0, 1]}'
while read -r path; do
  if grep -q ABORT "$path"; then echo "fatal: packed dot" >&2; kill -ABRT $$; fi
  echo "{\"path\": \"$path\", \"accepted\": true, \"compile_seconds\": 0.5, \"cost\": {\"flops\": 10}, \"memory\": {\"peak_bytes\": 64}, \"fingerprint\": \"ab\"}"
done
'''
    monkeypatch.setenv("TORCHTPU_AOT_COMPILER", _fake_compiler(tmp_path, body))
    monkeypatch.setenv("TORCHTPU_LIBTPU", "/nonexistent/libtpu.so")
    programs = [aot.Program(text, [f"op{i}"]) for i, text in enumerate(["a", "ABORT", "c", "ABORT", "e"])]
    topology, results = aot.compile_programs(programs, "fake")
    assert topology.num_devices == 4
    assert [r.accepted for r in results] == [True, False, True, False, True]
    assert results[1].crashed and "fatal: packed dot" in results[1].error and results[1].program.op == "op1"
    assert results[4].flops == 10 and results[4].peak_bytes == 64


def test_a_compiler_that_cannot_start_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHTPU_AOT_COMPILER", _fake_compiler(tmp_path, 'echo \'{"error": "no such topology"}\'\nexit 2\n'))
    monkeypatch.setenv("TORCHTPU_LIBTPU", "/nonexistent/libtpu.so")
    with pytest.raises(aot.AotError, match="no such topology"):
        aot.compile_programs([aot.Program("x", ["op"])], "v99:1x1")


@needs_libtpu
def test_libtpu_rejections_come_back_with_the_compilers_message():
    unknown_call = """module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {
    %v = "stablehlo.custom_call"(%arg0) {call_target_name = "torchtpu_no_such_target"} : (tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%v) : (tensor<4xf32>) -> ()
  }
}"""
    s64_dot = """module @m {
  func.func public @main(%arg0: tensor<4x8xi64>, %arg1: tensor<8x16xi64>) -> (tensor<4x16xi64>) {
    %v = "stablehlo.dot_general"(%arg0, %arg1) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<4x8xi64>, tensor<8x16xi64>) -> tensor<4x16xi64>
    "func.return"(%v) : (tensor<4x16xi64>) -> ()
  }
}"""
    topology, results = aot.compile_programs([aot.Program(unknown_call, ["custom"]), aot.Program(s64_dot, ["dot"])],
                                             "v5e:2x2")
    assert topology.platform == "tpu" and topology.num_devices == 4 and "v5" in topology.device_kind
    assert not results[0].accepted and "torchtpu_no_such_target" in results[0].error
    assert not results[1].accepted and "s64" in results[1].error


@needs_libtpu
def test_int64_matmuls_compile_for_tpu_and_match_cpu():
    """XLA's TPU compiler rejects s64 dot_general; torchtpu lowers 64-bit integer products without one."""
    a, b = torch.randint(-2**40, 2**40, (2, 3, 5)), torch.randint(-100, 100, (2, 5, 4))
    with aot.record() as rec:
        results = [torch.bmm(a.to("tpu"), b.to("tpu")), a[0].to("tpu") @ b[0].to("tpu"),
                   torch.mv(a[0].to("tpu"), b[0, :, 0].to("tpu"))]
    expected = [torch.bmm(a, b), a[0] @ b[0], torch.mv(a[0], b[0, :, 0])]
    for got, want in zip(results, expected):
        assert torch.equal(got.cpu(), want)
    ops = {op for p in rec.programs for op in p.ops}
    assert {"aten::bmm", "aten::mm"} <= ops
    _, compiled = aot.compile_programs(rec.programs, "v5e:2x2")
    assert [(r.program.op, r.error) for r in compiled if not r.accepted] == []


@needs_libtpu
def test_every_workload_program_compiles_for_tpu(tmp_path):
    """The CI step: all test models, every distinct program, v5e and v6e; a rejection names its op. The run has
    4 virtual chips, as the 2x2 slices have, so the SPMD workload's programs are partitioned 4 ways. Strict
    mode: one program per op (fused mode's step programs are the next test's)."""
    report = tmp_path / "aot.json"
    command = [sys.executable, "-m", "torchtpu.aot", "check", "--workload", "all", "--json", str(report)]
    for topology in TOPOLOGIES:
        command += ["--topology", topology]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1200,
                         env=dict(os.environ, TORCHTPU_NUM_DEVICES="4", TORCHTPU_EAGER_MODE="strict"))
    summary = "\n".join(line for line in run.stdout.splitlines() if line.startswith(("torchtpu.aot", "  ")))
    assert run.returncode == 0, f"{summary}\n{run.stderr[-3000:]}"
    data = json.loads(report.read_text())
    assert data["programs"] > 200, summary
    for topology in TOPOLOGIES:
        results = data["topologies"][topology]["results"]
        assert len(results) == data["programs"]
        rejected = [f"{r['op']} ({r['workload']}): {r['error'][:300]}" for r in results if not r["accepted"]]
        assert rejected == [], "\n".join(rejected)
        assert {r["workload"] for r in results} == set(WORKLOADS)
        # torchtpu's Pallas kernels as Mosaic, not only interpreted (torchtpu.kernels records both).
        assert {"torchtpu::flash_attention (Mosaic)", "torchtpu::rms_norm (Mosaic)"} <= {r["op"] for r in results}
        # The sharded GPT's step, forward, backward and optimizer, as 4-way partitioned programs.
        partitioned = {r["op"] for r in results if r["workload"] == "gpt_spmd" and r["partitions"] == 4}
        assert {"aten::addmm", "aten::mm", "aten::_foreach_mul_.Tensor"} <= partitioned, sorted(partitioned)
        # Complex64 programs: the FFT mixer's transforms, forward and backward.
        spectral = {r["op"] for r in results if r["workload"] == "spectral"}
        assert {"aten::_fft_c2c", "aten::_fft_r2c", "aten::abs"} <= spectral, sorted(spectral)


@needs_libtpu
def test_fused_eager_step_programs_compile_for_tpu(tmp_path):
    """In fused eager mode a training step runs as one program: the GPT's step, and the sharded GPT's as one
    program partitioned over the 4 chips of a v5e 2x2 slice, compile for it."""
    report = tmp_path / "aot.json"
    command = [sys.executable, "-m", "torchtpu.aot", "check", "--workload", "gpt,gpt_spmd", "--topology", "v5e:2x2",
               "--json", str(report)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1200,
                         env=dict(os.environ, TORCHTPU_NUM_DEVICES="4", TORCHTPU_EAGER_MODE="fused"))
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    results = json.loads(report.read_text())["topologies"]["v5e:2x2"]["results"]
    fused = [r for r in results if r["op"].startswith("fused trace of ")]
    rejected = [f"{r['op']} ({r['workload']}): {r['error'][:300]}" for r in fused if not r["accepted"]]
    assert rejected == [], "\n".join(rejected)
    steps = {(r["workload"], r["partitions"]) for r in fused if int(r["op"].split()[3]) >= 100}
    assert {("gpt", 1), ("gpt_spmd", 4)} <= steps, sorted((r["op"], r["workload"], r["partitions"]) for r in fused)
