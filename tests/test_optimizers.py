"""Optimizers run natively: SGD, Adam, AdamW, RMSprop and Adagrad on the foreach (one program per list op),
single-tensor and fused (one program per step) paths, and gradient clipping, each matching CPU after a few
steps with zero CPU fallbacks."""
import copy

import pytest
import torch
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

OPTIMIZERS = {
    "sgd": lambda params, **path: torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                                  **path),
    "sgd_plain": lambda params, **path: torch.optim.SGD(params, lr=0.1, **path),
    "adam": lambda params, **path: torch.optim.Adam(params, lr=1e-2, **path),
    "adam_amsgrad": lambda params, **path: torch.optim.Adam(params, lr=1e-2, amsgrad=True, weight_decay=0.01, **path),
    "adamw": lambda params, **path: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, **path),
    "adamw_maximize": lambda params, **path: torch.optim.AdamW(params, lr=1e-2, maximize=True, **path),
    "rmsprop": lambda params, **path: torch.optim.RMSprop(params, lr=1e-2, momentum=0.5, centered=True, **path),
    "adagrad": lambda params, **path: torch.optim.Adagrad(params, lr=1e-1, **path),
}
# The optimizers PyTorch offers fused=True for, and that tpu lowers fused.
FUSED = ("sgd", "sgd_plain", "adam", "adam_amsgrad", "adamw", "adamw_maximize")
PATHS = {"foreach": {"foreach": True}, "single_tensor": {"foreach": False}, "fused": {"fused": True}}


def steps(model, make_optimizer, path, device, clip=None, n=5):
    model = model.to(device)
    optimizer = make_optimizer(model.parameters(), **PATHS[path])
    torch.manual_seed(1)
    x, y = torch.randn(16, 8).to(device), torch.randn(16, 2).to(device)
    norms = []
    for _ in range(n):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        if clip is not None:
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=path == "foreach").item())
        optimizer.step()
    return model, norms


@pytest.mark.parametrize("name,path", [(name, path) for name in sorted(OPTIMIZERS) for path in sorted(PATHS)
                                       if path != "fused" or name in FUSED])
def test_optimizer_matches_cpu_without_fallback(name, path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    tpu_model = copy.deepcopy(model)
    cpu_model, _ = steps(model, OPTIMIZERS[name], path, "cpu")
    torchtpu.reset_metrics()
    tpu_model, _ = steps(tpu_model, OPTIMIZERS[name], path, "tpu")
    assert fallback_ops() == {}
    ran = {op for op, c in torchtpu.metrics()["ops"].items() if c["executions"]}
    if path == "foreach":
        assert any(op.startswith("aten::_foreach_") for op in ran), "the foreach path ran per tensor"
    if path == "fused":
        assert any(op.startswith("aten::_fused_") for op in ran)
    for p_tpu, p_cpu in zip(tpu_model.parameters(), cpu_model.parameters()):
        assert_close(p_tpu.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("path", ["foreach", "single_tensor"])
def test_clip_grad_norm_matches_cpu(path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    tpu_model = copy.deepcopy(model)

    def make(params, **path_options):
        return torch.optim.SGD(params, lr=0.5, **path_options)

    _, cpu_norms = steps(model, make, path, "cpu", clip=0.1)
    torchtpu.reset_metrics()
    _, tpu_norms = steps(tpu_model, make, path, "tpu", clip=0.1)
    assert fallback_ops() == {}
    assert_close(torch.tensor(tpu_norms), torch.tensor(cpu_norms), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_fused_step_with_zero_weight_decay_keeps_an_infinite_parameter(name):
    # weight_decay = 0 adds nothing, as on CPU: 0 * inf would make the gradient NaN.
    kind = getattr(torch.optim, name)
    results = []
    for device in ("cpu", "tpu"):
        p = torch.tensor([float("inf"), 1.0, -2.0], device=device, requires_grad=True)
        p.grad = torch.tensor([0.5, -0.5, 1.0], device=device)
        kind([p], lr=0.1, weight_decay=0.0, fused=True).step()
        results.append(p.detach().cpu())
    assert_close(results[1], results[0])


@pytest.mark.parametrize("kind", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD])
@pytest.mark.parametrize("lr_device", ["cpu", "tpu"])
def test_fused_step_with_a_tensor_learning_rate_is_lowered(kind, lr_device):
    # A tensor lr (what compiled optimizers are advised to use) picks the fused kernels' tensor_lr overloads,
    # which PyTorch ships without meta kernels (torchtpu/_meta.py supplies them).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    tpu_model = copy.deepcopy(model)
    extra = {"momentum": 0.9} if kind is torch.optim.SGD else {}
    cpu_model, _ = steps(model, lambda params, **path: kind(params, lr=torch.tensor(1e-2), **extra, **path),
                         "fused", "cpu")
    torchtpu.reset_metrics()
    tpu_model, _ = steps(tpu_model, lambda params, **path: kind(params, lr=torch.tensor(1e-2, device=lr_device),
                                                                **extra, **path), "fused", "tpu")
    assert fallback_ops() == {}
    assert any(op.endswith(".tensor_lr") for op in torchtpu.metrics()["ops"])
    for p_tpu, p_cpu in zip(tpu_model.parameters(), cpu_model.parameters()):
        assert_close(p_tpu.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("options", [dict(momentum=0.9), dict(momentum=0.9, nesterov=True, weight_decay=0.01)],
                         ids=["momentum", "nesterov_weight_decay"])
def test_foreach_sgd_steps_complex_parameters_natively(options):
    """SGD's foreach path keeps complex parameters complex (Adam and the others step their real views)."""
    torch.manual_seed(0)
    start = [torch.randn(3, 4, dtype=torch.complex64), torch.randn(5, dtype=torch.complex64)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(3)]
    results = []
    torchtpu.reset_metrics()
    for device in ("cpu", "tpu"):
        params = [torch.nn.Parameter(p.clone().to(device)) for p in start]
        opt = torch.optim.SGD(params, lr=0.1, foreach=True, **options)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.to(device)
            opt.step()
        results.append([p.detach().cpu() for p in params])
    for cpu, tpu in zip(*results):
        assert_close(tpu, cpu)
    assert not fallback_ops(), f"CPU fallbacks: {fallback_ops()}"
