"""A*-PO learns: a sanity check of the whole loop, through the real data module and module, from the quick start's
shipped reference policy, in the fast suite.

The setting (``lit.fixed_goals``; docs/experiments.md, "Learning sanity setting"): six training goals of six
different products of the synthetic catalog on which the reference opens the goal's own product but clicks the
goal's options right only by chance (goals 1500, 1518, 1646, 1695, 1795, 1885, from a sampling scan of training
goals at temperature 1), the success reward, V* at the mean of π_ref's 8 stage-1 samples per goal (β1 100; see
``VStarConfig.beta1``), β2 0.1, lr 3e-4, 12 trajectories a step (each goal twice), rollouts at temperature 1 with
top-p 0.9, stage 1 at temperature 1 without top-p. Top-p drops the low-probability tails that misspell an ASIN (a
misspelled product click is never recovered from); stage 1 stays at plain temperature 1 so that its V* (the mean of
those samples) lies below what the top-p sampler earns.

A*-PO's sampled success rate must go from the reference's level on these goals (its 48 stage-1 samples at
temperature 1, asserted ≤ 0.75) to at least 0.9 (the mean of steps 9–12); the test fails when the loss's sign is
flipped or the gradient is zeroed: ``APO_SANITY_BREAK=sign`` or ``zero``. ``APO_SANITY_SEED`` picks the run seed
(default 0).
"""

import dataclasses
import os
from pathlib import Path

import pytest

from apo_lightning.lit.cli import build_cli
from apo_lightning.lit.fixed_goals import SampledSuccess, fixed_goals_arguments

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "models" / "quickstart-ref"
STEPS = 12
GOALS = [1500, 1518, 1646, 1695, 1795, 1885]
SETTING = [*fixed_goals_arguments(REFERENCE, GOALS, STEPS, batch_size=12, learning_rate=3e-4),
           "--data.vstar.beta1=100", "--data.rollout.top_p=0.9"]


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="models/quickstart-ref is not in this checkout")
def test_a_star_po_learns_the_option_clicks_the_reference_gets_right_by_chance(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seed = int(os.environ.get("APO_SANITY_SEED", 0))
    rl = build_cli(["--config", str(REPO / "configs" / "quickstart.yaml"), *SETTING, f"--seed_everything={seed}"],
                   run=False)
    if os.environ.get("APO_SANITY_BREAK") == "sign":
        class Flipped(type(rl.model.objective)):  # the configured A*-PO with its loss's sign flipped
            def loss(self, batch):
                loss, stats = super().loss(batch)
                return -loss, stats

        rl.model.objective = Flipped(**dataclasses.asdict(rl.model.objective))
    if os.environ.get("APO_SANITY_BREAK") == "zero":
        rl.model.on_after_backward = lambda: [p.grad.zero_() for p in rl.model.policy.parameters()
                                              if p.grad is not None]
    success = SampledSuccess()
    rl.trainer.callbacks.append(success)
    rl.trainer.fit(rl.model, rl.datamodule)
    assert rl.trainer.global_step == STEPS
    assert rl.datamodule.goal_pool == GOALS
    # π_ref's 48 stage-1 samples at temperature 1
    stage_1 = [r for rewards in rl.datamodule.stage1.table.rewards.values() for r in rewards]
    start = sum(r >= 0.9 for r in stage_1) / len(stage_1)  # a success earns 1 (less 0.1 per malformed reply)
    end = sum(success.per_step[-4:]) / 4
    print(f"sampled success: π_ref's stage-1 samples {start:.2f}, step 1 {success.per_step[0]:.2f}, steps "
          f"{STEPS - 3}-{STEPS} {end:.2f}; per step {success.per_step}")
    assert start <= 0.75  # the reference's chance level on these goals
    assert end >= 0.9
