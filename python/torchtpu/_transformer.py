"""``nn.TransformerEncoder``'s sparsity fast path on ``tpu``.

In eval mode with a ``src_key_padding_mask``, PyTorch's ``TransformerEncoder.forward`` turns the batch into a
nested tensor (dropping the padded positions), runs the layers on it and pads the result back with zeros. It
takes that path on every device it lists, and it lists the PrivateUse1 backend, but tpu has no nested tensors:
the call failed with "Could not run 'aten::_to_copy' with arguments from the 'NestedTensortpu' backend".

On tpu the encoder now computes the same result densely: each layer gets the padding mask (so no position
attends to padding), and the padded positions of the result are zero before the final norm, as the nested path
leaves them. The decision mirrors PyTorch's own conditions (torch 2.13's ``TransformerEncoder.forward``), so
training mode, a ``mask``, autocast, gradients or a mask that is not left-aligned take PyTorch's dense path
unchanged, as on CPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _takes_nested_path(encoder: torch.nn.TransformerEncoder, src, mask, src_key_padding_mask) -> bool:
    """Whether PyTorch's forward would convert ``src`` to a nested tensor (its conditions, in its order)."""
    first = encoder.layers[0]
    if not (torch.backends.mha.get_fastpath_enabled() and getattr(encoder, "use_nested_tensor", False)):
        return False
    if first.training or src.dim() != 3 or src_key_padding_mask is None or mask is not None or src.is_nested:
        return False
    if torch.is_autocast_enabled():
        return False
    do_mask_check = getattr(encoder, "mask_check", True)
    if do_mask_check and torch.compiler.is_compiling():
        return False
    if do_mask_check and not torch._nested_tensor_from_mask_left_aligned(src, src_key_padding_mask.logical_not()):
        return False
    attention, norm1, norm2 = first.self_attn, first.norm1, first.norm2
    tensor_args = (src, attention.in_proj_weight, attention.in_proj_bias, attention.out_proj.weight,
                   attention.out_proj.bias, norm1.weight, norm1.bias, norm2.weight, norm2.bias,
                   first.linear1.weight, first.linear1.bias, first.linear2.weight, first.linear2.bias)
    if torch.overrides.has_torch_function(tensor_args):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensor_args))


def install() -> None:
    original = torch.nn.TransformerEncoder.forward
    if getattr(original, "_torchtpu", False):
        return

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        if src.device.type != "tpu" or not _takes_nested_path(self, src, mask, src_key_padding_mask):
            return original(self, src, mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        padding = F._canonical_mask(mask=src_key_padding_mask, mask_name="src_key_padding_mask",
                                    other_type=None, other_name="", target_type=src.dtype, check_other=False)
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=None, is_causal=is_causal is True, src_key_padding_mask=padding)
        # [batch, seq] against a [batch, seq, features] output: the encoder keeps use_nested_tensor only for
        # batch_first layers.
        padded = src_key_padding_mask if src_key_padding_mask.dtype == torch.bool else padding != 0
        output = output.masked_fill(padded.unsqueeze(-1), 0.0)
        return output if self.norm is None else self.norm(output)

    forward._torchtpu = True
    forward.__doc__ = original.__doc__
    torch.nn.TransformerEncoder.forward = forward
