"""The loops users run, as benchmark steps: a small GPT training step with default AdamW and gradient
clipping, an MLP with AdamW and a cosine schedule, a KV-cache decode sweep, and Hugging Face Llama greedy
generation with its default (dynamic) cache. Each builder makes the
same workload (same seed, same weights) on the device it is given and returns one iteration."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from torchtpu.testing.models import SmallGPT

Step = Callable[[], torch.Tensor]


def make_gpt_adamw_step(device: torch.device, compile_backend: str | None = None, whole_step: bool = False) -> Step:
    """2-layer GPT (d 128, seq 64, batch 8): default AdamW (foreach), clip_grad_norm_, cross entropy.
    With `compile_backend`, the model and `opt.step` are each wrapped in torch.compile, as a user would, or,
    with `whole_step`, the whole step function is (dynamo splits it at `backward()`)."""
    torch.manual_seed(0)
    model = SmallGPT(vocab=256, dim=128, heads=4, layers=2, context=64).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    idx = torch.randint(0, 256, (8, 65)).to(device)
    x, y = idx[:, :-1], idx[:, 1:]
    compile_parts = compile_backend is not None and not whole_step
    forward = torch.compile(model, backend=compile_backend) if compile_parts else model
    optimizer_step = torch.compile(opt.step, backend=compile_backend) if compile_parts else opt.step

    def step() -> torch.Tensor:
        opt.zero_grad()
        logits = forward(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer_step()
        return loss

    return torch.compile(step, backend=compile_backend) if compile_backend and whole_step else step


def make_mlp_adamw_cosine_step(device: torch.device) -> Step:
    """A tiny MLP with AdamW and CosineAnnealingLR: the learning rate changes every step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    x = torch.randn(16, 32).to(device)
    y = torch.randint(0, 10, (16,)).to(device)

    def step() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss

    return step


def make_kv_cache_sweep(device: torch.device) -> Step:
    """256 decode steps writing a new key and value at a moving position: `cache[:, :, pos] = k`."""
    torch.manual_seed(0)
    keys = torch.zeros(1, 4, 256, 32).to(device)
    values = torch.zeros(1, 4, 256, 32).to(device)
    new_k = torch.randn(1, 4, 32).to(device)
    new_v = torch.randn(1, 4, 32).to(device)

    def step() -> torch.Tensor:
        for pos in range(256):
            keys[:, :, pos] = new_k
            values[:, :, pos] = new_v
        return keys

    return step


def make_llama_generate(new_tokens: int) -> Callable[[torch.device], Step]:
    """HF Llama (2 layers, hidden 64, built from a config, nothing downloaded): greedy `generate` of
    `new_tokens` tokens with the default dynamic cache."""

    def make(device: torch.device) -> Step:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).eval().to(device)
        prompt = torch.randint(0, 256, (1, 8)).to(device)

        def step() -> torch.Tensor:
            return model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)

        return step

    return make
