"""Small models shared by the tests and the benchmarks, so both exercise the same architecture."""
from __future__ import annotations

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.dropout(self.proj(attention.transpose(1, 2).reshape(b, t, c)))
        return x + self.dropout(self.mlp(self.ln2(x)))


class SmallGPT(torch.nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, context: int = 16,
                 dropout: float = 0.0):
        super().__init__()
        self.token = torch.nn.Embedding(vocab, dim)
        self.position = torch.nn.Embedding(context, dim)
        self.blocks = torch.nn.Sequential(*[Block(dim, heads, dropout) for _ in range(layers)])
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.token(idx) + self.position(positions))
        return self.head(self.ln(x))
