"""A training run on a fixed list of goals, printing the sampled success rate of every step's trajectories.

    GOALS=1500,1501,1515,1518,1522,1524 python docs/evidence/fixed_goals_run.py --model.learning_rate=1e-4
    GOALS=... python docs/evidence/fixed_goals_run.py --model.algorithm=grpo --data.batch_size=2

The learning-sanity experiments of docs/experiments.md ("Learning sanity setting"): configs/quickstart.yaml from
models/quickstart-ref, one process, the success reward, stage 1 with N = 8 samples, 8 trajectories a step, β2 0.1,
no warm-up, no validation, ``STEPS`` (default 24) steps; the command line adds overrides. The goals go to the
data module's ``train_goal_indices`` (the first runs patched its ``pool``, to the same effect). Last line: one JSON
object with the per-step success rates, the mean of the first and last 4 steps, each goal's success rate over the
last 8 steps, the KL to π_ref (``train/kl``, every 4th step) and the wall time.
"""

import json
import os
import sys
import time
from pathlib import Path

from lightning.pytorch import Callback

from apo_lightning.lit.cli import build_cli

REPO = Path(__file__).resolve().parents[2]
GOALS = [int(g) for g in os.environ["GOALS"].split(",")]
STEPS = int(os.environ.get("STEPS", 24))


class Track(Callback):
    """Sampled success of each training batch and the KL after each step."""

    def __init__(self):
        self.success, self.kl, self.by_goal, self.t0 = [], [], [], time.time()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        trajectories = batch["trajectories"]
        self.success.append(sum(t.success for t in trajectories) / len(trajectories))
        self.by_goal.append([(t.goal_index, t.success) for t in trajectories])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.kl.append(float(trainer.callback_metrics.get("train/kl", float("nan"))))


QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.logger=false",
         "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"]
SETTING = ["--trainer.devices=1", "--trainer.strategy=auto", f"--model.model_name_or_path={REPO / 'models/quickstart-ref'}",
           f"--data.train_goal_indices={GOALS}", "--data.vstar.num_samples=8", "--data.chat.reward=success", "--data.batch_size=8",
           f"--data.steps_per_epoch={STEPS}", f"--trainer.max_steps={STEPS}", "--trainer.limit_val_batches=0",
           "--model.apo.beta2=0.1", "--model.learning_rate=1e-4", "--model.warmup_steps=0"]

if __name__ == "__main__":
    rl = build_cli(["--config", str(REPO / "configs/quickstart.yaml"), *QUIET, *SETTING, *sys.argv[1:]], run=False)
    track = Track()
    rl.trainer.callbacks.append(track)
    rl.trainer.fit(rl.model, rl.datamodule)
    s = track.success
    last8 = [pair for step in track.by_goal[-8:] for pair in step]
    per_goal = {g: round(sum(ok for h, ok in last8 if h == g) / max(1, sum(h == g for h, _ in last8)), 3) for g in GOALS}
    print(json.dumps({"args": sys.argv[1:], "goals": GOALS, "first4": sum(s[:4]) / 4, "last4": sum(s[-4:]) / 4,
                      "per_step": [round(x, 3) for x in s], "kl": [round(x, 2) for x in track.kl[::4]],
                      "kl_end": track.kl[-1] if track.kl else None,
                      "last8_by_goal": per_goal, "wall_s": round(time.time() - track.t0)}))
