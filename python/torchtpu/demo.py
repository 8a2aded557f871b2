"""The demo behind `./run.sh demo`: train a small MLP on `tpu` and on CPU from the same initial weights
and the same data, print the loss falling and how closely the two runs agree.

    python -m torchtpu.demo [--steps 50]
"""
from __future__ import annotations

import argparse
import copy
import time

import torch

import torchtpu


def make_problem(seed: int) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)
    )
    x = torch.randn(128, 16)
    y = (x[:, :4].sum(dim=1, keepdim=True)).sin()
    return model, x, y


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, momentum: float = 0.9) -> list[float]:
    """SGD on mse_loss; returns the loss of every step (each .item() is a sync point)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()

    info = torchtpu.plugin_info()
    print(f"tpu device: {torch.tpu.device_count()} x {info['platform']} via {info['path']}")
    model, x, y = make_problem(seed=0)
    tpu_model = copy.deepcopy(model).to("tpu")

    start = time.perf_counter()
    cpu_losses = train(model, x, y, args.steps)
    cpu_seconds = time.perf_counter() - start
    torchtpu.reset_metrics()
    start = time.perf_counter()
    tpu_losses = train(tpu_model, x.to("tpu"), y.to("tpu"), args.steps)
    tpu_seconds = time.perf_counter() - start

    print(f"{'step':>5} {'tpu loss':>12} {'cpu loss':>12} {'rel. diff':>10}")
    for step, (t, c) in enumerate(zip(tpu_losses, cpu_losses)):
        if step % 10 == 0 or step == args.steps - 1:
            print(f"{step:>5} {t:>12.6f} {c:>12.6f} {abs(t - c) / abs(c):>10.2e}")
    worst = max(abs(t - c) / abs(c) for t, c in zip(tpu_losses, cpu_losses))
    ops = torchtpu.metrics()["ops"]
    fallbacks = sum(c["fallbacks"] for c in ops.values())
    compiles = sum(c["compiles"] for c in ops.values())
    print(f"loss {tpu_losses[0]:.4f} -> {tpu_losses[-1]:.4f}; worst relative difference to CPU {worst:.2e}")
    print(f"tpu: {tpu_seconds:.2f} s ({compiles} programs compiled, {fallbacks} CPU fallbacks); cpu: {cpu_seconds:.2f} s")
    if worst > 1e-4 or fallbacks:
        raise SystemExit("tpu and CPU runs disagree or the run fell back to CPU")


if __name__ == "__main__":
    main()
