"""A training run on a fixed list of goals, printing the sampled success rate of every step's trajectories.

    GOALS=1500,1501,1515,1518,1522,1524 python docs/evidence/fixed_goals_run.py --model.learning_rate=1e-4
    GOALS=... python docs/evidence/fixed_goals_run.py --data.batch_size=2 \
        --model.objective=apo_lightning.apo.objectives.GRPO

The learning-sanity experiments of docs/experiments.md ("Learning sanity setting"): configs/quickstart.yaml from
models/quickstart-ref, one process, the success reward, stage 1 with N = 8 samples, 8 trajectories a step, β2 0.1,
no warm-up, no validation, ``STEPS`` (default 24) steps; the command line adds overrides. The goals go to the
data module's ``train_goal_indices``. Last line: one JSON object with the per-step success rates, the mean of the
first and last 4 steps, each goal's success rate over the last 8 steps, the KL to π_ref (``train/kl``, every 4th
step) and the wall time.
"""

import json
import os
import sys
import time
from pathlib import Path

from apo_lightning.lit.cli import build_cli
from apo_lightning.lit.fixed_goals import SampledSuccess, fixed_goals_arguments

REPO = Path(__file__).resolve().parents[2]
GOALS = [int(g) for g in os.environ["GOALS"].split(",")]
STEPS = int(os.environ.get("STEPS", 24))

if __name__ == "__main__":
    setting = fixed_goals_arguments(REPO / "models/quickstart-ref", GOALS, STEPS, batch_size=8, learning_rate=1e-4)
    rl = build_cli(["--config", str(REPO / "configs/quickstart.yaml"), *setting, *sys.argv[1:]], run=False)
    track = SampledSuccess()
    rl.trainer.callbacks.append(track)
    start = time.time()
    rl.trainer.fit(rl.model, rl.datamodule)
    s = track.per_step
    per_goal = {g: round(rate, 3) for g, rate in track.goal_success(8).items()}
    print(json.dumps({"args": sys.argv[1:], "goals": GOALS, "first4": sum(s[:4]) / len(s[:4]),
                      "last4": sum(s[-4:]) / len(s[-4:]),
                      "per_step": [round(x, 3) for x in s], "kl": [round(x, 2) for x in track.kl[::4]],
                      "kl_end": track.kl[-1] if track.kl else None,
                      "last8_by_goal": per_goal, "wall_s": round(time.time() - start)}))
