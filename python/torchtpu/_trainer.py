"""Makes transformers' ``Trainer`` checkpoint the ``tpu`` random generators, as it does CUDA's.

``Trainer._save_rng_state`` writes the Python, NumPy and CPU states and those of the accelerators it knows by
name (cuda, xla, npu, hpu, mlu, musa); ``_load_rng_state`` restores them. Without this a model with dropout
resumed from a checkpoint on ``tpu`` would draw other masks than the uninterrupted run. The change adds a
``"tpu"`` entry (every device's state) to the file the original wrote, and restores it after the original
load; a checkpoint without the entry loads as before.
"""
from __future__ import annotations

import os

import torch

from torchtpu._import_hooks import after_import

_MODULE = "transformers.trainer"


def _rng_file(trainer, folder: str) -> str:
    name = "rng_state.pth" if trainer.args.world_size <= 1 else f"rng_state_{trainer.args.process_index}.pth"
    return os.path.join(folder, name)


def _patch(trainer_module) -> None:
    cls = trainer_module.Trainer
    save, load = cls._save_rng_state, cls._load_rng_state
    if getattr(save, "_torchtpu", False):
        return

    def read(path: str) -> dict:
        with trainer_module.safe_globals():  # transformers' own allow-list for these files
            return torch.load(path, weights_only=True)

    def _save_rng_state(self, output_dir: str) -> None:
        save(self, output_dir)
        path = _rng_file(self, output_dir)
        if torch.tpu.is_available() and os.path.isfile(path):
            states = read(path)
            states["tpu"] = torch.tpu.get_rng_state_all()
            torch.save(states, path)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        load(self, checkpoint)
        path = None if checkpoint is None else _rng_file(self, checkpoint)
        if path is not None and os.path.isfile(path) and torch.tpu.is_available():
            states = read(path).get("tpu")
            if states is not None:
                torch.tpu.set_rng_state_all(states[:torch.tpu.device_count()])

    _save_rng_state._torchtpu = True
    cls._save_rng_state = _save_rng_state
    cls._load_rng_state = _load_rng_state


def install() -> None:
    """Patches Trainer now if transformers.trainer is loaded, otherwise when it is first imported."""
    after_import(_MODULE, _patch)
