"""torch.nn's Transformer modules on tpu against CPU: nn.TransformerEncoder in eval mode with a padding mask
(CPU's nested-tensor fast path, which tpu computes densely with the same result), training mode, and the
paths PyTorch keeps dense (a mask that is not left-aligned, an attention mask)."""
import pytest
import torch
from torch.testing import assert_close

import torchtpu  # noqa: F401

TPU = "tpu"
TOL = dict(rtol=1e-5, atol=1e-5)


def encoder(norm: bool, norm_first: bool = False) -> torch.nn.TransformerEncoder:
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0, norm_first=norm_first)
    return torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(32) if norm else None,
                                       enable_nested_tensor=not norm_first)


def padding_mask(lengths, seq=7) -> torch.Tensor:
    return torch.arange(seq)[None, :] >= torch.tensor(lengths)[:, None]  # True at padded positions


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_eval_with_padding_mask_matches_cpus_nested_fast_path(norm, mask_dtype):
    model = encoder(norm).eval()
    x = torch.randn(3, 7, 32)
    mask = padding_mask([5, 7, 3])
    if mask_dtype == torch.float32:
        mask = torch.zeros(mask.shape).masked_fill(mask, float("-inf"))
    with torch.no_grad():
        expected = model(x, src_key_padding_mask=mask)
        actual = model.to(TPU)(x.to(TPU), src_key_padding_mask=mask.to(TPU))
    assert actual.shape == expected.shape
    assert_close(actual.cpu(), expected, **TOL)  # zeros (or the norm of zeros) at the padded positions too


@pytest.mark.parametrize("case", ["training", "not left-aligned", "with attention mask", "grad enabled"])
def test_dense_paths_match_cpu(case):
    model = encoder(norm=True)
    x = torch.randn(3, 7, 32)
    mask = padding_mask([5, 7, 3])
    kwargs = dict(src_key_padding_mask=mask)
    if case == "training":
        model.train()
    else:
        model.eval()
    if case == "not left-aligned":
        kwargs["src_key_padding_mask"] = mask.flip(1)
    if case == "with attention mask":
        kwargs["mask"] = torch.nn.Transformer.generate_square_subsequent_mask(7)
    expected = model(x, **kwargs)
    tpu_model = model.to(TPU)
    actual = tpu_model(x.to(TPU), **{k: v.to(TPU) for k, v in kwargs.items()})
    assert_close(actual.detach().cpu(), expected.detach(), **TOL)
    if case in ("training", "grad enabled"):
        actual.sum().backward()
        assert all(p.grad is not None for p in tpu_model.parameters())


def test_norm_first_encoder_matches_cpu():
    model = encoder(norm=False, norm_first=True).eval()
    x = torch.randn(2, 7, 32)
    mask = padding_mask([4, 6])
    with torch.no_grad():
        expected = model(x, src_key_padding_mask=mask)
        actual = model.to(TPU)(x.to(TPU), src_key_padding_mask=mask.to(TPU))
    assert_close(actual.cpu(), expected, **TOL)
