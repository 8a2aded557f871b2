"""The workloads torchtpu.aot checks for TPU readiness: the models of the test suite (MLP, CNN, GPT, the GPT
through torchtpu's Pallas kernels, the GPT sharded over every device (SPMD), LSTM, an FFT mixer) and a
Hugging Face Llama forward and training step built from a tiny local config (nothing downloaded).

Each builder makes its model and data on ``device`` (seeded) and returns one step; the checker runs a few
steps, so the programs of the first step (optimizer state creation) and of the steady state are all seen.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from torchtpu.testing.models import SmallCNN, SmallGPT, SmallLSTM, train_step

Step = Callable[[], torch.Tensor]


def _train_step(model, optimizer, loss_fn, x, y, clip=None, scheduler=None) -> Step:
    return lambda: train_step(model, optimizer, loss_fn, x, y, clip, scheduler)


def make_mlp(device) -> Step:
    """MLP 32-64-10, AdamW with a cosine schedule, cross entropy (batch 16)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    x, y = torch.randn(16, 32).to(device), torch.randint(0, 10, (16,)).to(device)
    return _train_step(model, opt, F.cross_entropy, x, y, scheduler=sched)


def make_cnn(device) -> Step:
    """SmallCNN on 8x3x16x16 images, SGD with momentum, cross entropy, dropout 0.1."""
    torch.manual_seed(0)
    model = SmallCNN().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(8, 3, 16, 16).to(device), torch.randint(0, 10, (8,)).to(device)
    return _train_step(model, opt, F.cross_entropy, x, y)


def make_gpt(device) -> Step:
    """SmallGPT (2 layers, d 32, context 16, batch 4): causal SDPA, AdamW, clip_grad_norm_."""

    torch.manual_seed(0)
    model = SmallGPT(dropout=0.1).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    data = torch.randint(0, 64, (4, 17)).to(device)

    def loss(out, target):
        return F.cross_entropy(out.flatten(0, 1), target.flatten())

    return _train_step(model, opt, loss, data[:, :-1], data[:, 1:], clip=1.0)


def make_gpt_kernels(device) -> Step:
    """SmallGPT with RMSNorm whose attention and norms run as torchtpu's Pallas kernels (torchtpu.kernels):
    the recorded programs hold the kernels interpreted, and each kernel's Mosaic build is recorded beside."""
    from torchtpu import kernels

    torch.manual_seed(0)
    model = SmallGPT(norm="rms").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, 64, (4, 17)).to(device)

    def loss(out, target):
        return F.cross_entropy(out.flatten(0, 1), target.flatten())

    step = _train_step(model, opt, loss, data[:, :-1], data[:, 1:], clip=1.0)

    def run() -> torch.Tensor:
        with kernels.enabled():
            return step()

    return run


def make_gpt_spmd(device) -> Step:
    """SmallGPT (batch 8) trained over every device of the process as one SPMD program per op: the batch split
    over a ``d`` mesh axis, every parameter whose first dim divides split along it (FSDP-style), AdamW. Run
    with ``TORCHTPU_NUM_DEVICES=4`` the programs are partitioned 4 ways, as a v5e:2x2 slice runs them."""
    from torchtpu.distributed import Mesh, shard

    torch.manual_seed(0)
    model = SmallGPT().to(device)
    mesh = Mesh((torch.tpu.device_count(),), ("d",))
    for p in model.parameters():
        shard(p, mesh, ("d",) + (None,) * (p.dim() - 1) if p.shape[0] % torch.tpu.device_count() == 0 else None)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = shard(torch.randint(0, 64, (8, 17)).to(device), mesh, ("d", None))

    def loss(out, target):
        return F.cross_entropy(out.flatten(0, 1), target.flatten())

    return _train_step(model, opt, loss, data[:, :-1], data[:, 1:], clip=1.0)


def make_lstm(device) -> Step:
    """SmallLSTM on 8x5x8 sequences, Adam, MSE."""
    torch.manual_seed(0)
    model = SmallLSTM().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 5, 8).to(device), torch.randn(8, 1).to(device)
    return _train_step(model, opt, F.mse_loss, x, y)


def make_spectral(device) -> Step:
    """An FNet-style mixer (token mixing by the real part of a 2-d FFT, then an MLP) and a spectral loss
    (rfft magnitudes), AdamW: complex64 programs, stablehlo.fft forward and backward."""
    torch.manual_seed(0)

    class FourierMixer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(32)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + torch.fft.fft2(self.norm(x)).real
            return x + self.mlp(x)

    model = FourierMixer().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 16, 32).to(device), torch.randn(4, 16, 32).to(device)

    def loss(out, target):
        return F.mse_loss(torch.fft.rfft(out, dim=1).abs(), torch.fft.rfft(target, dim=1).abs())

    return _train_step(model, opt, loss, x, y)


def _llama(device):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device)
    ids = torch.randint(0, 256, (2, 16)).to(device)
    return model, ids


def make_llama_forward(device) -> Step:
    """Hugging Face LlamaForCausalLM (2 layers, hidden 64, GQA 4/2 heads), eval forward with labels."""
    model, ids = _llama(device)
    model.eval()

    def step() -> torch.Tensor:
        with torch.no_grad():
            return model(input_ids=ids, labels=ids).loss

    return step


def make_llama_train(device) -> Step:
    """The same Llama, a training step: forward with labels, backward, AdamW."""
    model, ids = _llama(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> torch.Tensor:
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    return step


WORKLOADS: dict[str, Callable[[object], Step]] = {
    "mlp": make_mlp,
    "cnn": make_cnn,
    "gpt": make_gpt,
    "gpt_kernels": make_gpt_kernels,
    "gpt_spmd": make_gpt_spmd,
    "lstm": make_lstm,
    "spectral": make_spectral,
    "llama_forward": make_llama_forward,
    "llama_train": make_llama_train,
}
