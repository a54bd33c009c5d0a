"""A*-PO learns: a sanity check of the whole loop on a setting where success hinges on one choice.

Two training goals of the synthetic catalog. A tiny policy is fine-tuned (``SFTModule``, through the CLI) on a noisy
expert's demonstrations: the oracle, except that each option click takes another value with probability 0.5: the
reference buys the right product and picks each option right about half the time. A*-PO then trains from it through the real data module and module (stage 1, V*, one rollout per goal) with
the success reward. Its sampled success rate must go from about chance to at least 0.9 within a few dozen steps —
and the test fails when the loss's sign is flipped or the gradient is zeroed (``APO_SANITY_BREAK``, used to show it).
"""

import os
import sys
from pathlib import Path

import pytest
from lightning.pytorch import Callback

from apo_lightning.lit.cli import build_cli

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.logger=false",
         "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"]
TINY = ["--data.tiny.vocab_size=1024", "--data.tiny.hidden_size=64", "--data.tiny.num_layers=2",
        "--data.tiny.num_heads=2", "--data.tiny.num_kv_heads=1", "--data.tiny.intermediate_size=128",
        "--data.tiny.corpus_goals=2"]
SHORT = ["--data.env.data_dir=synthetic", "--data.env.max_steps=8", "--data.chat.max_observation_chars=300"]
COPIES = 16  # demonstrations per goal, each option click wrong with probability 0.5


@pytest.mark.skip(reason="work in progress: the setting is being rebuilt on the quick start's reference")
def test_a_star_po_learns_a_choice_the_reference_gets_right_by_chance(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sft = build_cli(["fit", "--config", str(REPO / "configs" / "sft_quickstart.yaml"), *QUIET, *TINY, *SHORT,
                     "--trainer.devices=1", "--trainer.strategy=auto",
                     "--model.model_name_or_path=data/models/sanity-init", "--model.export_dir=data/models/sanity-ref",
                     "--model.learning_rate=0.01", "--model.warmup_steps=5", "--data.drills.steps=0",
                     "--data.num_demos=2", "--data.num_val_demos=1", "--data.demo_noise.probability=0.5",
                     "--data.demo_noise.recovery=false", "--data.demo_noise.options_only=true",
                     f"--data.demo_noise.copies={COPIES}", "--data.batch_size=8", "--data.demo_epochs=40",
                     "--data.eval_goals=0", "--data.max_new_tokens=96", "--trainer.val_check_interval=1.0",
                     "--trainer.limit_val_batches=1"])
    assert sft.trainer.global_step == 40 * 4  # 32 demonstrations in batches of 8, 40 passes

    success = []

    class SampledSuccess(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            success.append(sum(t.success for t in batch["trajectories"]) / len(batch["trajectories"]))

    steps = 30
    rl = build_cli(["--config", str(REPO / "configs" / "quickstart.yaml"), *QUIET, *SHORT,
                    "--model.model_name_or_path=data/models/sanity-ref", "--data.train_goals=2",
                    "--data.batch_size=8", f"--data.steps_per_epoch={steps}", f"--trainer.max_steps={steps}",
                    "--trainer.limit_val_batches=0", "--data.chat.reward=success", "--data.rollout.max_new_tokens=96",
                    "--data.vstar.num_samples=8", "--model.apo.beta2=0.1", "--model.learning_rate=0.002",
                    "--model.warmup_steps=0"], run=False)
    if os.environ.get("APO_SANITY_BREAK") == "sign":
        from apo_lightning.apo.objectives import OBJECTIVES, apo

        monkeypatch.setitem(OBJECTIVES, "apo", apo.OBJECTIVE.__class__(
            **{**apo.OBJECTIVE.__dict__, "loss": lambda b, s: (-apo._loss(b, s)[0], apo._loss(b, s)[1])}))
        rl.model.objective = OBJECTIVES["apo"]
    if os.environ.get("APO_SANITY_BREAK") == "zero":
        rl.model.on_after_backward = lambda: [p.grad.zero_() for p in rl.model.policy.parameters() if p.grad is not None]
    rl.trainer.callbacks.append(SampledSuccess())
    rl.trainer.fit(rl.model, rl.datamodule)
    start, end = sum(success[:5]) / 5, sum(success[-5:]) / 5
    print(f"sampled success: first 5 steps {start:.2f}, last 5 steps {end:.2f}; per step {success}")
    assert 0.2 <= start <= 0.75  # about chance on the flipped option
    assert end >= 0.9
