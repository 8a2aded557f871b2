"""An MLP trains entirely on tpu: 50 SGD steps from the same weights and data as on CPU, losses agree
within 1e-4 relative, with zero CPU fallbacks."""
import copy

import pytest
import torch

import torchtpu
from torchtpu.demo import train


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 32), torch.nn.Sigmoid(), torch.nn.Linear(32, 1),
    )


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_mlp_matches_cpu_with_no_fallback(momentum):
    torch.manual_seed(0)
    model = mlp()
    x, y = torch.randn(128, 16), torch.randn(128, 1)
    tpu_model = copy.deepcopy(model).tpu()
    cpu_losses = train(model, x, y, 50, momentum)
    torchtpu.reset_metrics()
    tpu_losses = train(tpu_model, x.tpu(), y.tpu(), 50, momentum)
    fallbacks = {op: c["fallbacks"] for op, c in torchtpu.metrics()["ops"].items() if c["fallbacks"]}
    assert fallbacks == {}
    assert tpu_losses[-1] < tpu_losses[0]
    for t, c in zip(tpu_losses, cpu_losses):
        assert abs(t - c) <= 1e-4 * abs(c)
    for p_tpu, p_cpu in zip(tpu_model.parameters(), model.parameters()):
        torch.testing.assert_close(p_tpu.cpu(), p_cpu, rtol=1e-4, atol=1e-5)


def test_training_step_is_served_from_the_program_cache():
    torch.manual_seed(0)
    model = mlp().tpu()
    x, y = torch.randn(32, 16).tpu(), torch.randn(32, 1).tpu()
    train(model, x, y, 2, 0.9)
    torchtpu.reset_metrics()
    train(model, x, y, 3, 0.9)
    ops = torchtpu.metrics()["ops"]
    assert sum(c["compiles"] for c in ops.values()) == 0
    assert sum(c["cache_hits"] for c in ops.values()) > 0


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_activation_checkpointing_replays_the_dropout_mask(use_reentrant, mode):
    # torch.utils.checkpoint restores the device's random state before recomputing the forward only when
    # the device module says it is initialised (torch.cuda._initialized); otherwise the recomputation draws
    # a new dropout mask and the gradients are wrong, silently.
    from torch.utils.checkpoint import checkpoint

    def gradients(checkpointed: bool):
        torch.manual_seed(0)
        layer = torch.nn.Linear(8, 32).to("tpu")
        x = torch.randn(4, 8).to("tpu").requires_grad_()
        block = lambda t: torch.nn.functional.dropout(layer(t), 0.5).relu()  # noqa: E731
        torch.manual_seed(9)
        out = checkpoint(block, x, use_reentrant=use_reentrant) if checkpointed else block(x)
        out.square().sum().backward()
        return layer.weight.grad.cpu(), x.grad.cpu()

    with torchtpu.eager_mode(mode):
        for plain, checkpointed in zip(gradients(False), gradients(True)):
            assert torch.equal(plain, checkpointed)
