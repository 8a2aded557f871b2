"""Small models shared by the tests and the benchmarks, so both exercise the same architecture."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _norm(kind: str, dim: int) -> torch.nn.Module:
    return torch.nn.RMSNorm(dim, eps=1e-6) if kind == "rms" else torch.nn.LayerNorm(dim)


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float, norm: str = "layer"):
        super().__init__()
        self.heads = heads
        self.ln1 = _norm(norm, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = _norm(norm, dim)
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
    """A GPT; ``norm="rms"`` takes RMSNorm (Llama's) instead of LayerNorm."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, context: int = 16,
                 dropout: float = 0.0, norm: str = "layer"):
        super().__init__()
        self.token = torch.nn.Embedding(vocab, dim)
        self.position = torch.nn.Embedding(context, dim)
        self.blocks = torch.nn.Sequential(*[Block(dim, heads, dropout, norm) for _ in range(layers)])
        self.ln = _norm(norm, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.token(idx) + self.position(positions))
        return self.head(self.ln(x))


class SmallCNN(torch.nn.Module):
    """Conv, batch norm, max and average pools, dropout, linear; 3x16x16 images, 10 classes."""

    def __init__(self, dropout: float = 0.1):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=1, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.dropout = torch.nn.Dropout(dropout)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.dropout(x.flatten(1)))


class SmallLSTM(torch.nn.Module):
    """Two LSTM layers (batch first, 8 features, hidden 16) and a linear head on the last step."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.out(self.lstm(x)[0][:, -1])


def train_step(model, optimizer, loss_fn, x, y, clip=None, scheduler=None) -> torch.Tensor:
    """One step of the usual loop: zero_grad, forward, loss, backward, optional gradient clipping, the
    optimizer step, optional scheduler step. Returns the loss."""
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss
