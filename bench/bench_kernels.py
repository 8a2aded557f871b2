"""torchtpu's shipped kernels (torchtpu.kernels: Pallas flash attention and RMSNorm) against the native lowering.

Part 1, measured here in one process, alternating in rounds: causal attention forward + backward at three
sizes (float32, batch 2, 4 heads, 64 dims, T = 128, 256, 512) and RMSNorm forward + backward (4096 x 512):
the kernel on tpu (Pallas interpret mode on the CPU plugin: plain StableHLO loops), the native lowering on tpu
(one fused SDPA program; the rms_norm decomposition), and CPU torch.

Part 2, for a TPU without one: the same attention sizes (bfloat16) and RMSNorm compiled for v5e through libtpu
(torchtpu.aot), the kernel (Mosaic) against the native programs recorded from the CPU plugin: the compiler's
HBM bytes accessed and peak memory, and a roofline estimate max(flops / peak, bytes / bandwidth) with the
chip's published figures. The compiler cannot see inside a Mosaic kernel, so for the kernel the flops are
counted by hand (4 T^2 D per head forward, causal half; backward 2.5x forward) and the bytes are its operands
and results (each read or written once, as the kernel does).

Writes results/bench_kernels.{json,png}.

    .venv/bin/python bench/bench_kernels.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import time

os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import report  # noqa: E402
import torchtpu  # noqa: E402
import torchtpu.aot as aot  # noqa: E402
from torchtpu import kernels  # noqa: E402
from torchtpu.aot.report import CHIPS  # noqa: E402
from torchtpu.kernels import TensorSpec, builtin  # noqa: E402

LENGTHS = (128, 256, 512)
BATCH, HEADS, DIM = 2, 4, 64
NORM_SHAPE = (4096, 512)


def attention_step(device: str, length: int, kernel: bool, dtype=torch.float32):
    q, k, v = (torch.randn(BATCH, HEADS, length, DIM, dtype=dtype, device=device, requires_grad=True) for _ in range(3))
    grad = torch.randn(BATCH, HEADS, length, DIM, dtype=dtype, device=device)

    def step():
        out = (kernels.flash_attention(q, k, v, causal=True) if kernel
               else F.scaled_dot_product_attention(q, k, v, is_causal=True))
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
        dv.sum().item()  # waits for the device
    return step


def norm_step(device: str, kernel: bool, dtype=torch.float32):
    x = torch.randn(*NORM_SHAPE, dtype=dtype, device=device, requires_grad=True)
    w = torch.randn(NORM_SHAPE[1], dtype=dtype, device=device, requires_grad=True)
    grad = torch.randn(*NORM_SHAPE, dtype=dtype, device=device)

    def step():
        out = kernels.rms_norm(x, w, 1e-6) if kernel else F.rms_norm(x, (NORM_SHAPE[1],), w, 1e-6)
        dx, dw = torch.autograd.grad(out, (x, w), grad)
        dw.sum().item()
    return step


def measure(rounds: int) -> dict:
    cases = {}
    for length in LENGTHS:
        cases[f"attention T={length}"] = {"cpu torch": attention_step("cpu", length, False),
                                          "tpu native": attention_step("tpu", length, False),
                                          "tpu kernel": attention_step("tpu", length, True)}
    cases["rms_norm 4096x512"] = {"cpu torch": norm_step("cpu", False), "tpu native": norm_step("tpu", False),
                                  "tpu kernel": norm_step("tpu", True)}
    results = {}
    for case, variants in cases.items():
        for step in variants.values():
            step()  # compile
        samples = {name: [] for name in variants}
        for _ in range(rounds):
            for name, step in variants.items():
                start = time.perf_counter()
                step()
                samples[name].append(time.perf_counter() - start)
        med = {name: statistics.median(s) * 1e3 for name, s in samples.items()}
        results[case] = {"median_ms": med, "kernel / native": med["tpu kernel"] / med["tpu native"],
                         "kernel / cpu": med["tpu kernel"] / med["cpu torch"]}
        print(f"  {case:20} " + "  ".join(f"{n} {ms:8.2f} ms" for n, ms in med.items())
              + f"   kernel/native {results[case]['kernel / native']:.2f}x", flush=True)
    return results


def native_programs(run) -> list:
    """The programs the native lowering builds for `run` (fw + bw) on the CPU plugin."""
    with aot.record() as recording:
        run()
    return recording.programs


def tpu_estimates(topology: str = "v5e:2x2") -> dict:
    chip = CHIPS[topology.split(":")[0]]
    bf16 = torch.bfloat16
    out = {}
    for length in LENGTHS:
        qkv = TensorSpec((BATCH, HEADS, length, DIM), bf16)
        lse = TensorSpec((BATCH, HEADS, length), torch.float32)
        statics = dict(causal=True, scale=DIM ** -0.5, block_q=min(128, length), block_k=min(128, length))
        kernel = [aot.Program(builtin.attention_op.tpu_program(qkv, qkv, qkv, **statics), ["flash_attention"]),
                  aot.Program(builtin._attention_backward_op.tpu_program(qkv, qkv, qkv, qkv, lse, qkv, **statics),
                              ["flash_attention_backward"])]
        forward_flops = 4 * BATCH * HEADS * length * length * DIM / 2  # causal: half the scores
        out[f"attention T={length}"] = (kernel, forward_flops * 3.5, native_programs(attention_step("tpu", length, False, bf16)))
    x, w = TensorSpec(NORM_SHAPE, bf16), TensorSpec((NORM_SHAPE[1],), bf16)
    kernel = [aot.Program(builtin.rms_norm_op.tpu_program(x, w, eps=1e-6), ["rms_norm"]),
              aot.Program(builtin._rms_norm_backward_op.tpu_program(x, w, x, eps=1e-6), ["rms_norm_backward"])]
    out["rms_norm 4096x512"] = (kernel, 12.0 * NORM_SHAPE[0] * NORM_SHAPE[1],
                                native_programs(norm_step("tpu", False, bf16)))
    estimates = {}
    for case, (kernel, kernel_flops, native) in out.items():
        _, kernel_results = aot.compile_programs(kernel, topology)
        _, native_results = aot.compile_programs(native, topology)
        # The compiler's byte count of a Mosaic call is its own bookkeeping, not the kernel's traffic: count what
        # the kernel must move, its operands read once and its results written once.
        kernel_bytes = sum(r.memory["argument_bytes"] + r.memory["output_bytes"] for r in kernel_results)
        native_bytes = sum(r.bytes_accessed for r in native_results)
        native_flops = sum(r.flops for r in native_results)
        estimates[case] = {
            "kernel accepted": all(r.accepted for r in kernel_results),
            "kernel HBM bytes": kernel_bytes, "native HBM bytes": native_bytes,
            "kernel peak bytes": max(r.peak_bytes for r in kernel_results),
            "native peak bytes": max((r.peak_bytes for r in native_results), default=0),
            "kernel flops (by hand)": kernel_flops, "native flops (compiler)": native_flops,
            "kernel roofline us": 1e6 * max(kernel_flops / chip["bf16_flops"], kernel_bytes / chip["hbm_bytes_per_s"]),
            "native roofline us": 1e6 * sum(max(r.flops / chip["bf16_flops"], r.bytes_accessed / chip["hbm_bytes_per_s"])
                                            for r in native_results),
        }
        e = estimates[case]
        print(f"  {case:20} kernel {e['kernel HBM bytes'] / 1e6:7.2f} MB, roofline {e['kernel roofline us']:7.2f} us; "
              f"native {e['native HBM bytes'] / 1e6:7.2f} MB ({len(native)} programs), roofline "
              f"{e['native roofline us']:7.2f} us; kernel compiled: {e['kernel accepted']}", flush=True)
    return estimates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    print("Measured here (CPU plugin; fw + bw, median ms):", flush=True)
    results = {"measured": measure(args.rounds)}
    print("Compiled for v5e (bf16), HBM bytes accessed and roofline estimate:", flush=True)
    results["v5e"] = tpu_estimates()
    results["1-min load average at the end (2 cpus)"] = float(pathlib.Path("/proc/loadavg").read_text().split()[0])
    print(f"1-min load average at the end: {results['1-min load average at the end (2 cpus)']} on 2 cpus")
    report.write("bench_kernels", results, [
        ("kernel / native lowering, measured here", "time ratio (fw + bw)",
         {case: r["kernel / native"] for case, r in results["measured"].items()}),
        ("v5e roofline estimate, bf16", "kernel / native",
         {case: e["kernel roofline us"] / e["native roofline us"] for case, e in results["v5e"].items()}),
    ])


if __name__ == "__main__":
    main()
