"""Real models train on tpu: 20 steps from the same weights and data as on CPU, losses agreeing within the
stated tolerance, with zero CPU fallbacks, in each eager mode (strict, fused, debug). Dropout draws
different masks on the two devices, so the agreement runs use p=0 and a separate run checks that the model
with dropout trains natively."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.metrics import fallback_ops
from torchtpu.testing.models import SmallCNN, SmallGPT, SmallLSTM, train_step


def cnn_problem(dropout: float):
    torch.manual_seed(0)
    model = SmallCNN(dropout)
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    optimizer = lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9)  # noqa: E731
    return model, (x, y), lambda out, target: F.cross_entropy(out, target), optimizer, None


def gpt_problem(dropout: float):
    torch.manual_seed(0)
    model = SmallGPT(dropout=dropout)
    data = torch.randint(0, 64, (4, 17))
    optimizer = lambda params: torch.optim.AdamW(params, lr=3e-3, weight_decay=0.1)  # noqa: E731
    loss = lambda out, target: F.cross_entropy(out.flatten(0, 1), target.flatten())  # noqa: E731
    return model, (data[:, :-1], data[:, 1:]), loss, optimizer, 1.0


def lstm_problem(dropout: float):
    del dropout
    torch.manual_seed(0)
    model = SmallLSTM()
    x, y = torch.randn(8, 5, 8), torch.randn(8, 1)
    optimizer = lambda params: torch.optim.Adam(params, lr=1e-2)  # noqa: E731
    return model, (x, y), F.mse_loss, optimizer, None


PROBLEMS = {"cnn": cnn_problem, "gpt": gpt_problem, "lstm": lstm_problem}
# Relative loss tolerance after 20 steps: reductions and matmuls accumulate in a different order on the
# device, and Adam's division by sqrt(v) amplifies last-bit differences over steps.
TOLERANCE = {"cnn": 1e-4, "gpt": 1e-3, "lstm": 1e-3}


def train(model, batch, loss_fn, make_optimizer, clip, device, steps=20):
    model = model.to(device)
    x, y = (t.to(device) for t in batch)
    optimizer = make_optimizer(model.parameters())
    losses = []
    for _ in range(steps):
        losses.append(train_step(model, optimizer, loss_fn, x, y, clip).item())
    return losses


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_model_matches_cpu_without_fallback(name, mode):
    model, batch, loss_fn, make_optimizer, clip = PROBLEMS[name](dropout=0.0)
    tpu_model = copy.deepcopy(model)
    cpu_losses = train(model, batch, loss_fn, make_optimizer, clip, "cpu")
    torchtpu.reset_metrics()
    with torchtpu.eager_mode(mode):
        tpu_losses = train(tpu_model, batch, loss_fn, make_optimizer, clip, "tpu")
    assert fallback_ops() == {}
    assert tpu_losses[-1] < tpu_losses[0]
    for step, (t, c) in enumerate(zip(tpu_losses, cpu_losses)):
        assert math.isclose(t, c, rel_tol=TOLERANCE[name]), f"step {step}: tpu {t} vs cpu {c}"


@pytest.mark.parametrize("name", ["cnn", "gpt"])
def test_model_with_dropout_trains_natively(name):
    model, batch, loss_fn, make_optimizer, clip = PROBLEMS[name](dropout=0.1)
    torchtpu.reset_metrics()
    losses = train(model, batch, loss_fn, make_optimizer, clip, "tpu")
    assert fallback_ops() == {}
    assert losses[-1] < losses[0]
