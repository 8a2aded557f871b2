"""Tiny Hugging Face models built from configs (nothing downloaded), shared by tests/hf and bench/bench_hf.py.

Each architecture is the real transformers class at toy size (2 layers, hidden 64, vocabulary 128) with a
seeded initialisation and a fixed batch, so a run on ``tpu`` can be compared with the same run on CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

VOCAB = 128
BATCH = 2
SEQ = 12


@dataclass(frozen=True)
class TinyArchitecture:
    name: str
    task: str
    build: Callable[[], torch.nn.Module]  # seeded: two calls give the same weights
    inputs: Callable[[], dict]  # CPU tensors, labels included; seeded
    generates: bool  # whether `generate` applies (causal LM and seq2seq)


def _seeded(make_config, model_class):
    def build():
        torch.manual_seed(0)
        return model_class(make_config()).eval()

    return build


def _ids(seq=SEQ, seed=1):
    return torch.randint(3, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(seed))


def _causal_inputs():
    ids = _ids()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _decoder_common():
    return dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _architectures() -> dict[str, TinyArchitecture]:
    import transformers as hf

    def llama():
        return hf.LlamaConfig(**_decoder_common())

    def qwen2():
        return hf.Qwen2Config(**_decoder_common())

    def mistral():
        return hf.MistralConfig(**_decoder_common(), sliding_window=8)  # shorter than SEQ: the window masks

    def mixtral():  # mixture of experts: top-2 routing over 4 experts, the router's auxiliary loss included
        return hf.MixtralConfig(**_decoder_common(), num_local_experts=4, num_experts_per_tok=2,
                                output_router_logits=True)

    def gpt2():
        return hf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=1,
                             eos_token_id=2, pad_token_id=0)

    def bert():
        return hf.BertConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=64)

    def t5():
        return hf.T5Config(vocab_size=VOCAB, d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
                           decoder_start_token_id=0, pad_token_id=0, eos_token_id=2)

    def vit():
        return hf.ViTConfig(image_size=32, patch_size=8, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_labels=5)

    def whisper():  # whisper-tiny's shape, scaled down: conv front end over mel frames, encoder-decoder
        return hf.WhisperConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32,
                                max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                decoder_start_token_id=1, suppress_tokens=[], begin_suppress_tokens=[])

    def seq2seq_inputs():
        ids = _ids()
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": _ids(8, seed=2)}

    def image_inputs():
        gen = torch.Generator().manual_seed(1)
        return {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=gen), "labels": torch.tensor([1, 3])}

    def speech_inputs():  # 64 mel frames; the conv front end halves them to max_source_positions
        gen = torch.Generator().manual_seed(1)
        return {"input_features": torch.randn(BATCH, 16, 64, generator=gen), "labels": _ids(8, seed=2)}

    def masked_inputs():
        ids = _ids()
        labels = torch.full_like(ids, -100)
        labels[:, ::3] = ids[:, ::3]
        masked = ids.clone()
        masked[:, ::3] = 4  # stands in for [MASK]
        return {"input_ids": masked, "attention_mask": torch.ones_like(ids), "labels": labels}

    table = [
        TinyArchitecture("llama", "causal LM", _seeded(llama, hf.LlamaForCausalLM), _causal_inputs, True),
        TinyArchitecture("qwen2", "causal LM", _seeded(qwen2, hf.Qwen2ForCausalLM), _causal_inputs, True),
        TinyArchitecture("mistral", "causal LM", _seeded(mistral, hf.MistralForCausalLM), _causal_inputs, True),
        TinyArchitecture("mixtral", "causal LM (MoE)", _seeded(mixtral, hf.MixtralForCausalLM), _causal_inputs, True),
        TinyArchitecture("gpt2", "causal LM", _seeded(gpt2, hf.GPT2LMHeadModel), _causal_inputs, True),
        TinyArchitecture("bert", "masked LM", _seeded(bert, hf.BertForMaskedLM), masked_inputs, False),
        TinyArchitecture("t5", "seq2seq", _seeded(t5, hf.T5ForConditionalGeneration), seq2seq_inputs, True),
        TinyArchitecture("vit", "image classification", _seeded(vit, hf.ViTForImageClassification),
                         image_inputs, False),
        TinyArchitecture("whisper", "speech seq2seq", _seeded(whisper, hf.WhisperForConditionalGeneration),
                         speech_inputs, True),
    ]
    return {arch.name: arch for arch in table}


def architectures() -> dict[str, TinyArchitecture]:
    """Name -> TinyArchitecture, in the order docs/huggingface.md lists them (imports transformers)."""
    return _architectures()


def generate_inputs(inputs: dict) -> dict:
    """The inputs `generate` takes: everything but the labels."""
    return {k: v for k, v in inputs.items() if k != "labels"}


def word_tokenizer(vocab: int = VOCAB):
    """A word-level fast tokenizer over "w0".."wN" built in memory: "<pad>" 0, "<s>" 1, "</s>" 2, "<unk>" 3."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(vocab - 4)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece()  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")


def tiny_unet():
    """A diffusers UNet2DModel at toy size (16x16 RGB, two resolutions, one attention block each way)."""
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8,
                       attention_head_dim=8).eval()
