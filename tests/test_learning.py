"""A*-PO learns: a sanity check of the whole loop, through the real data module and module, from the quick start's
shipped reference policy.

The setting: six training goals of the synthetic catalog on which the reference always opens the goal's own
product but clicks the two goal options right only by chance (a sampling scan of the first 96 training goals, 8
samples each at temperature 1: on these six every sample bought the goal's product and 2 to 5 of 8 succeeded), the
success reward, V* at the mean of π_ref's 8 stage-1 samples (β1 100; see ``VStarConfig.beta1``), β2 0.1, lr 3e-4,
12 trajectories a step (each goal twice). A*-PO's sampled success rate must go from the reference's chance level
(about 0.4) to at least 0.9 within a few dozen steps (the mean of steps 33–40) — and the test must fail when the
loss's sign is flipped or the gradient is zeroed (``APO_SANITY_BREAK=sign`` or ``zero``).

Status: it passes at run seed 0 (0.42 -> 0.92, 241 s) and fails broken (sign: 0.00, zero: 0.39), but the recipe is
not robust: run seeds 1 and 2 reach 0.56 and 0.82 by step 40 (at seed 1 the policy settles on a wrong option for
two goals and never samples a success there again), and training is not bit-reproducible across machines, so on
another CPU this test can fail without a regression. It is therefore in the slow suite (``-m slow``), not the fast
one. Measured runs: docs/experiments.md, "Learning sanity setting".
"""

import os
from pathlib import Path

import pytest

from apo_lightning.lit.cli import build_cli
from apo_lightning.lit.fixed_goals import SampledSuccess, fixed_goals_arguments

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "models" / "quickstart-ref"
STEPS = 40
GOALS = [1500, 1518, 1524, 1525, 1559, 1560]
SETTING = [*fixed_goals_arguments(REFERENCE, GOALS, STEPS, batch_size=12, learning_rate=3e-4), "--data.vstar.beta1=100"]


@pytest.mark.slow
@pytest.mark.skipif(not REFERENCE.is_dir(), reason="models/quickstart-ref is not in this checkout")
def test_a_star_po_learns_the_option_clicks_the_reference_gets_right_by_chance(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rl = build_cli(["--config", str(REPO / "configs" / "quickstart.yaml"), *SETTING], run=False)
    if os.environ.get("APO_SANITY_BREAK") == "sign":
        from apo_lightning.apo.objectives import apo

        flipped = apo.OBJECTIVE.__class__(**{**apo.OBJECTIVE.__dict__,
                                             "loss": lambda b, s: (-apo._loss(b, s)[0], apo._loss(b, s)[1])})
        rl.model.objective = flipped
    if os.environ.get("APO_SANITY_BREAK") == "zero":
        rl.model.on_after_backward = lambda: [p.grad.zero_() for p in rl.model.policy.parameters()
                                              if p.grad is not None]
    success = SampledSuccess()
    rl.trainer.callbacks.append(success)
    rl.trainer.fit(rl.model, rl.datamodule)
    assert rl.trainer.global_step == STEPS
    assert rl.datamodule.goal_pool == GOALS
    start, end = sum(success.per_step[:4]) / 4, sum(success.per_step[-8:]) / 8
    print(f"sampled success: first 4 steps {start:.2f}, last 8 steps {end:.2f}; per step {success.per_step}")
    assert 0.15 <= start <= 0.75  # the reference's chance level on these goals
    assert end >= 0.9
