"""A callback the DDP tests add to ``cli.py fit`` (``--trainer.callbacks+=tests.rank_audit.RankAudit``, with the
repository on ``PYTHONPATH``): what each rank did, for the tests to compare."""

import json
from pathlib import Path

from lightning.pytorch import Callback, LightningModule, Trainer

from apo_lightning.utils.hashing import hash_parameters


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
