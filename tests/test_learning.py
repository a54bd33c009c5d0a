"""A*-PO learns: a sanity check of the whole loop, through the real data module and module, from the quick start's
shipped reference policy.

The setting: the first training goals of the synthetic catalog, kept by ``vstar.goal_filter: informative`` only
where the reference's stage-1 samples disagree (some succeed, some do not: the outcome hinges on a choice the
reference makes by chance, most often an option click), with the success reward. A*-PO then trains on those goals,
one rollout per goal per step. Its sampled success rate must go from the reference's chance level to at least 0.9
within a few dozen steps — and the test must fail when the loss's sign is flipped or the gradient is zeroed
(``APO_SANITY_BREAK=sign`` or ``zero``).

Status: the target is not met yet, so the test is a strict expected failure in the slow suite (``-m slow``): when
A*-PO starts to pass it, the run reports XPASS and fails, and the marker must go. Measured runs:
docs/experiments.md, "Learning sanity setting".
"""

import os
from pathlib import Path

import pytest
from lightning.pytorch import Callback

from apo_lightning.lit.cli import build_cli

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "models" / "quickstart-ref"
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.logger=false",
         "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"]
STEPS = 24
SETTING = ["--trainer.devices=1", "--trainer.strategy=auto", f"--model.model_name_or_path={REFERENCE}",
           "--data.train_goals=12", "--data.vstar.goal_filter=informative", "--data.vstar.num_samples=8",
           "--data.chat.reward=success", "--data.batch_size=8", f"--data.steps_per_epoch={STEPS}",
           f"--trainer.max_steps={STEPS}", "--trainer.limit_val_batches=0", "--model.apo.beta2=0.1",
           "--model.learning_rate=1e-3", "--model.warmup_steps=0"]


class SampledSuccess(Callback):
    """The success rate of each training batch's trajectories (sampled from the current policy)."""

    def __init__(self):
        self.per_step = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.per_step.append(sum(t.success for t in batch["trajectories"]) / len(batch["trajectories"]))


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="not met yet: on six hand-fixed goals lr 1e-4 lifts the sampled success "
                   "0.28 -> 0.50 in 24 steps, lr 1e-3 runs away to 0 (docs/experiments.md, Learning sanity setting)")
@pytest.mark.skipif(not REFERENCE.is_dir(), reason="models/quickstart-ref is not in this checkout")
def test_a_star_po_learns_choices_the_reference_gets_right_by_chance(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rl = build_cli(["--config", str(REPO / "configs" / "quickstart.yaml"), *QUIET, *SETTING], run=False)
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
    kept = len(rl.datamodule.goal_pool)
    start, end = sum(success.per_step[:4]) / 4, sum(success.per_step[-4:]) / 4
    print(f"{kept} informative goals; sampled success: first 4 steps {start:.2f}, last 4 steps {end:.2f}; "
          f"per step {success.per_step}")
    assert kept >= 2
    assert 0.15 <= start <= 0.75  # the reference's chance level on these goals
    assert end >= 0.9
