"""Optimizers run natively: SGD, Adam and AdamW on both the foreach and the single-tensor paths, and
gradient clipping, each matching CPU after a few steps with zero CPU fallbacks."""
import copy

import pytest
import torch
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

OPTIMIZERS = {
    "sgd": lambda params, foreach: torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                                   foreach=foreach),
    "adam": lambda params, foreach: torch.optim.Adam(params, lr=1e-2, foreach=foreach),
    "adam_amsgrad": lambda params, foreach: torch.optim.Adam(params, lr=1e-2, amsgrad=True, foreach=foreach),
    "adamw": lambda params, foreach: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=foreach),
}


def steps(model, make_optimizer, foreach, device, clip=None, n=5):
    model = model.to(device)
    optimizer = make_optimizer(model.parameters(), foreach)
    torch.manual_seed(1)
    x, y = torch.randn(16, 8).to(device), torch.randn(16, 2).to(device)
    norms = []
    for _ in range(n):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        if clip is not None:
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item())
        optimizer.step()
    return model, norms


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "single_tensor"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_cpu_without_fallback(name, foreach):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    tpu_model = copy.deepcopy(model)
    cpu_model, _ = steps(model, OPTIMIZERS[name], foreach, "cpu")
    torchtpu.reset_metrics()
    tpu_model, _ = steps(tpu_model, OPTIMIZERS[name], foreach, "tpu")
    assert fallback_ops() == {}
    for p_tpu, p_cpu in zip(tpu_model.parameters(), cpu_model.parameters()):
        assert_close(p_tpu.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "single_tensor"])
def test_clip_grad_norm_matches_cpu(foreach):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    tpu_model = copy.deepcopy(model)

    def make(params, _):
        return torch.optim.SGD(params, lr=0.5)

    _, cpu_norms = steps(model, make, foreach, "cpu", clip=0.1)
    torchtpu.reset_metrics()
    _, tpu_norms = steps(tpu_model, make, foreach, "tpu", clip=0.1)
    assert fallback_ops() == {}
    assert_close(torch.tensor(tpu_norms), torch.tensor(cpu_norms), rtol=1e-4, atol=1e-6)
