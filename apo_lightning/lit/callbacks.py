"""Callbacks: export the trained policy as a model directory, and a per-rank audit used by the DDP test."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from .common import export_policy


class ExportPolicy(Callback):
    """Save the policy (and tokenizer) as a Hugging Face model directory when ``fit`` ends (rank 0).

    Args:
        out_dir: the model directory to write (replaced atomically).
    """

    def __init__(self, out_dir: str):
        self.out_dir = out_dir

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:
            policy = pl_module.policy
            if hasattr(policy, "merge_and_unload"):  # LoRA: write plain weights
                policy = policy.merge_and_unload()
            export_policy(policy, pl_module.tokenizer, self.out_dir)


def parameters_sha256(module: torch.nn.Module) -> str:
    """SHA-256 over every parameter's name and bytes, in name order."""
    digest = hashlib.sha256()
    for name, param in sorted(module.named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class RankAudit(Callback):
    """Write ``rank{r}.json`` per process at the end of ``fit``: the goals it rolled out and a hash of its weights.

    Args:
        out_dir: where the files go.
    """

    def __init__(self, out_dir: str):
        self.out_dir = Path(out_dir)
        self.goals: list[int] = []

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        self.goals += [t.goal_index for t in batch["trajectories"]]

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        record = {"rank": trainer.global_rank, "world_size": trainer.world_size, "goals": self.goals,
                  "parameters_sha256": parameters_sha256(pl_module.policy), "global_step": trainer.global_step}
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
