"""transformers.Trainer on tpu with nothing but `import torchtpu`, against the same run on CPU.

A tiny Llama (2 layers, hidden 64) on random token ids, built locally. Each run: 4 optimizer steps of batch 4
with gradient accumulation 2, clipping at 1.0 and the default optimizer (fused AdamW).
"""
import os

import pytest
import torch

import torchtpu

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402

STEPS = 4
# float32: the per-step losses agree to ~2e-6 with CPU; 1e-4 leaves room for reduction order.
FP32_TOL = 1e-4
# bf16 autocast: both sides round matmul inputs to bfloat16, but the order of the bf16 sums differs.
BF16_TOL = 2e-2


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, count=32, seq=16, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 128, (count, seq), generator=gen)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_llama():
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def make_trainer(out_dir, use_cpu, bf16=False, steps=STEPS, model=None, **extra):
    args = TrainingArguments(output_dir=str(out_dir), per_device_train_batch_size=4, per_device_eval_batch_size=8,
                             gradient_accumulation_steps=2, max_grad_norm=1.0, max_steps=steps, logging_steps=1,
                             report_to=[], use_cpu=use_cpu, bf16=bf16, seed=0, dataloader_pin_memory=False,
                             disable_tqdm=True, **{"save_strategy": "no", **extra})
    return Trainer(model=model if model is not None else tiny_llama(), args=args, train_dataset=TokenDataset(),
                   eval_dataset=TokenDataset(16, seed=1))


def losses(trainer):
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_trainer_uses_tpu_without_environment(tmp_path):
    assert "ACCELERATE_TORCH_DEVICE" not in os.environ
    trainer = make_trainer(tmp_path, use_cpu=False)
    assert trainer.args.device.type == "tpu"
    assert trainer.accelerator.device.type == "tpu"
    # An explicit CPU request still wins over the device torchtpu offers.
    assert make_trainer(tmp_path, use_cpu=True).accelerator.device.type == "cpu"


def test_accelerate_imported_before_torchtpu():
    """The patch also applies when accelerate was loaded first; PartialState then answers tpu:0."""
    from helpers import run_python

    result = run_python("""
        import accelerate.state
        import torchtpu
        print(accelerate.state.PartialState().device)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "tpu:0"


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_trainer_matches_cpu(tmp_path, metrics, bf16):
    cpu = make_trainer(tmp_path / "cpu", use_cpu=True, bf16=bf16)
    cpu.train()
    cpu_eval = cpu.evaluate()["eval_loss"]
    torchtpu.reset_metrics()
    tpu = make_trainer(tmp_path / "tpu", use_cpu=False, bf16=bf16)
    tpu.train()
    tpu_eval = tpu.evaluate()["eval_loss"]
    assert next(tpu.model.parameters()).device.type == "tpu"
    tol = BF16_TOL if bf16 else FP32_TOL
    assert len(losses(tpu)) == STEPS
    assert losses(tpu) == pytest.approx(losses(cpu), abs=tol)
    assert tpu_eval == pytest.approx(cpu_eval, abs=tol)
    fallbacks = {op: s["fallbacks"] for op, s in metrics()["ops"].items() if s["fallbacks"]}
    assert fallbacks == {}


def test_trainer_checkpoint_resume(tmp_path):
    """Stopping after 2 steps and resuming (model, optimizer state on tpu, scheduler) gives the same weights."""
    whole = make_trainer(tmp_path / "whole", use_cpu=False)
    whole.train()
    first = make_trainer(tmp_path / "split", use_cpu=False, save_strategy="steps", save_steps=2)
    first.train()
    checkpoint = tmp_path / "split" / "checkpoint-2"
    assert (checkpoint / "optimizer.pt").exists()
    state = torch.load(checkpoint / "optimizer.pt", map_location="cpu")["state"]
    assert state and all(v["exp_avg"].device.type == "cpu" for v in state.values())

    resumed = make_trainer(tmp_path / "split", use_cpu=False)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    optimizer_state = resumed.optimizer.state_dict()["state"]
    assert all(v["exp_avg"].device.type == "tpu" for v in optimizer_state.values())
    assert losses(resumed)[-2:] == pytest.approx(losses(whole)[-2:], abs=1e-5)
    for (name, a), b in zip(whole.model.named_parameters(), resumed.model.parameters()):
        torch.testing.assert_close(a.cpu(), b.cpu(), atol=1e-5, rtol=0, msg=name)


def test_checkpoint_resume_with_dropout_keeps_the_tpu_random_stream(tmp_path):
    """Trainer's RNG file carries the tpu generators, so a resumed run draws the uninterrupted run's masks."""
    def dropout_llama():
        config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             attention_dropout=0.3)
        torch.manual_seed(0)
        return LlamaForCausalLM(config)

    whole = make_trainer(tmp_path / "whole", use_cpu=False, model=dropout_llama())
    whole.train()
    make_trainer(tmp_path / "split", use_cpu=False, model=dropout_llama(), save_strategy="steps", save_steps=2).train()
    checkpoint = tmp_path / "split" / "checkpoint-2"
    assert "tpu" in torch.load(checkpoint / "rng_state.pth", weights_only=False)
    resumed = make_trainer(tmp_path / "split", use_cpu=False, model=dropout_llama())
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert losses(resumed)[-2:] == pytest.approx(losses(whole)[-2:], abs=1e-5)
