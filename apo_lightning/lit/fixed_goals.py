"""A small training setting on a fixed list of goals, from the quick start's reference policy, one process.

The learning sanity test (``tests/test_learning.py``) and the experiments behind it (``docs/evidence/
fixed_goals_run.py``; docs/experiments.md, "Learning sanity setting") both build it from here: the overrides of
``configs/quickstart.yaml`` that make it, and a callback that records what the policy samples at every step.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch import Callback

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.logger=false",
         "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"]


def fixed_goals_arguments(reference: str | Path, goals: list[int], steps: int, batch_size: int,
                          learning_rate: float) -> list[str]:
    """``cli.py fit`` overrides of ``configs/quickstart.yaml`` for ``steps`` A*-PO steps on exactly ``goals``.

    One process, the success reward, stage 1 with N = 8 samples per goal, ``batch_size`` trajectories a step, β2
    0.1, ``learning_rate`` (no warm-up), no validation, quiet (no logger, checkpoints or progress bar). Later
    arguments on the command line override these.
    """
    return [*QUIET, "--trainer.devices=1", "--trainer.strategy=auto", f"--model.model_name_or_path={reference}",
            f"--data.train_goal_indices={list(goals)}", "--data.vstar.num_samples=8", "--data.reward.kind=success",
            f"--data.batch_size={batch_size}", f"--data.steps_per_epoch={steps}", f"--trainer.max_steps={steps}",
            "--trainer.limit_val_batches=0", "--model.objective.beta2=0.1", f"--model.learning_rate={learning_rate}",
            "--model.warmup_steps=0"]


class SampledSuccess(Callback):
    """What the current policy samples, step by step.

    Attributes:
        per_step: the success rate of each training batch's fresh trajectories (0…1).
        by_goal: per step, ``(goal index, success)`` of each fresh trajectory.
        kl: ``train/kl`` (nats) after each step.
    """

    def __init__(self):
        self.per_step: list[float] = []
        self.by_goal: list[list[tuple[int, bool]]] = []
        self.kl: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        trajectories = batch["trajectories"]
        self.per_step.append(sum(t.success for t in trajectories) / len(trajectories))
        self.by_goal.append([(t.goal_index, t.success) for t in trajectories])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.kl.append(float(trainer.callback_metrics.get("train/kl", float("nan"))))

    def goal_success(self, last: int) -> dict[int, float]:
        """Each goal's success rate over the last ``last`` steps' trajectories."""
        pairs = [pair for step in self.by_goal[-last:] for pair in step]
        goals = sorted({g for g, _ in pairs})
        return {g: sum(ok for h, ok in pairs if h == g) / sum(h == g for h, _ in pairs) for g in goals}
