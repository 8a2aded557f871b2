"""Recurrent modules and cells on tpu against CPU, with zero CPU fallbacks.

nn.RNN (tanh, relu), nn.GRU and nn.LSTM (with and without proj_size), two layers, one or both directions,
batch-first or not, train for 3 steps from the same weights, data and initial states as on CPU; every
step's loss, output and gradients (of the weights, the input and the initial states) and the final weights
agree. LSTM and GRU steps run through the fused cell ops PyTorch sends accelerators to
(_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backwards); RNN steps decompose into linear and the
activation. The cells (nn.RNNCell, nn.GRUCell, nn.LSTMCell) are checked forward and backward, with and
without bias (the fused backwards then return no bias gradient).
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchtpu
from torchtpu.metrics import fallback_ops

# float32 throughout; matmuls and the batch sums of the bias gradients accumulate in another order on the
# device, which moves the last bits.
TOLERANCE = dict(rtol=1e-4, atol=1e-4)
SEQUENCE, BATCH, INPUT, HIDDEN, PROJECTION, LAYERS, STEPS = 5, 3, 4, 6, 3, 2, 3

MODULES = {
    "rnn_tanh": lambda **options: nn.RNN(INPUT, HIDDEN, nonlinearity="tanh", **options),
    "rnn_relu": lambda **options: nn.RNN(INPUT, HIDDEN, nonlinearity="relu", **options),
    "gru": lambda **options: nn.GRU(INPUT, HIDDEN, **options),
    "lstm": lambda **options: nn.LSTM(INPUT, HIDDEN, **options),
    "lstm_proj": lambda **options: nn.LSTM(INPUT, HIDDEN, proj_size=PROJECTION, **options),
}
# Both optimizers' update programs run on each kind of module across the parametrization.
OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1),
}


def initial_state(module: nn.RNNBase) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    directions = 2 if module.bidirectional else 1
    hidden_out = module.proj_size or module.hidden_size
    h0 = torch.randn(LAYERS * directions, BATCH, hidden_out)
    if isinstance(module, nn.LSTM):
        return h0, torch.randn(LAYERS * directions, BATCH, module.hidden_size)
    return h0


def as_tuple(state) -> tuple[torch.Tensor, ...]:
    return state if isinstance(state, tuple) else (state,)


def train(module: nn.RNNBase, optimizer_name: str, x: torch.Tensor, state, target: torch.Tensor, device: str):
    """Per step: (loss, output, input and state gradients, parameter gradients); then the final weights."""
    module = module.to(device)
    optimizer = OPTIMIZERS[optimizer_name](module.parameters())
    steps = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        inputs = [t.to(device).detach().requires_grad_() for t in (x, *as_tuple(state))]
        output, final_state = module(inputs[0], tuple(inputs[1:]) if len(inputs) > 2 else inputs[1])
        loss = F.mse_loss(output, target.to(device)) + sum(s.pow(2).mean() for s in as_tuple(final_state))
        loss.backward()
        optimizer.step()
        steps.append((loss.detach(), output.detach(), [t.grad for t in inputs],
                      [p.grad.clone() for p in module.parameters()]))
    return steps, [p.detach() for p in module.parameters()]


@pytest.mark.parametrize("batch_first", [False, True], ids=["seq_first", "batch_first"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["one_way", "bidirectional"])
@pytest.mark.parametrize("kind", sorted(MODULES))
def test_module_training_matches_cpu(kind, bidirectional, batch_first, metrics):
    cpu_module = MODULES[kind](num_layers=LAYERS, bidirectional=bidirectional, batch_first=batch_first)
    tpu_module = copy.deepcopy(cpu_module)
    x = torch.randn((BATCH, SEQUENCE, INPUT) if batch_first else (SEQUENCE, BATCH, INPUT))
    state = initial_state(cpu_module)
    output_size = (2 if bidirectional else 1) * (cpu_module.proj_size or HIDDEN)
    target = torch.randn(*x.shape[:2], output_size)
    optimizer_name = "adamw" if bidirectional else "sgd"

    cpu_steps, cpu_weights = train(cpu_module, optimizer_name, x, state, target, "cpu")
    tpu_steps, tpu_weights = train(tpu_module, optimizer_name, x, state, target, "tpu")

    assert fallback_ops() == {}
    assert metrics()["ops"]  # the tpu run went through the device's kernels
    for step, (tpu_step, cpu_step) in enumerate(zip(tpu_steps, cpu_steps)):
        for what, tpu_value, cpu_value in zip(("loss", "output", "input/state grads", "weight grads"),
                                              tpu_step, cpu_step):
            torch.testing.assert_close(_to_cpu(tpu_value), cpu_value, **TOLERANCE, msg=lambda m: f"step {step}, "
                                       f"{what}: {m}")
    torch.testing.assert_close(_to_cpu(tpu_weights), cpu_weights, **TOLERANCE)
    assert cpu_steps[-1][0] < cpu_steps[0][0]  # the comparison covers a run that learns


def _to_cpu(value):
    return [t.cpu() for t in value] if isinstance(value, list) else value.cpu()


CELLS = {
    "rnn_tanh": lambda bias: nn.RNNCell(INPUT, HIDDEN, bias=bias, nonlinearity="tanh"),
    "rnn_relu": lambda bias: nn.RNNCell(INPUT, HIDDEN, bias=bias, nonlinearity="relu"),
    "gru": lambda bias: nn.GRUCell(INPUT, HIDDEN, bias=bias),
    "lstm": lambda bias: nn.LSTMCell(INPUT, HIDDEN, bias=bias),
}


def unroll(cell: nn.RNNCellBase, xs: torch.Tensor, state: tuple[torch.Tensor, ...] | None, device: str):
    """The cell over the sequence; returns the outputs and the gradients of the input, state and weights."""
    cell = cell.to(device)
    xs = xs.to(device).detach().requires_grad_()
    state = None if state is None else tuple(s.to(device).detach().requires_grad_() for s in state)
    current = state if state is None or len(state) == 2 else state[0]
    outputs = []
    for x in xs:
        current = cell(x, current)
        outputs.append(current[0] if isinstance(current, tuple) else current)
    outputs = torch.stack(outputs)
    (outputs.sin().sum() + sum(s.pow(2).sum() for s in as_tuple(current))).backward()
    grads = [xs.grad] + ([] if state is None else [s.grad for s in state]) + [p.grad for p in cell.parameters()]
    return outputs.detach(), grads


@pytest.mark.parametrize("given_state", [True, False], ids=["state", "zero_state"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("kind", sorted(CELLS))
def test_cell_matches_cpu(kind, bias, given_state, metrics):
    cpu_cell = CELLS[kind](bias)
    tpu_cell = copy.deepcopy(cpu_cell)
    xs = torch.randn(SEQUENCE, BATCH, INPUT)
    state = None
    if given_state:
        state = tuple(torch.randn(BATCH, HIDDEN) for _ in range(2 if kind == "lstm" else 1))

    cpu_outputs, cpu_grads = unroll(cpu_cell, xs, state, "cpu")
    tpu_outputs, tpu_grads = unroll(tpu_cell, xs, state, "tpu")

    assert fallback_ops() == {}
    torch.testing.assert_close(tpu_outputs.cpu(), cpu_outputs, **TOLERANCE)
    torch.testing.assert_close(_to_cpu(tpu_grads), cpu_grads, **TOLERANCE)


@pytest.mark.parametrize("mode", ["fused", "debug"])
@pytest.mark.parametrize("kind", ["gru", "lstm_proj"])
def test_module_training_in_other_eager_modes(kind, mode, metrics):
    # The fused cells' rules serve every driver; one bidirectional, batch-first run each.
    cpu_module = MODULES[kind](num_layers=LAYERS, bidirectional=True, batch_first=True)
    tpu_module = copy.deepcopy(cpu_module)
    x = torch.randn(BATCH, SEQUENCE, INPUT)
    state = initial_state(cpu_module)
    target = torch.randn(BATCH, SEQUENCE, 2 * (cpu_module.proj_size or HIDDEN))

    cpu_steps, cpu_weights = train(cpu_module, "adamw", x, state, target, "cpu")
    with torchtpu.eager_mode(mode):
        tpu_steps, tpu_weights = train(tpu_module, "adamw", x, state, target, "tpu")
        tpu_losses = torch.stack([step[0].cpu() for step in tpu_steps])
        tpu_weights = _to_cpu(tpu_weights)

    assert fallback_ops() == {}
    torch.testing.assert_close(tpu_losses, torch.stack([step[0] for step in cpu_steps]), **TOLERANCE)
    torch.testing.assert_close(tpu_weights, cpu_weights, **TOLERANCE)
