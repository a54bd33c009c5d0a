"""What the learning sanity setting's sampled trajectories fail on late in training.

    GOALS=1500,1518,1646,1695,1795,1885 SEED=1 python docs/evidence/sanity_failures.py   # about 4 minutes

Trains the learning sanity setting without top-p (β1 100, lr 3e-4, 12 trajectories a step, rollouts at temperature
1, ``STEPS`` steps, default 40; one process; ``tests/test_learning.py`` runs the same setting with top-p 0.9 for 12
steps) on ``GOALS`` at run seed ``SEED``; the command line adds overrides. It records every sampled trajectory and
classifies the failures of the last 16 steps: no purchase (split by what the product click was: the goal's ASIN,
another ASIN-like string, no parseable action), or the goal's product bought with a wrong option value or an option
skipped. Prints each failure's goal, class and actions, then one JSON line with the counts. docs/experiments.md,
"Learning sanity setting", "What the plateau is made of".
"""

import collections
import json
import os
import sys
from pathlib import Path

from lightning.pytorch import Callback

from apo_lightning.lit.cli import build_cli
from apo_lightning.lit.fixed_goals import fixed_goals_arguments

REPO = Path(__file__).resolve().parents[2]
GOALS = [int(g) for g in os.environ.get("GOALS", "1500,1518,1646,1695,1795,1885").split(",")]
SEED = int(os.environ.get("SEED", 1))
STEPS = int(os.environ.get("STEPS", 40))


class Trajectories(Callback):
    """Every training batch's sampled trajectories, with the step they were sampled for."""

    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen += [(trainer.global_step, t) for t in batch["trajectories"]]


def failure(trajectory, goal: dict) -> str:
    """One failed trajectory's class."""
    if trajectory.purchased is None:
        click = trajectory.turns[1].action if len(trajectory.turns) > 1 else None
        if click is None:
            return "no purchase: no parseable product click"
        return ("no purchase: clicked the goal's ASIN" if click.lower() == f"click[{goal['asin'].lower()}]"
                else "no purchase: clicked something else (a misspelled ASIN, an option, buy now)")
    bought = {k.lower(): v.lower() for k, v in trajectory.purchased["options"].items()}
    wanted = {k.lower(): v.lower() for k, v in goal["goal_options"].items()}
    if any(bought.get(k) not in (None, v) for k, v in wanted.items()):
        return "bought: a wrong option value"
    return "bought: an option skipped"


if __name__ == "__main__":
    setting = fixed_goals_arguments(REPO / "models/quickstart-ref", GOALS, STEPS, batch_size=12, learning_rate=3e-4)
    rl = build_cli(["--config", str(REPO / "configs/quickstart.yaml"), *setting, "--data.vstar.beta1=100",
                    f"--seed_everything={SEED}", *sys.argv[1:]], run=False)
    record = Trajectories()
    rl.trainer.callbacks.append(record)
    rl.trainer.fit(rl.model, rl.datamodule)
    goals = rl.datamodule.env.shop().goals
    late = [t for step, t in record.seen if step >= STEPS - 16]
    failed = [t for t in late if not t.success]
    classes = collections.Counter(failure(t, goals[t.goal_index]) for t in failed)
    for t in failed:
        print(t.goal_index, failure(t, goals[t.goal_index]), [turn.action for turn in t.turns])
    print(json.dumps({"goals": GOALS, "seed": SEED, "late_trajectories": len(late),
                      "late_successes": len(late) - len(failed), "failures": dict(classes.most_common())}))
