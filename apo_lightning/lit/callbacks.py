"""Callbacks: export the trained policy as a model directory, and a per-rank audit used by the DDP tests."""

from __future__ import annotations

import json
from pathlib import Path

from lightning.pytorch import Callback, LightningModule, Trainer

from ..models.loading import export_policy
from ..utils.hashing import hash_parameters


class ExportPolicy(Callback):
    """Save the policy (and tokenizer) as a Hugging Face model directory when ``fit`` ends (rank 0).

    Args:
        out_dir: the model directory to write (replaced atomically); None = ``data/models/<run_name>``
            (``lit.cli``).
    """

    def __init__(self, out_dir: str | None = None):
        self.out_dir = out_dir

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:
            if self.out_dir is None:
                raise ValueError("ExportPolicy needs out_dir (or a run_name to derive it from)")
            export_policy(pl_module.policy, pl_module.tokenizer, self.out_dir)


class RankAudit(Callback):
    """Write ``rank{r}.json`` per process at the end of ``fit``: the goals it rolled out, the sampling seeds'
    batch numbers, and a hash of its weights.

    Args:
        out_dir: where the files go.
    """

    def __init__(self, out_dir: str):
        self.out_dir = Path(out_dir)
        self.goals: list[int] = []
        self.batches: list[int] = []

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        self.goals += [t.goal_index for t in batch["trajectories"]]
        self.batches.append(batch["batch_number"])

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        record = {"rank": trainer.global_rank, "world_size": trainer.world_size, "goals": self.goals,
                  "batches": self.batches, "parameters_sha256": hash_parameters(pl_module.policy),
                  "global_step": trainer.global_step}
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
