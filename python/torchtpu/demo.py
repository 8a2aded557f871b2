"""`torchtpu demo`: what the tpu device does, in a few minutes on a laptop-sized machine.

1. the device: plugin, platform, device count, PJRT API version, memory;
2. a small GPT learns the text shipped in torchtpu/_demo_corpus.py on tpu (progress bar with loss and
   tokens/s), the same loop runs briefly on CPU torch for agreement and speed, then the model writes text;
3. a tiny Llama built locally (nothing downloaded) loads with `device_map="tpu"`, generates, and is
   fine-tuned for a few steps with transformers' `Trainer`;
4. a summary: steps/s against CPU, programs compiled, cache hits, CPU fallbacks, and a loss-curve plot.

    torchtpu demo [--steps 300] [--devices N] [--mode strict|fused|debug|compiled] [--no-hf] [--plot FILE]
    python -m torchtpu demo ...      (python -m torchtpu.demo works too)
"""
from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
import warnings

import torch

import torchtpu

CONTEXT = 64
BATCH = 16


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, momentum: float = 0.9) -> list[float]:
    """SGD on mse_loss; returns the loss of every step (each .item() is a sync point). Used by the tests."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def device_report() -> None:
    info = torchtpu.plugin_info()
    free, total = torch.tpu.mem_get_info()
    major, minor = info["api_version"]
    print(f"device   {torch.tpu.device_count()} x tpu (platform '{info['platform']}'), PJRT C API {major}.{minor}")
    print(f"plugin   {info['path']}")
    print(f"memory   {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB on tpu:0")


# ---- a small GPT on the shipped corpus ---------------------------------------------------------------------

def corpus() -> tuple[torch.Tensor, list[str]]:
    from torchtpu._demo_corpus import TEXT

    alphabet = sorted(set(TEXT))
    index = {ch: i for i, ch in enumerate(alphabet)}
    return torch.tensor([index[ch] for ch in TEXT]), alphabet


def batches(data: torch.Tensor, steps: int, seed: int = 0):
    """The same sequence of (input, target) batches on every call: CPU and tpu see identical data."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - CONTEXT - 1, (BATCH,), generator=gen)
        window = torch.stack([data[s:s + CONTEXT + 1] for s in starts.tolist()])
        yield window[:, :-1], window[:, 1:]


def gpt_loop(model, data, steps, device, progress=False, compiled=False) -> tuple[list[float], float]:
    """AdamW with gradient clipping; returns every step's loss and the seconds taken after the first step
    (the first compiles on tpu). `compiled`: the step function runs under torch.compile(backend="tpu")."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def train_step(x, y):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    step_fn = torch.compile(train_step, backend="tpu") if compiled else train_step
    losses = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, desc=f"gpt on {device}", unit="step")
    start = time.perf_counter()
    for step, (x, y) in enumerate(batches(data, steps)):
        if step == 1:
            start = time.perf_counter()
        loss = step_fn(x.to(device), y.to(device))
        losses.append(loss)
        if bar is not None and (step % 10 == 9 or step == steps - 1):
            elapsed = max(time.perf_counter() - start, 1e-9)
            bar.set_postfix(loss=f"{loss.item():.3f}", tokens_per_s=f"{(step * BATCH * CONTEXT) / elapsed:,.0f}")
            bar.update(step + 1 - bar.n)
    values = [v.item() for v in losses]  # waits for the last step
    seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    return values, seconds


@torch.no_grad()
def write(model, alphabet, prompt: str, length: int, device: str) -> str:
    """Samples `length` characters, always feeding a full window so every step reuses one program."""
    index = {ch: i for i, ch in enumerate(alphabet)}
    ids = [index.get(ch, index[" "]) for ch in prompt][-CONTEXT:]
    window = torch.tensor([[index[" "]] * (CONTEXT - len(ids)) + ids], device=device)
    out = []
    for _ in range(length):
        probs = torch.softmax(model(window)[0, -1] / 0.8, dim=-1)
        token = torch.multinomial(probs, 1)  # the device generator, seeded by torch.manual_seed
        window = torch.cat([window[:, 1:], token.view(1, 1)], dim=1)
        out.append(token)
    return prompt + "".join(alphabet[i] for i in torch.cat(out).cpu().tolist())


# ---- Hugging Face ------------------------------------------------------------------------------------------

def hf_part(steps: int) -> dict:
    from transformers import AutoModelForCausalLM, PrinterCallback, Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    from torchtpu.testing.hf_models import architectures, word_tokenizer

    class Counting(torch.utils.data.Dataset):
        """Sequences that count up by a fixed stride: learnable in a few steps."""

        def __len__(self):
            return 8 * steps

        def __getitem__(self, i):
            ids = (torch.arange(16) * (1 + i % 3) + i) % 124 + 4
            return {"input_ids": ids, "labels": ids}

    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as folder:
        architectures()["llama"].build().save_pretrained(folder)
        tokenizer = word_tokenizer()
        model = AutoModelForCausalLM.from_pretrained(folder, device_map="tpu")
        print(f"llama    loaded with device_map='tpu': {sum(p.numel() for p in model.parameters()):,} "
              f"parameters on {model.device}")
        prompt = tokenizer("w1 w2 w3 w4", return_tensors="pt").to("tpu")
        start = time.perf_counter()
        tokens = model.generate(**prompt, max_new_tokens=12, do_sample=False)
        print(f"generate {tokenizer.decode(tokens[0])!r} ({time.perf_counter() - start:.1f} s, first call)")
        args = TrainingArguments(output_dir=os.path.join(folder, "out"), per_device_train_batch_size=8,
                                 max_steps=steps, learning_rate=3e-3, max_grad_norm=1.0, report_to=[],
                                 save_strategy="no", logging_steps=1, disable_tqdm=True,
                                 dataloader_pin_memory=False, log_level="error")
        trainer = Trainer(model=model.train(), args=args, train_dataset=Counting())
        trainer.remove_callback(PrinterCallback)  # the summary reports the losses
        result = trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return {"losses": losses, "steps_per_s": result.metrics["train_steps_per_second"]}


# ---- summary -----------------------------------------------------------------------------------------------

def plot(path: str, tpu_losses: list[float], cpu_losses: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(tpu_losses, label="tpu")
    ax.plot(cpu_losses, "--", label="CPU torch (same data and weights)")
    ax.set(xlabel="step", ylabel="cross-entropy", title="small GPT on the demo corpus")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="torchtpu demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="GPT training steps on tpu (default 300)")
    parser.add_argument("--cpu-steps", type=int, default=40, help="the same loop on CPU, for agreement and speed")
    parser.add_argument("--hf-steps", type=int, default=10, help="Trainer steps for the tiny Llama")
    parser.add_argument("--devices", type=int, help="virtual devices the CPU plugin presents")
    parser.add_argument("--mode", choices=["strict", "fused", "debug", "compiled"], default="strict",
                        help="strict: each op runs asynchronously (default); fused: ops are recorded and run as "
                             "one program per step; debug: each op waits for its result (docs/modes.md); "
                             "compiled: the GPT step runs under torch.compile(backend='tpu') (docs/compile.md)")
    parser.add_argument("--no-hf", action="store_true", help="skip the Hugging Face part")
    parser.add_argument("--plot", default="torchtpu_demo_loss.png", help="where the loss-curve plot goes")
    args = parser.parse_args(argv)
    # The demo's generate compiles per cache capacity on purpose; the summary counts the programs.
    warnings.filterwarnings("ignore", message="torchtpu: .* has compiled")
    # Read when the plugin loads, which is after this point.
    if args.devices:
        os.environ["TORCHTPU_NUM_DEVICES"] = str(args.devices)
    torchtpu.eager_mode("strict" if args.mode == "compiled" else args.mode)

    device_report()
    torchtpu.reset_metrics()
    data, alphabet = corpus()
    from torchtpu.testing.models import SmallGPT

    torch.manual_seed(0)
    cpu_model = SmallGPT(vocab=len(alphabet), dim=64, heads=4, layers=2, context=CONTEXT)
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    print(f"\ngpt      {sum(p.numel() for p in cpu_model.parameters()):,} parameters, {len(data):,} characters, "
          f"batch {BATCH} x {CONTEXT}")
    tpu_losses, tpu_seconds = gpt_loop(tpu_model, data, args.steps, "tpu", progress=True,
                                       compiled=args.mode == "compiled")
    cpu_steps = min(args.cpu_steps, args.steps)
    cpu_losses, cpu_seconds = gpt_loop(cpu_model, data, cpu_steps, "cpu")
    agreement = max(abs(t - c) for t, c in zip(tpu_losses, cpu_losses))
    print(f"loss     {tpu_losses[0]:.3f} -> {tpu_losses[-1]:.3f}; first {cpu_steps} steps within {agreement:.1e} "
          f"of CPU torch")
    torch.manual_seed(0)
    print("sample   " + write(tpu_model.eval(), alphabet, "The chip ", 160, "tpu").replace("\n", " "))

    hf = None
    if not args.no_hf:
        print()
        hf = hf_part(args.hf_steps)
        print(f"trainer  {args.hf_steps} steps, loss {hf['losses'][0]:.3f} -> {hf['losses'][-1]:.3f}")

    ops = torchtpu.metrics()["ops"]
    compiles = sum(op["compiles"] for op in ops.values())
    hits = sum(op["cache_hits"] for op in ops.values())
    fallbacks = {name: op["fallbacks"] for name, op in ops.items() if op["fallbacks"]}
    tpu_rate = (args.steps - 1) / tpu_seconds
    cpu_rate = (cpu_steps - 1) / cpu_seconds if cpu_steps > 1 else float("nan")
    print("\n| summary | value |\n|---|---|")
    print(f"| GPT steps/s, tpu (after the first step) | {tpu_rate:.1f} |")
    print(f"| GPT steps/s, CPU torch, same loop | {cpu_rate:.1f} |")
    print(f"| tpu time per step / CPU | {cpu_rate / tpu_rate:.2f}x |")
    if hf:
        print(f"| Trainer steps/s, tiny Llama on tpu | {hf['steps_per_s']:.1f} |")
    print(f"| programs compiled / cache hits (per op) | {compiles} / {hits} |")
    fused = torchtpu.metrics().get("fused", {})
    if fused.get("programs_run"):
        print(f"| fused programs run / compiled | {fused['programs_run']} / {fused['compiles']} |")
    replays = torchtpu.metrics()["compiled"]["replays"]
    if replays:
        print(f"| compiled graph replays | {replays} |")
    print(f"| CPU fallbacks | {sum(fallbacks.values())} {sorted(fallbacks) if fallbacks else ''} |")
    plot(args.plot, tpu_losses, cpu_losses)
    print(f"\nloss curve written to {args.plot}")
    if fallbacks or agreement > 1e-3:
        raise SystemExit("the tpu run fell back to CPU or disagrees with CPU torch")


if __name__ == "__main__":
    main()
