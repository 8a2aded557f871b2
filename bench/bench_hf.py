"""Hugging Face architectures on tpu against CPU: agreement and speed (the figures in docs/huggingface.md).

For each tiny architecture of torchtpu.testing.hf_models (2 layers, hidden 64, batch 2, built from a config):
- agreement: max |tpu - cpu| of the logits and of every gradient after one forward and backward (float32);
- fallbacks: ops that took the CPU fallback in forward, backward and greedy generate (expected: none);
- speed: median of one training step (forward + backward, no optimizer) and of one inference forward (no_grad), tpu
  against CPU torch in the same process, alternating for ROUNDS rounds after warm-up; every tpu sample ends
  with torch.tpu.synchronize(). The first tpu forward + backward (compilation included) is reported apart.

Also: transformers.Trainer steps per second on the tiny Llama, CPU against tpu (skipped when names are given).

Run:  .venv/bin/python bench/bench_hf.py [--rounds N] [name ...]
Writes results/bench_hf.json and prints a markdown table.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from pathlib import Path

import torch

import torchtpu
from torchtpu.metrics import fallback_ops
from torchtpu.testing.hf_models import architectures, generate_inputs

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def to(inputs: dict, device: str) -> dict:
    return {k: v.to(device) for k, v in inputs.items()}


def sync(device: str) -> None:
    if device == "tpu":
        torch.tpu.synchronize()


def agreement(arch) -> dict:
    cpu_model = arch.build()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    inputs = arch.inputs()
    torchtpu.reset_metrics()
    start = time.perf_counter()
    tpu_out = tpu_model(**to(inputs, "tpu"))
    tpu_out.loss.backward()
    sync("tpu")
    first_call_s = time.perf_counter() - start
    compiles = sum(op["compiles"] for op in torchtpu.metrics()["ops"].values())
    cpu_out = cpu_model(**inputs)
    cpu_out.loss.backward()
    grads = [(a.grad.cpu() - b.grad).abs().max().item()
             for a, b in zip(tpu_model.parameters(), cpu_model.parameters()) if b.grad is not None]
    generate_equal = None
    if arch.generates:
        prompt = generate_inputs(inputs)
        with torch.no_grad():
            generate_equal = torch.equal(tpu_model.generate(**to(prompt, "tpu"), max_new_tokens=8, do_sample=False).cpu(),
                                         cpu_model.generate(**prompt, max_new_tokens=8, do_sample=False))
    return {"logits_max_abs_diff": (tpu_out.logits.cpu() - cpu_out.logits).abs().max().item(),
            "grad_max_abs_diff": max(grads), "greedy_generate_equal": generate_equal, "fallbacks": fallback_ops(),
            "tpu_first_train_step_s": first_call_s, "tpu_first_train_step_compiles": compiles}


def timed(step, device: str) -> float:
    start = time.perf_counter()
    step()
    sync(device)
    return (time.perf_counter() - start) * 1e6


def speed(arch, rounds: int) -> dict:
    results = {}
    steps = {}
    for device in ("cpu", "tpu"):
        model = arch.build().to(device)
        inputs = to(arch.inputs(), device)

        def train(model=model, inputs=inputs):
            model.zero_grad(set_to_none=True)
            model(**inputs).loss.backward()

        def infer(model=model, inputs=inputs):  # labels stay: seq2seq models build decoder inputs from them
            with torch.no_grad():
                model(**inputs)

        steps[device] = {"train": train, "infer": infer}
    for kind in ("train", "infer"):
        for device in ("cpu", "tpu"):
            timed(steps[device][kind], device)  # warm-up
        samples = {"cpu": [], "tpu": []}
        for _ in range(rounds):
            for device in ("cpu", "tpu"):
                samples[device].append(timed(steps[device][kind], device))
        cpu_us, tpu_us = statistics.median(samples["cpu"]), statistics.median(samples["tpu"])
        results[kind] = {"cpu_median_us": cpu_us, "tpu_median_us": tpu_us, "ratio": tpu_us / cpu_us}
    return results


def trainer_speed(steps: int = 20) -> dict:
    """transformers.Trainer on the tiny Llama: optimizer steps per second (batch 8 of 32 tokens, AdamW,
    clipping), on CPU and on tpu; tpu after a warm-up run of the same shapes."""
    import tempfile

    from transformers import Trainer, TrainingArguments

    class Tokens(torch.utils.data.Dataset):
        ids = torch.randint(3, 128, (8 * steps, 32), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    llama = architectures()["llama"]
    result = {}
    for device, runs in (("cpu", 1), ("tpu", 2)):
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as out:
                args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=steps,
                                         max_grad_norm=1.0, report_to=[], use_cpu=device == "cpu",
                                         save_strategy="no", disable_tqdm=True, dataloader_pin_memory=False,
                                         logging_strategy="no")
                metrics = Trainer(model=llama.build().train(), args=args, train_dataset=Tokens()).train().metrics
        result[device] = metrics["train_steps_per_second"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    load_before = os.getloadavg()
    table = architectures()
    names = args.names or list(table)
    report = {}
    for name in names:
        arch = table[name]
        print(f"{name} ...", flush=True)
        report[name] = {"task": arch.task, **agreement(arch), **speed(arch, args.rounds)}
    trainer = trainer_speed() if not args.names else None
    RESULTS_DIR.mkdir(exist_ok=True)
    environment = {"torch": torch.__version__, "load_average_before": load_before,
                   "threads": torch.get_num_threads()}
    (RESULTS_DIR / "bench_hf.json").write_text(json.dumps({"environment": environment, "results": report, "trainer_steps_per_s": trainer}, indent=2))
    print("| architecture | task | logits max abs diff | grads max abs diff | greedy generate | fallbacks "
          "| train step cpu / tpu (ms) | tpu / cpu | forward cpu / tpu (ms) | tpu / cpu | first tpu train step: s (compiles) |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for name, r in report.items():
        gen = {None: "n/a", True: "same tokens", False: "DIFFERENT"}[r["greedy_generate_equal"]]
        t, f = r["train"], r["infer"]
        print(f"| {name} | {r['task']} | {r['logits_max_abs_diff']:.1e} | {r['grad_max_abs_diff']:.1e} | {gen} "
              f"| {sum(r['fallbacks'].values())} | {t['cpu_median_us'] / 1e3:.1f} / {t['tpu_median_us'] / 1e3:.1f} "
              f"| {t['ratio']:.2f}x | {f['cpu_median_us'] / 1e3:.1f} / {f['tpu_median_us'] / 1e3:.1f} "
              f"| {f['ratio']:.2f}x | {r['tpu_first_train_step_s']:.1f} ({r['tpu_first_train_step_compiles']}) |")
    if trainer:
        print(f"Trainer, tiny Llama, batch 8 x 32 tokens: {trainer['cpu']:.1f} steps/s on CPU, "
              f"{trainer['tpu']:.1f} on tpu ({trainer['cpu'] / trainer['tpu']:.2f}x the CPU time per step)")


if __name__ == "__main__":
    main()
