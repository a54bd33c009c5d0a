"""The Lightning layer end to end on a tiny untrained policy: configs, fit/test, on-policy batches, exact resume
from any checkpoint, run seeds, DDP, SFT through the Trainer, skipped steps.

An untrained policy earns the same format penalty on almost every episode, so with the real V* (its own soft
maximum) A*-PO's advantage is about 0 and nothing moves. Tests that need the parameters to move patch V* to 0
(``zero_v_star``): the advantage is then the reward itself, which varies with the format errors.
"""

import json
import os
import shutil
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import Timer

from apo_lightning.eval.training_logs import read_scalars
from apo_lightning.lit.cli import build_cli
from apo_lightning.lit.rl_data import WebShopRLDataModule
from apo_lightning.lit.settings import SettingError
from apo_lightning.utils.hashing import hash_parameters

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from cli import main  # noqa: E402
from conftest import DDP_SCRIPT, fit_in_process  # noqa: E402

SMOKE = str(REPO / "configs" / "smoke.yaml")
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
NO_CHECKPOINTS = ["--trainer.callbacks=[]", "--trainer.enable_checkpointing=false", "--trainer.logger=false"]


def fit(*overrides, callbacks=(), ckpt_path=None, config=SMOKE):
    """``cli.py fit --config config`` in this process, quiet, with ``callbacks`` added to the trainer's."""
    return fit_in_process("--config", config, *QUIET, *overrides, callbacks=callbacks, ckpt_path=ckpt_path)


class Recorder(Callback):
    """Per training batch: the batch number, goals, sampled token ids, and hashes of the parameters when the batch
    was rolled out (recorded by the data module, see ``hashing_rollouts``) and when the step began."""

    def __init__(self):
        self.batches, self.goals, self.tokens, self.rollout_hash, self.step_hash = [], [], [], [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append(batch["batch_number"])
        self.goals.append([t.goal_index for t in batch["trajectories"]])
        self.tokens.append([s.token_ids for t in batch["trajectories"] for s in t.segments])
        self.rollout_hash.append(batch.get("policy_hash"))
        self.step_hash.append(hash_parameters(pl_module.policy))


@pytest.fixture
def hashing_rollouts(monkeypatch):
    """Record in every training batch a hash of the policy's parameters at the moment it was rolled out."""
    real = WebShopRLDataModule.train_batch

    def train_batch(self, batch_number):
        policy_hash = hash_parameters(self.trainer.lightning_module.policy)
        batch = real(self, batch_number)
        batch["policy_hash"] = policy_hash
        return batch

    monkeypatch.setattr(WebShopRLDataModule, "train_batch", train_batch)


# ------------------------------------------------------------------------------------------------ configs
CONFIGS = sorted(str(p) for p in (REPO / "configs").rglob("*.yaml"))
OBJECTIVE_OVERLAYS = sorted((REPO / "configs" / "objective").glob("*.yaml"))


#: the configs each overlay outside configs/objective/ goes on top of (its header's command)
OVERLAY_BASES = {"sft_quickstart_dart.yaml": ["sft_quickstart.yaml"],
                 "sft_quickstart_swap.yaml": ["sft_quickstart.yaml", "sft_quickstart_dart.yaml"],
                 "sft_webshop_1k_stage0.yaml": ["sft_tiny_cpu.yaml"],
                 "sft_webshop_1k_reads.yaml": ["sft_tiny_cpu.yaml"],
                 "sft_smollm2_reads.yaml": ["sft_smollm2.yaml"],
                 "webshop_1k_reads.yaml": ["webshop_1k.yaml", "webshop_1k_cpu.yaml", "webshop_1k_2h.yaml"],
                 "webshop_1k_cpu.yaml": ["webshop_1k.yaml"],
                 "webshop_1k_2h.yaml": ["webshop_1k.yaml", "webshop_1k_cpu.yaml"],
                 "smollm2_2h.yaml": ["smollm2.yaml", "machine/cpu.yaml"],
                 "smollm2_apo.yaml": ["smollm2.yaml", "machine/cpu.yaml"],
                 "smollm2_grpo.yaml": ["smollm2.yaml", "machine/cpu.yaml", "smollm2_apo.yaml"],
                 "cpu.yaml": ["smollm2.yaml"], "gpu.yaml": ["smollm2.yaml"],  # configs/machine/ (tests/test_configs.py)
                 "gpu_vllm.yaml": ["smollm2.yaml", "machine/gpu.yaml"]}


def base_of(config: Path) -> list[str]:
    """The configs to compose: an objective overlay goes on top of the real-data base, the other overlays on the
    bases ``OVERLAY_BASES`` names, every other config alone."""
    bases = ["webshop_1k.yaml"] if config.parent.name == "objective" else OVERLAY_BASES.get(config.name, [])
    return [str(REPO / "configs" / name) for name in bases] + [str(config)]


def parse(*configs, extra=()):
    args = [a for c in configs for a in ("--config", c)]
    return build_cli([*args, "--trainer.logger=false", "--trainer.accelerator=cpu", *extra], run=False)


@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_parses_and_instantiates(config):
    configs = base_of(Path(config))
    parsed = parse(*configs, extra=["--trainer.devices=1", "--trainer.strategy=auto"])
    assert parsed.model is not None and parsed.datamodule is not None
    class_path = yaml.safe_load(Path(configs[0]).read_text())["model"]["class_path"]
    assert class_path.startswith("apo_lightning.")


def test_bf16_on_a_cpu_without_bfloat16_instructions_warns(monkeypatch, caplog):
    """``--trainer.precision=bf16-mixed`` on a CPU that emulates bfloat16 (docs/experiments.md, "bfloat16 autocast on
    the CPU") names the problem and the fix at parse time; float32, or a CPU with the instructions, stays silent."""
    quickstart = str(REPO / "configs" / "quickstart.yaml")
    extra = ["--trainer.devices=1", "--trainer.strategy=auto"]
    for native, precision, warns in [(False, "bf16-mixed", True), (True, "bf16-mixed", False),
                                     (False, "32-true", False)]:
        monkeypatch.setattr("apo_lightning.lit.precision.native_bf16_on_cpu", lambda native=native: native)
        caplog.clear()
        with caplog.at_level("WARNING", logger="apo_lightning.lit.cli"):
            parse(quickstart, extra=[*extra, f"--trainer.precision={precision}"])
        messages = [r.getMessage() for r in caplog.records if r.name == "apo_lightning.lit.cli"]
        assert any("without bfloat16 instructions" in m and "32-true" in m for m in messages) == warns, messages


def test_the_two_hour_overlay_is_the_measured_run():
    """configs/webshop_1k_2h.yaml composes to the settings of the two-hour A*-PO run (docs/experiments.md, "The two-hour
    recipe at run seeds 0, 1, 2"): valid clicks, the success reward, stage-1 reuse and β1, the goals, the learning
    rate, the reference and the time budget."""
    composed = parse(*base_of(REPO / "configs" / "webshop_1k_2h.yaml"),
                     extra=["--trainer.devices=1", "--trainer.strategy=auto"])
    data, model, trainer = composed.datamodule, composed.model, composed.trainer
    assert (data.rollout.valid_clicks, data.reward.kind) == (True, "success")
    assert (data.vstar.beta1, data.vstar.reuse, data.vstar.num_samples, data.vstar.temperature) == (100.0, 8, 4, 0.5)
    assert (data.train_goals, data.steps_per_epoch, data.val_goals, data.rollout.temperature) == (1024, 25, 200, 0.5)
    assert model.hparams.learning_rate == 1e-4 and model.hparams.model_name_or_path == "models/webshop-1k-ref"
    timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
    assert trainer.max_steps == 1000 and timer.time_remaining("train") == 102 * 60  # stage 2's 1 h 42 min


def test_the_smollm2_grpo_overlay_matches_the_apo_run_but_for_the_objective_and_stage_1():
    """configs/smollm2_grpo.yaml on configs/smollm2_apo.yaml: the same reference policy (the reads adapter), training
    goals, wordings, learning rate, backend, trajectories per step and a checkpoint every step; GRPO with its KL
    term, no stage 1, and the A*-PO run's stage 1 + stage 2 as its time budget."""
    extra = ["--trainer.devices=1", "--trainer.strategy=auto"]
    apo = parse(*base_of(REPO / "configs" / "smollm2_apo.yaml"), extra=extra)
    grpo = parse(*base_of(REPO / "configs" / "smollm2_grpo.yaml"), extra=extra)
    assert apo.model.hparams.model_name_or_path == "models/smollm2-webshop-1k-reads"
    for name in ("model_name_or_path", "learning_rate", "warmup_steps", "lora", "gradient_checkpointing"):
        assert grpo.model.hparams[name] == apo.model.hparams[name], name
    for name in ("train_goals", "val_goals", "steps_per_epoch", "seed"):
        assert getattr(grpo.datamodule, name) == getattr(apo.datamodule, name), name
    assert grpo.datamodule.env == apo.datamodule.env and apo.datamodule.env.vary_wording
    assert grpo.datamodule.rollout == apo.datamodule.rollout and grpo.datamodule.chat == apo.datamodule.chat
    per_step = [d.batch_size * d.rollouts_per_goal for d in (apo.datamodule, grpo.datamodule)]
    assert per_step == [8, 8] and (apo.datamodule.needs_v_star, grpo.datamodule.needs_v_star) == (True, False)
    assert (grpo.model.objective.name, grpo.model.objective.beta_kl) == ("grpo", 0.04)
    assert apo.datamodule.vstar.reuse == 0
    for composed in (apo, grpo):
        last = [c for c in composed.trainer.callbacks if type(c).__name__ == "ModelCheckpoint" and c.save_last]
        assert [c._every_n_train_steps for c in last] == [1]
    timers = [next(c for c in run.trainer.callbacks if isinstance(c, Timer)) for run in (apo, grpo)]
    assert [t.time_remaining("train") for t in timers] == [210 * 60, 265 * 60]  # + A*-PO's stage 1


def test_the_stage0_overlay_is_the_measured_sft_pass():
    """configs/sft_webshop_1k_stage0.yaml on configs/sft_tiny_cpu.yaml composes to the same module and data settings
    as configs/sft_tiny_cpu.yaml with the stage-0 pass's command-line overrides (from models/webshop-1k-ref, no new
    tiny policy, no drills, one demonstration epoch at learning rate 5e-4, exported to data/models/webshop-1k-more)."""
    sft = str(REPO / "configs" / "sft_tiny_cpu.yaml")
    extra = ["--trainer.devices=1", "--trainer.strategy=auto"]
    overlay = parse(*base_of(REPO / "configs" / "sft_webshop_1k_stage0.yaml"), extra=extra)
    measured = parse(sft, extra=[*extra, "--model.model_name_or_path=models/webshop-1k-ref", "--model.tiny=null",
                                 "--model.export_dir=data/models/webshop-1k-more", "--model.learning_rate=5e-4",
                                 "--data.drills.steps=0", "--data.demo_epochs=1"])
    assert overlay.model.hparams.learning_rate == 5e-4 and overlay.model.tiny is None
    assert dict(overlay.model.hparams) == dict(measured.model.hparams)
    for name in ("model_name_or_path", "drills", "demo_epochs", "num_demos", "batch_size", "seed"):
        assert getattr(overlay.datamodule, name) == getattr(measured.datamodule, name), name


def test_overlays_keep_the_base_callbacks_and_name_their_outputs():
    base = parse(str(REPO / "configs" / "webshop_1k.yaml"))
    base_callbacks = [type(c).__name__ for c in base.trainer.callbacks]
    assert {"ModelCheckpoint", "LearningRateMonitor", "ExportPolicy"} <= set(base_callbacks)
    overlays = [REPO / "configs" / "webshop_1k_cpu.yaml", REPO / "configs" / "webshop_1k_2h.yaml", *OBJECTIVE_OVERLAYS]
    for overlay in overlays:
        run_name = yaml.safe_load(overlay.read_text())["run_name"]
        composed = parse(*base_of(overlay), extra=["--trainer.devices=1", "--trainer.strategy=auto"])
        names = [type(c).__name__ for c in composed.trainer.callbacks]
        assert names == base_callbacks, overlay
        checkpoints = [c for c in composed.trainer.callbacks if type(c).__name__ == "ModelCheckpoint"]
        assert {c.dirpath for c in checkpoints} == {str(Path("checkpoints", run_name).resolve())}
        export = next(c for c in composed.trainer.callbacks if type(c).__name__ == "ExportPolicy")
        assert export.out_dir == str(Path("data/models") / run_name)
        assert composed.model.hparams.results_dir == str(Path("results") / run_name)
        name = overlay.stem if overlay.parent.name == "objective" else "apo"
        assert composed.model.objective.name == name
        assert composed.datamodule.needs_v_star == (name != "grpo")  # linked from the objective
        assert composed.datamodule.rollouts_per_goal == (4 if name == "grpo" else 1)
    kl_pg = parse(*base_of(REPO / "configs" / "objective" / "kl_pg.yaml"))
    assert kl_pg.trainer.gradient_clip_val == 0.5 and base.trainer.gradient_clip_val == 1.0


@pytest.mark.parametrize("objective, settings, doc", [
    ("APO", ("beta2:",), "# the stage-2 KL temperature β2"),
    ("GRPO", ("group_size:", "clip_eps:", "beta_kl:"), "# rollouts per goal G"),
    ("KLPG", ("beta:", "kl_coef:", "clip:"), "# The seed project's KL-anchored policy gradient"),
    ("AWR", ("weighting:", "tau:", "max_weight:", "kl_coef:"), "# Advantage-weighted SFT")])
def test_print_config_shows_the_objectives_settings_with_their_docs(capsys, objective, settings, doc):
    with pytest.raises(SystemExit):
        build_cli(["fit", "--print_config=comments", "--config", str(REPO / "configs" / "webshop_1k.yaml"),
                   f"--model.objective={objective}"])
    printed = capsys.readouterr().out
    assert f"class_path: apo_lightning.apo.objectives.{objective}" in printed
    assert all(setting in printed for setting in settings) and doc in printed


@pytest.mark.parametrize("bad, allowed", [
    ("--model.objective=PPO", "expected one of APO, AWR, GRPO, KLPG or a full class path"),
    ("--data.reward.kind=won", "expected one of 'score', 'success'"),
    ("--data.env.observation_mode=html", "expected one of 'text', 'text_rich'"),
    ("--model.dtype=float64", "expected one of 'float32', 'bfloat16', 'float16'")])
def test_a_wrong_choice_fails_at_parse_time(capsys, bad, allowed):
    """The choice is checked: the one-line error names the setting, the value and the choices (a setting that does
    not exist would fail too, but with "not a setting of")."""
    with pytest.raises(SystemExit) as exit_info:
        parse(SMOKE, extra=[bad])
    setting, value = bad.removeprefix("--").split("=")
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert exit_info.value.code == 2 and error.startswith(f"error: {setting}: ") and value in error, error
    assert allowed in error, error


# ------------------------------------------------------------------------------------------------ fit / test
def test_fit_then_test_writes_checkpoint_and_results(workdir):
    cli = main(["fit", "--config", SMOKE, *QUIET, "--trainer.max_steps=2"])
    assert cli.trainer.global_step == 2
    checkpoint = torch.load(workdir / "checkpoints/smoke/last.ckpt", weights_only=False)
    assert not any("reference" in k for k in checkpoint["state_dict"])
    loader_state = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader_state == [{"cursor": 2}]  # two batches made, two trained on
    tags = set(read_scalars(cli.trainer.logger.log_dir))
    assert {"stage1/pass_at_1", "stage1/pass_at_2", "stage1/all_equal_rate"} <= tags
    assert {"train/loss", "train/kl", "train/advantage_mean", "rollout/success_rate", "rollout/avg_turns",
            "rollout/invalid_reply_rate", "val/success_rate", "val/score"} <= tags
    main(["test", "--config", SMOKE, *QUIET, "--ckpt_path", "last"])
    for name in ("summary.csv", "episodes.jsonl", "failure_analysis.md", "report.html"):
        assert (workdir / "results/smoke" / name).exists()
    # a checkpoint file (not last/best): the command line, not the checkpoint's hyperparameters, sets the model
    main(["test", "--config", SMOKE, *QUIET, "--ckpt_path", str(workdir / "checkpoints/smoke/last.ckpt"),
          "--model.results_dir", "results/explicit", "--model.method_name", "explicit"])
    assert (workdir / "results/explicit/summary.csv").read_text().splitlines()[1].startswith("explicit,test,")


def test_train_eval_goals_validate_the_training_pool_beside_the_validation_goals(workdir, monkeypatch):
    seen = []

    def eval_batch(self, goals):  # episodes whose outcome is a function of the goal, so each set has its own mean
        seen.append(list(goals))
        return {"trajectories": [SimpleNamespace(success=g % 3 == 0, score=(g % 5) / 4) for g in goals]}

    monkeypatch.setattr(WebShopRLDataModule, "eval_batch", eval_batch)
    cli = build_cli(["--config", SMOKE, *QUIET, *NO_CHECKPOINTS, "--data.val_goals=6", "--data.train_eval_goals=5",
                     "--trainer.limit_val_batches=1.0"], run=False)
    cli.trainer.validate(cli.model, cli.datamodule)
    val, pool = cli.datamodule.env.split("val")[:6], cli.datamodule.pool()[:5]
    assert sorted(g for chunk in seen for g in chunk) == sorted(val + pool)
    metrics = cli.trainer.callback_metrics
    for prefix, goals in (("val", val), ("train_goals", pool)):
        assert float(metrics[f"{prefix}/success_rate"]) == pytest.approx(sum(g % 3 == 0 for g in goals) / len(goals))
        assert float(metrics[f"{prefix}/score"]) == pytest.approx(100 * sum((g % 5) / 4 for g in goals) / len(goals))
    assert metrics["val/score"] != metrics["train_goals/score"]  # the two sets differ, so the check above can fail

    seen.clear()  # off by default: the validation goals alone
    cli = build_cli(["--config", SMOKE, *QUIET, *NO_CHECKPOINTS, "--data.val_goals=6",
                     "--trainer.limit_val_batches=1.0"], run=False)
    cli.trainer.validate(cli.model, cli.datamodule)
    assert sorted(g for chunk in seen for g in chunk) == sorted(val)
    assert "train_goals/success_rate" not in cli.trainer.callback_metrics


@pytest.fixture
def varied_rewards(monkeypatch, zero_v_star):
    """Rewards that differ between the trajectories of a goal (an untrained policy earns the same penalty on
    every episode, so group-relative advantages would all be 0): 0.1 × (the sum of the sampled token ids mod 7)."""
    real = WebShopRLDataModule.train_batch

    def train_batch(self, batch_number):
        batch = real(self, batch_number)
        sampled = [sum(i for s in t.segments for i, m in zip(s.token_ids, s.gen_mask) if m)
                   for t in batch["trajectories"]]
        batch["reward"] = torch.tensor([0.1 * (total % 7) for total in sampled])
        assert len(set(sampled)) > 1
        return batch

    monkeypatch.setattr(WebShopRLDataModule, "train_batch", train_batch)


@pytest.mark.parametrize("objective, statistic", [("APO", "beta2_log_ratio"), ("GRPO", "ratio_mean"),
                                                  ("KLPG", "clip_fraction"), ("AWR", "weighted_ce")])
def test_one_step_of_each_objective_changes_every_policy_parameter(workdir, varied_rewards, objective, statistic):
    cli = fit("--trainer.max_steps=1", *NO_CHECKPOINTS, f"--model.objective={objective}")
    assert type(cli.model.objective).__name__ == objective
    assert f"train/{statistic}" in cli.trainer.callback_metrics  # the step took this objective's loss
    trained = dict(cli.model.policy.named_parameters())
    reference = dict(cli.model.reference.named_parameters())
    changed = [n for n in trained if not torch.equal(trained[n], reference[n])]
    assert len(changed) == len(trained)
    assert all(not p.requires_grad for p in reference.values())


@pytest.mark.parametrize("sampled_by", ["hf", "vllm"])
def test_grpo_old_logprobs_are_the_samplers_with_hf_and_the_trainers_with_vllm(workdir, monkeypatch, sampled_by):
    """GRPO's old log π: the recorded sampler log-probs (here shifted by 0.5) when the HF decoder sampled, the
    trainer's own, detached, when vLLM did; ``rollout/logp_gap`` is the 0.5 either way."""
    from apo_lightning.lit.rl_module import WebShopRLModule

    real_batch, real_packed = WebShopRLDataModule.train_batch, WebShopRLModule.packed_batch
    packed = []

    def train_batch(self, batch_number):
        batch = real_batch(self, batch_number)
        batch["old_logp"] = batch["old_logp"] + 0.5 * batch["gen_mask"]  # a sampler whose numerics differ
        batch["sampled_by"] = sampled_by
        return batch

    monkeypatch.setattr(WebShopRLDataModule, "train_batch", train_batch)
    monkeypatch.setattr(WebShopRLModule, "packed_batch", lambda module, batch: packed.append(
        real_packed(module, batch)) or packed[-1])
    cli = fit("--trainer.max_steps=1", *NO_CHECKPOINTS, "--model.objective=GRPO")
    (step,) = packed
    mask = step.mask.bool()
    assert mask.any() and cli.model._logp_gap == pytest.approx(0.5, abs=1e-4)
    if sampled_by == "vllm":
        assert torch.equal(step.old_logp, step.logp.detach()) and not step.old_logp.requires_grad
    else:
        assert (step.old_logp - step.logp.detach())[mask].abs().min() > 0.49


def test_lora_trains_only_the_adapters_and_uses_the_base_as_reference(workdir, zero_v_star):
    cli = fit("--trainer.max_steps=1", *NO_CHECKPOINTS, "--model.lora.rank=2",
              "--model.lora.target_modules=[q_proj,v_proj]")
    assert cli.model.reference is None
    trainable = [n for n, p in cli.model.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    changed = [n for n, p in cli.model.policy.named_parameters() if "lora_B" in n and p.abs().sum() > 0]
    assert changed, "the adapters' B matrices start at 0 and must have moved"


# ------------------------------------------------------------------------------------------------ precision
@pytest.fixture
def linear_dtypes(monkeypatch):
    """Record the output dtype of every ``nn.Linear`` call by the phase it ran in: "stage1" (V* sampling),
    "rollout" (training batches), "eval" (greedy validation) or "loss" (the training step's passes)."""
    from apo_lightning.lit.rl_module import WebShopRLModule
    from apo_lightning.lit.stage1 import Stage1
    from apo_lightning.rollout.engine import RolloutEngine

    seen: dict[str, set] = {}
    phase = [None]

    def in_phase(name, function):
        def wrapped(*args, **kwargs):
            outer, phase[0] = phase[0], phase[0] or name(*args)
            try:
                return function(*args, **kwargs)
            finally:
                phase[0] = outer
        return wrapped

    monkeypatch.setattr(Stage1, "sample_rewards", in_phase(lambda *a: "stage1", Stage1.sample_rewards))
    monkeypatch.setattr(RolloutEngine, "rollout",
                        in_phase(lambda engine, *a: "eval" if engine.greedy else "rollout", RolloutEngine.rollout))
    monkeypatch.setattr(WebShopRLModule, "training_step", in_phase(lambda *a: "loss", WebShopRLModule.training_step))

    def hook(module, args, output):
        if isinstance(module, torch.nn.Linear) and phase[0]:
            seen.setdefault(phase[0], set()).add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    yield seen
    handle.remove()


@pytest.mark.parametrize("precision, compute", [("32-true", torch.float32), ("bf16-mixed", torch.bfloat16)])
def test_mixed_precision_reaches_rollouts_and_loss_but_not_stage_1(workdir, zero_v_star, linear_dtypes, precision,
                                                                   compute):
    """``--trainer.precision=bf16-mixed`` on the CPU (``benchmarks/training_throughput.py``, setting
    ``bf16_mixed``): the rollouts, the greedy validation and the loss's passes run under bfloat16 autocast, while
    stage 1 samples π_ref in float32 whatever the precision (the V* cache key has no precision in it) and the weights
    stay float32."""
    cli = fit("--trainer.max_steps=2", "--data.steps_per_epoch=2", *NO_CHECKPOINTS, f"--trainer.precision={precision}",
              f"--data.vstar.cache_dir=data/vstar-{precision}")  # stage 1 sampled in each
    policy = cli.model.policy
    assert not all(torch.equal(p, q) for p, q in zip(policy.parameters(), cli.model.reference.parameters())), \
        "the policy must have trained"
    assert {p.dtype for p in policy.parameters()} == {torch.float32}
    assert linear_dtypes == {"stage1": {torch.float32}, "rollout": {compute}, "eval": {compute}, "loss": {compute}}


# ------------------------------------------------------------------------------------------------ on-policy, resume
def test_each_batch_is_rolled_out_by_the_parameters_it_trains(workdir, zero_v_star, hashing_rollouts):
    recorder = Recorder()
    fit("--trainer.max_steps=4", "--data.steps_per_epoch=4", *NO_CHECKPOINTS, callbacks=[recorder])
    assert len(set(recorder.step_hash)) == 4, "the parameters must move every step for this test to mean anything"
    assert recorder.rollout_hash == recorder.step_hash  # batch k was sampled by the parameters after k updates
    assert recorder.batches == [0, 1, 2, 3]


def checkpointing(directory, after_validation=True):
    """Checkpoints after every step (``step=N.ckpt``) and, with ``after_validation``, after every validation
    (``val-step=N.ckpt``)."""
    every_step = ["--trainer.callbacks=[]", "--trainer.logger=false",
                  "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                  f"--trainer.callbacks.dirpath={directory}", "--trainer.callbacks.filename={step}",
                  "--trainer.callbacks.save_top_k=-1", "--trainer.callbacks.every_n_train_steps=1"]
    validation = ["--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                  f"--trainer.callbacks.dirpath={directory}", "--trainer.callbacks.filename=val-{step}",
                  "--trainer.callbacks.save_top_k=-1", "--trainer.callbacks.monitor=val/score",
                  "--trainer.callbacks.mode=max"]
    return every_step + (validation if after_validation else [])


def test_resume_from_any_checkpoint_continues_exactly(workdir, tmp_path, zero_v_star):
    run = ["--trainer.max_steps=6", "--data.steps_per_epoch=4", "--trainer.limit_val_batches=1"]
    straight = Recorder()
    cli = fit(*run, *checkpointing(tmp_path), callbacks=[straight])
    expected = hash_parameters(cli.model.policy)
    assert len(set(straight.step_hash)) == 6 and expected not in straight.step_hash  # it moved at every step
    resumes = {"mid-epoch": "step=1.ckpt", "every_n_train_steps": "step=3.ckpt", "epoch end": "step=4.ckpt",
               "after a validation": "val-step=4.ckpt", "second epoch": "step=5.ckpt"}
    for what, name in resumes.items():
        done = int(name.split("=")[1].split(".")[0])
        resumed = Recorder()
        cli = fit(*run, *NO_CHECKPOINTS, ckpt_path=str(tmp_path / name), callbacks=[resumed])
        assert cli.trainer.global_step == 6, what
        assert resumed.batches == straight.batches[done:], what  # no batch skipped, none repeated
        assert resumed.goals == straight.goals[done:], what
        assert resumed.tokens == straight.tokens[done:], what  # the same sampling seeds
        assert hash_parameters(cli.model.policy) == expected, what


def test_resuming_under_another_objective_reference_or_lora_is_refused_by_name(workdir):
    """``fit --ckpt_path last`` refuses a checkpoint trained with another objective (class or settings), another
    reference's weights or other LoRA settings, naming the difference (``python cli.py``: one line, exit status 2);
    the same weights at another path resume, and ``test`` evaluates the checkpoint under any objective."""
    from safetensors.torch import load_file, save_file

    run = ["fit", "--config", SMOKE, *QUIET, "--trainer.logger=false", "--run_name=refuse"]
    main([*run, "--trainer.max_steps=1"])
    resume = [*run, "--trainer.max_steps=2", "--ckpt_path=last"]
    def files():
        return {p: p.read_bytes() for p in Path(workdir).rglob("*") if p.is_file()}

    before = files()
    refused = subprocess.run([sys.executable, str(REPO / "cli.py"), *resume, "--model.objective=GRPO"], cwd=workdir,
                             capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert files() == before  # refused before anything is written: no log version, no checkpoint touched
    assert [line for line in refused.stderr.splitlines() if line.startswith("error:")] == [
        "error: checkpoint checkpoints/refuse/last.ckpt was trained with objective APO(beta2=0.01); this run asks "
        "for objective GRPO(group_size=4, clip_eps=0.2, beta_kl=0.0): resume it with the same objective or start "
        "afresh with another run_name"]
    with pytest.raises(SettingError,
                       match=r"with objective APO\(beta2=0.01\); this run asks for objective APO\(beta2=0.02\)"):
        build_cli([*resume, "--model.objective.beta2=0.02"])
    with pytest.raises(SettingError, match=r"with lora LoraSettings\(rank=0, .* asks for lora LoraSettings\(rank=2,"):
        build_cli([*resume, "--model.lora.rank=2"])
    shutil.copytree("data/models/tiny-smoke", "data/models/tiny-smoke-copy")
    changed = Path("data/models/tiny-smoke-other")
    shutil.copytree("data/models/tiny-smoke", changed)
    weights = load_file(changed / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + 0.01
    save_file(weights, changed / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(SettingError, match=r"with reference data/models/tiny-smoke \(float32 weights, sha256 "
                                           r"[0-9a-f]{16}\); this run asks for reference data/models/tiny-smoke-other "
                                           r"\(float32 weights, sha256 [0-9a-f]{16}\): resume it with the same "
                                           r"reference or"):
        build_cli([*resume, f"--model.model_name_or_path={changed}"])
    cli = main([*resume, "--model.model_name_or_path=data/models/tiny-smoke-copy"])  # the same weights elsewhere
    assert cli.trainer.global_step == 2
    main(["test", "--config", SMOKE, *QUIET, "--trainer.logger=false", "--run_name=refuse", "--ckpt_path=last",
          "--model.objective=GRPO"])  # evaluation: any objective
    assert (workdir / "results/refuse/summary.csv").read_text().splitlines()[1].startswith("grpo,test,")


class LearningRates(Callback):
    """The optimizer's learning rate at the start of each training step."""

    def __init__(self):
        self.rates = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.rates.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_learning_rate_warms_up_then_stays_and_resumes(workdir, tmp_path, zero_v_star):
    run = ["--trainer.max_steps=6", "--data.steps_per_epoch=6", "--trainer.limit_val_batches=0",
           "--model.learning_rate=1e-3", "--model.warmup_steps=2"]
    constant, straight = LearningRates(), Recorder()
    cli = fit(*run, *checkpointing(tmp_path, after_validation=False), callbacks=[constant, straight])
    assert constant.rates == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3])  # (s + 1) / warmup, then flat
    expected = hash_parameters(cli.model.policy)
    assert expected != straight.step_hash[3], "the parameters must move after the resumed-from step"
    resumed = LearningRates()
    cli = fit(*run, *NO_CHECKPOINTS, ckpt_path=str(tmp_path / "step=3.ckpt"), callbacks=[resumed])
    assert resumed.rates == pytest.approx(constant.rates[3:])
    assert hash_parameters(cli.model.policy) == expected


# ------------------------------------------------------------------------------------------------ run seeds
def weight_averaging(decay):
    """Lightning's EMAWeightAveraging callback with ``decay``, added to the config's callbacks."""
    return ["--trainer.callbacks+=lightning.pytorch.callbacks.EMAWeightAveraging", f"--trainer.callbacks.decay={decay}"]


def test_weight_averaging_validates_and_saves_the_average_and_samples_with_the_current_policy(
        workdir, tmp_path, zero_v_star, hashing_rollouts, monkeypatch):
    """Lightning's EMAWeightAveraging on this module: validation rolls out the moving average of the weights, the
    checkpoints keep it as their state_dict (what ``cli.py test`` evaluates) beside the current weights, and the
    training batches are still sampled by the current policy."""
    def weights(policy):
        return {name: p.detach().clone() for name, p in policy.named_parameters()}

    real_eval_batch, validated = WebShopRLDataModule.eval_batch, []

    def eval_batch(self, goals):
        validated.append((self.trainer.global_step, weights(self.trainer.lightning_module.policy)))
        return real_eval_batch(self, goals)

    monkeypatch.setattr(WebShopRLDataModule, "eval_batch", eval_batch)

    class AfterEachStep(Callback):
        def __init__(self):
            self.weights = {}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.weights[trainer.global_step] = weights(pl_module.policy)

    recorder, after = Recorder(), AfterEachStep()
    decay = 0.75
    fit("--trainer.max_steps=4", "--data.steps_per_epoch=2", *checkpointing(tmp_path, after_validation=False),
        *weight_averaging(decay), callbacks=[recorder, after])
    assert len(set(recorder.step_hash)) == 4, "the parameters must move every step for this test to mean anything"
    assert recorder.rollout_hash == recorder.step_hash  # training batches: the current policy samples them
    average = {}
    for step in (1, 2, 3, 4):  # torch.optim.swa_utils.get_ema_avg_fn: the first update copies, then d·avg + (1-d)·θ
        average[step] = {name: value if step == 1 else decay * average[step - 1][name] + (1 - decay) * value
                         for name, value in after.weights[step].items()}
    assert [step for step, _ in validated] == [2, 4]  # one validation batch after steps 2 and 4
    for step, seen in validated:
        for name, value in seen.items():
            assert torch.allclose(value, average[step][name], atol=1e-6), (step, name)
        assert any(not torch.allclose(seen[n], after.weights[step][n]) for n in seen), "average == current"
    checkpoint = torch.load(tmp_path / "step=4.ckpt", weights_only=False)
    for name, value in average[4].items():
        assert torch.allclose(checkpoint["state_dict"]["policy." + name], value, atol=1e-6), name
        assert torch.equal(checkpoint["current_model_state"]["policy." + name], after.weights[4][name]), name


def test_weight_averaging_resumes_exactly(workdir, tmp_path, zero_v_star):
    ema = weight_averaging(0.75)
    run = ["--trainer.max_steps=4", "--data.steps_per_epoch=4", "--trainer.limit_val_batches=0"]
    fit(*run, *checkpointing(tmp_path / "straight", after_validation=False), *ema)
    fit(*run, *checkpointing(tmp_path / "resumed", after_validation=False), *ema,
        ckpt_path=str(tmp_path / "straight" / "step=2.ckpt"))
    straight, resumed = (torch.load(tmp_path / name / "step=4.ckpt", weights_only=False)
                         for name in ("straight", "resumed"))
    start = torch.load(tmp_path / "straight" / "step=2.ckpt", weights_only=False)
    for key in ("state_dict", "current_model_state"):  # the average and the current weights
        assert any(not torch.equal(start[key][n], straight[key][n]) for n in start[key]), f"{key} did not move"
        for name, value in straight[key].items():
            assert torch.equal(resumed[key][name], value), (key, name)


def test_run_seeds_change_rollouts_but_not_goals_or_prices(workdir):
    runs = {}
    for seed in (0, 1, 0):
        recorder = Recorder()
        cli = fit("--trainer.max_steps=2", *NO_CHECKPOINTS, f"--seed_everything={seed}", callbacks=[recorder])
        shop = cli.datamodule.shop
        runs.setdefault(seed, []).append((recorder.tokens, cli.datamodule.goal_pool, shop.prices,
                                          [g["instruction_text"] for g in shop.goals]))
    (first, again), (other,) = runs[0], runs[1]
    assert first == again  # the same seed twice: identical rollouts
    assert other[0] != first[0]  # another seed: other rollouts ...
    assert other[1:] == first[1:]  # ... on the same goals, prices and instructions


def test_v_star_cache_key_covers_what_v_star_depends_on():
    from apo_lightning.apo.vstar import VStarCache
    from apo_lightning.lit.stage1 import Stage1, VStarConfig
    from apo_lightning.rollout.chat import ChatFormat
    from apo_lightning.rollout.settings import RolloutSettings
    from apo_lightning.utils.hashing import cache_key
    from apo_lightning.webshop.settings import EnvConfig, RewardSettings

    def key(reference="w0", goals=(1500, 1501, 1502, 1503), seed=0, env=EnvConfig(data_dir="synthetic", max_steps=3),
            chat=ChatFormat(), reward=RewardSettings(), vstar=VStarConfig(num_samples=2),
            rollout=RolloutSettings(max_new_tokens=8)):
        return cache_key(Stage1(vstar, env, chat, reward, rollout, seed).key_parts(reference, list(goals)))

    base = key()
    assert key() == base  # stable
    for changed in (key(reference="w1"), key(goals=(1500, 1501, 1502, 1503, 1504)),
                    key(vstar=VStarConfig(num_samples=3)), key(rollout=RolloutSettings(max_new_tokens=9)), key(seed=1),
                    key(env=EnvConfig(data_dir="synthetic", max_steps=4)),
                    key(reward=RewardSettings(format_penalty=-0.2)),
                    key(chat=ChatFormat(context_budget=2048)), key(vstar=VStarConfig(num_samples=2, temperature=0.7)),
                    key(reward=RewardSettings(kind="success")),
                    key(rollout=RolloutSettings(max_new_tokens=8, valid_clicks=True))):
        assert changed != base
    assert key(vstar=VStarConfig(num_samples=2, cache_dir="elsewhere")) == base  # where it is stored is not a part
    # the cache keeps the N rewards and V* is recomputed from them for any beta1, so beta1 never re-samples
    assert key(vstar=VStarConfig(num_samples=2, beta1=0.1)) == base
    assert key(rollout=RolloutSettings(max_new_tokens=8, temperature=0.5, top_p=0.9)) == base  # stage 2 sampling

    def stored(**changes):  # the cache's key without the data folder's absolute path (a change re-samples stage 1)
        stage1 = Stage1(VStarConfig(num_samples=2), EnvConfig(data_dir="synthetic", max_steps=3), ChatFormat(),
                        RewardSettings(), RolloutSettings(max_new_tokens=8), 0)
        for name, value in changes.items():
            setattr(stage1, name, value)
        return VStarCache.key({**stage1.key_parts("w0", [1500, 1501, 1502, 1503]), "data": "DATA"})

    assert stored() == "26a2dcae3f6ce41354c1288da8946b9101282b6f91f92e7c2fbe9f3683092048"
    assert (stored(rollout=RolloutSettings(max_new_tokens=8, valid_clicks=True))
            == "c3ac59cb37fa867519428cca61095fe4cc30722968fbfa9dbcd3f99a47604232")
    assert (stored(reward=RewardSettings(kind="success"))
            == "18efd132c6195a559e898fe1c7dd132d358661c966436aba0e075e1b8f8b5c6e")


class Built(Exception):
    """Raised, with its keyword arguments, where a rollout engine is built (``built_engine``)."""


@pytest.fixture
def built_engine(monkeypatch):
    """The ``RolloutEngine`` that ``RolloutSettings.engine`` builds (for stage 1, training and evaluation alike)
    replaced by one that raises :class:`Built` with the arguments it got."""
    from apo_lightning.rollout import settings

    def engine(*args, **kwargs):
        raise Built(kwargs)

    monkeypatch.setattr(settings, "RolloutEngine", engine)


def test_stage_1_samples_the_reference_at_its_own_temperature_without_a_nucleus(built_engine):
    from apo_lightning.lit.stage1 import VStarConfig
    from apo_lightning.rollout.settings import RolloutSettings
    from apo_lightning.webshop.settings import EnvConfig

    data = WebShopRLDataModule(env=EnvConfig(data_dir=None, max_steps=3), train_goals=4,
                               vstar=VStarConfig(num_samples=2, temperature=0.7),
                               rollout=RolloutSettings(max_new_tokens=8, temperature=1.0, top_p=0.5))
    with pytest.raises(Built) as built:
        data.stage1.sample_rewards(None, None, data.pool(), "stage1")
    kwargs = built.value.args[0]
    assert (kwargs["temperature"], kwargs["top_p"], kwargs["max_new_tokens"], kwargs["greedy"]) == (0.7, 1.0, 8, False)


@pytest.mark.parametrize("valid_clicks", [False, True])
def test_valid_clicks_reach_the_stage_1_and_the_evaluation_engines(built_engine, valid_clicks):
    from apo_lightning.rollout.settings import RolloutSettings
    from apo_lightning.webshop.settings import EnvConfig

    data = WebShopRLDataModule(env=EnvConfig(data_dir=None, max_steps=3), train_goals=4,
                               rollout=RolloutSettings(max_new_tokens=8, valid_clicks=valid_clicks))
    data.trainer = SimpleNamespace(lightning_module=SimpleNamespace(rollout_policy=lambda: (None, None)),
                                   precision_plugin=SimpleNamespace(forward_context=nullcontext), global_rank=0,
                                   world_size=1, global_step=0)
    for build in (lambda: data.stage1.sample_rewards(None, None, data.pool(), "stage1"),
                  lambda: data.eval_batch([0])):
        with pytest.raises(Built) as built:
            build()
        assert built.value.args[0]["valid_clicks"] is valid_clicks


def test_a_setting_out_of_range_is_named_with_its_value():
    from apo_lightning.apo.objectives import GRPO
    from apo_lightning.lit.stage1 import VStarConfig
    from apo_lightning.rollout.settings import RolloutSettings

    no_v_star = "when needs_v_star is false (no stage 1)"
    # each setting class checks itself when built (utils.settings.check_settings), the data module its own
    for build, message in ((lambda: WebShopRLDataModule(batch_size=0), "batch_size must be >= 1, got 0"),
                           (lambda: WebShopRLDataModule(steps_per_epoch=0), "steps_per_epoch must be >= 1, got 0"),
                           (lambda: WebShopRLDataModule(val_goals=-1), "val_goals must be >= 0 (0 = all), got -1"),
                           (lambda: VStarConfig(num_samples=0), "vstar.num_samples must be >= 1, got 0"),
                           (lambda: VStarConfig(beta1=0.0), "vstar.beta1 must be > 0, got 0"),
                           (lambda: RolloutSettings(temperature=0.0), "rollout.temperature must be > 0, got 0"),
                           (lambda: WebShopRLDataModule(objective=GRPO(), vstar=VStarConfig(reuse=3)),
                            f"vstar.reuse must be 0 {no_v_star}, got 3")):
        with pytest.raises(ValueError) as raised:
            build()
        assert str(raised.value) == message
    assert WebShopRLDataModule(objective=GRPO()).needs_v_star is False  # the defaults are in range


def test_fewer_evaluation_goals_than_processes_are_refused_by_name():
    """A process with no goals would stop the others (Lightning refuses an empty loader on one rank): say which
    setting is too small instead."""
    from apo_lightning.webshop.settings import EnvConfig

    data = WebShopRLDataModule(env=EnvConfig(data_dir="synthetic", max_steps=3), test_goals=1, val_goals=2,
                               train_goal_indices=None)
    data.trainer = SimpleNamespace(world_size=2, global_rank=1)
    with pytest.raises(SettingError, match=r"^data.test_goals must be at least the number of processes \(2\), got 1 "):
        data.test_dataloader()
    assert len(data.val_dataloader()) == 1  # 2 goals, 2 processes: one each


def test_sft_validation_too_small_for_the_processes_is_refused_by_name():
    """The SFT course's validation too: a process with no batch of demonstrations or no goal would stop the
    others, so the setting that is too small is named."""
    from apo_lightning.lit.sft_data import SFTDataModule
    from apo_lightning.webshop.settings import EnvConfig

    data = SFTDataModule(env=EnvConfig(data_dir="synthetic", max_steps=3), batch_size=4, num_val_demos=3, val_goals=2)
    data.trainer = SimpleNamespace(world_size=2, global_rank=1)
    data.val_examples = [{}] * 3  # one batch of demonstrations for two processes
    with pytest.raises(SettingError, match=r"^data.num_val_demos must give each of the 2 processes a batch \(more than "
                                           r"4 successful demonstrations at data.batch_size 4\), got 3 goals with 3 "
                                           r"successful demonstrations$"):
        data.val_dataloader()
    data.val_examples, data.val_goals = [{}] * 5, 1  # two batches of demonstrations, one goal
    with pytest.raises(SettingError, match=r"^data.val_goals must be 0 or at least the number of processes \(2\), "
                                           r"got 1 goals$"):
        data.val_dataloader()
    data.val_goals = 2
    assert [len(loader) for loader in data.val_dataloader()] == [1, 1]  # one batch and one goal each
    data.val_examples, data.val_goals = [], 0  # no validation demonstrations or episodes: allowed
    assert [len(loader) for loader in data.val_dataloader()] == [0, 0]


def test_train_goal_indices_fix_the_training_goals_and_refuse_goals_outside_the_train_split():
    from apo_lightning.webshop.settings import EnvConfig

    env = EnvConfig(data_dir=None, max_steps=3)
    train = env.split("train")
    chosen = [train[5], train[2], train[9]]
    data = WebShopRLDataModule(env=env, train_goals=4, train_goal_indices=chosen)
    assert data.pool() == chosen  # exactly these, in this order; train_goals is ignored
    assert WebShopRLDataModule(env=env, train_goals=4).pool() == list(train[:4])
    with pytest.raises(ValueError, match=rf"\[{env.split('test')[0]}\] are not in the train split"):
        WebShopRLDataModule(env=env, train_goal_indices=[train[0], env.split("test")[0]]).pool()


class RowRecorder(Callback):
    """Per training batch: the fresh trajectories' count, every row's goal, reward, V* and group, and how many rows
    the module's packed batch (what the loss sees) holds."""

    def __init__(self):
        self.rows = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        with torch.no_grad():
            packed_rows = pl_module.packed_batch(batch).reward.shape[0]
        self.rows.append({"fresh": len(batch["trajectories"]), "goal": batch["goal_index"].tolist(),
                          "reward": batch["reward"].tolist(), "v_star": batch["v_star"].tolist(),
                          "group": batch["group"].tolist(), "packed": packed_rows})


def test_stage1_samples_are_reused_as_regression_rows_with_their_v_star(workdir, monkeypatch):
    from apo_lightning.lit.stage1 import Stage1

    run = ["--trainer.max_steps=2", *NO_CHECKPOINTS, "--data.vstar.cache_dir=data/vstar-reuse"]
    plain = fit(*run)  # a V* table cached without its trajectories
    first = RowRecorder()
    cli = fit(*run, "--data.vstar.reuse=3", callbacks=[first])
    data = cli.datamodule
    table = data.stage1.table
    assert table.rewards == plain.datamodule.stage1.table.rewards  # sampled again, to the same rewards
    pool = set(data.goal_pool)  # one process: its share is the whole pool
    for batch in first.rows:
        fresh = batch["fresh"]
        assert fresh == 2 and len(batch["reward"]) == fresh + 3 and batch["packed"] == fresh + 3
        for goal, reward, v_star in zip(batch["goal"][fresh:], batch["reward"][fresh:], batch["v_star"][fresh:]):
            assert goal in pool and any(reward == pytest.approx(r) for r in table.rewards[goal])
            assert v_star == pytest.approx(table.v_star[goal])
        assert len(set(batch["group"])) == len(batch["group"])  # one goal per fresh row here, each reused row alone
    assert first.rows[0]["goal"][2:] != first.rows[1]["goal"][2:] or first.rows[0]["reward"][2:] != \
        first.rows[1]["reward"][2:]  # drawn afresh for each batch
    stored = {g: [r["reward"] for r in records] for g, records in data.stage1.samples.items()}
    assert stored == table.rewards  # the kept trajectories are the ones V* came from

    def no_sampling(*args, **kwargs):
        raise AssertionError("stage 1 sampled although its trajectories were cached")

    monkeypatch.setattr(Stage1, "sample_rewards", no_sampling)
    again = RowRecorder()
    fit(*run, "--data.vstar.reuse=3", callbacks=[again])
    assert [b["reward"][2:] for b in again.rows] == [b["reward"][2:] for b in first.rows]
    assert [b["goal"][2:] for b in again.rows] == [b["goal"][2:] for b in first.rows]


# ------------------------------------------------------------------------------------------------ skipped steps
def test_non_finite_loss_skips_the_step(workdir, monkeypatch):
    from apo_lightning.apo.objectives import APO

    real = APO.loss

    def nan_loss(self, batch):
        loss, stats = real(self, batch)
        return loss * float("nan"), stats

    monkeypatch.setattr(APO, "loss", nan_loss)
    cli = fit("--trainer.max_steps=2", *NO_CHECKPOINTS)
    assert cli.model.skipped_nonfinite == 2
    before = dict(cli.model.reference.named_parameters())
    assert all(torch.equal(p, before[n]) for n, p in cli.model.policy.named_parameters())


# ------------------------------------------------------------------------------------------------ SFT
#: ``configs/sft_quickstart.yaml`` on one process, with a very small tiny policy and a short course.
SFT_CONFIG = str(REPO / "configs" / "sft_quickstart.yaml")
SFT_SMOKE = ["--trainer.callbacks=[]", "--trainer.devices=1", "--trainer.strategy=auto",
             "--model.model_name_or_path=data/models/sft-smoke-init", "--model.tiny.vocab_size=512",
             "--model.tiny.hidden_size=32", "--model.tiny.num_layers=2", "--model.tiny.num_heads=2",
             "--model.tiny.num_kv_heads=1", "--model.tiny.intermediate_size=64", "--model.tiny.corpus_goals=10",
             "--data.drills.batch_size=4", "--data.num_demos=6", "--data.num_val_demos=2", "--data.demo_epochs=1",
             "--data.batch_size=2", "--data.max_new_tokens=8", "--data.env.max_steps=10", "--model.learning_rate=0.01",
             "--model.warmup_steps=1", "--trainer.log_every_n_steps=1"]


class SFTBatches(Callback):
    """The phase and token ids of every SFT batch trained on."""

    def __init__(self):
        self.batches = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append((batch["phase"], batch["input_ids"].tolist()))


def test_sft_resumes_its_course_exactly_from_a_mid_course_checkpoint(workdir, tmp_path):
    """Drills then demonstrations, resumed from a checkpoint in the drills and one in the demonstrations: the same
    batches, the same parameters. (``trainer.estimated_stepping_batches`` in ``configure_optimizers`` used to restart
    the course from batch 0 on resume: Lightning #20550.)"""
    course = [*SFT_SMOKE, "--data.drills.steps=4", "--data.drills.checks_per_kind=0", "--data.val_goals=0",
              "--trainer.limit_val_batches=0", "--model.export_dir=null", "--trainer.logger=false"]
    straight = SFTBatches()
    cli = fit(*course, *checkpointing(tmp_path, after_validation=False), callbacks=[straight], config=SFT_CONFIG)
    assert cli.trainer.global_step == 7 and [p for p, _ in straight.batches] == ["drills"] * 4 + ["demos"] * 3
    final, expected = cli.model.state_dict(), hash_parameters(cli.model.policy)
    for done in (2, 5):  # in the drills, in the demonstrations
        saved = torch.load(tmp_path / f"step={done}.ckpt", weights_only=False)["state_dict"]
        assert any(not torch.equal(saved[k], final[k]) for k in final), done  # the parameters moved after it
        resumed = SFTBatches()
        cli = fit(*course, "--trainer.enable_checkpointing=false", callbacks=[resumed], config=SFT_CONFIG,
                  ckpt_path=tmp_path / f"step={done}.ckpt")
        assert cli.trainer.global_step == 7 and resumed.batches == straight.batches[done:], done
        assert hash_parameters(cli.model.policy) == expected, done
    # another starting model (same tokenizer, other weights) is refused by name; the same weights elsewhere resume
    from safetensors.torch import load_file, save_file
    other = Path("data/models/sft-smoke-other")
    shutil.copytree("data/models/sft-smoke-init", other)
    weights = load_file(other / "model.safetensors")
    weights[sorted(weights)[0]] += 0.01
    save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(SettingError, match=r"step=2.ckpt was trained with model data/models/sft-smoke-init \(float32 "
                                           r"weights, sha256 [0-9a-f]{16}\); this run asks for model "
                                           r"data/models/sft-smoke-other"):
        fit(*course, f"--model.model_name_or_path={other}", "--trainer.enable_checkpointing=false",
            config=SFT_CONFIG, ckpt_path=tmp_path / "step=2.ckpt")


def test_sft_trains_drills_then_demonstrations_through_the_trainer_and_exports(workdir):
    from lightning.pytorch.loggers import CSVLogger

    sft = ["fit", "--config", SFT_CONFIG, *QUIET, *SFT_SMOKE, "--trainer.enable_checkpointing=false",
           "--model.export_dir=data/models/sft-smoke", "--data.drills.steps=12", "--data.drills.checks_per_kind=1",
           "--trainer.val_check_interval=1.0", "--data.drills.swap_values=0.5", "--data.val_goals=2",
           "--trainer.logger=lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir=logs"]
    cli = main(sft)
    data = cli.datamodule
    assert cli.model.hparams.constant_steps == 12  # linked from the drills
    assert data.drill_source.swap == 0.5  # the value swaps reach the drills
    assert cli.trainer.global_step == data.course_length() == 12 + data.demo_batches_per_epoch()
    assert isinstance(cli.trainer.logger, CSVLogger)
    rows = [line.split(",") for line in Path(cli.trainer.logger.log_dir, "metrics.csv").read_text().splitlines()]
    header = rows[0]
    drills = [float(r[header.index("train/drills_loss")]) for r in rows[1:] if r[header.index("train/drills_loss")]]
    demos = [float(r[header.index("train/demos_loss")]) for r in rows[1:] if r[header.index("train/demos_loss")]]
    assert len(drills) == 12 and len(demos) == data.demo_batches_per_epoch()
    assert sum(drills[-3:]) < 0.9 * sum(drills[:3])  # the drills, trained through the Trainer, lower their loss
    assert {"val/loss", "val/success_rate", "val/copy_index"} <= set(header)
    exported = Path("data/models/sft-smoke")
    assert (exported / "model.safetensors").is_file()
    from apo_lightning.models.loading import load_policy

    initial, _ = load_policy("data/models/sft-smoke-init")
    trained, _ = load_policy(str(exported))
    assert hash_parameters(initial) != hash_parameters(trained)
    cache = next(Path("data/sft").glob("demos-*.pt"))
    torch.load(cache, weights_only=True)  # plain tensors: no pickle of our own objects


# ------------------------------------------------------------------------------------------------ DDP
def test_ddp_two_processes_share_the_work_agree_and_resume_exactly(workdir, tmp_path):
    """Two processes (``ddp_fork``: the same code as ``ddp``, without re-importing everything per rank): each rolls
    out its own goals with its own seeds and stage 1 is split between them; the ranks agree on the parameters; and
    a run resumed from a mid-epoch checkpoint ends where the uninterrupted one does, batch for batch."""
    checkpoints = tmp_path / "ckpt"
    common = ["fit", "--config", SMOKE, *QUIET, "--trainer.strategy=ddp_fork", "--trainer.devices=2",
              "--data.steps_per_epoch=4", "--data.vstar.cache_dir=vstar_ddp", "--trainer.max_steps=3",
              "--trainer.callbacks=[]", "--trainer.logger=false"]
    audit = ["--trainer.callbacks+=tests.rank_audit.RankAudit", "--trainer.callbacks.out_dir={}"]
    keep = ["--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
            f"--trainer.callbacks.dirpath={checkpoints}", "--trainer.callbacks.filename={step}",
            "--trainer.callbacks.save_top_k=-1", "--trainer.callbacks.every_n_train_steps=1"]
    straight = [*common, *keep, audit[0], audit[1].format(tmp_path / "straight")]
    resumed = [*common, "--trainer.enable_checkpointing=false", audit[0], audit[1].format(tmp_path / "resumed"),
               f"--ckpt_path={checkpoints / 'step=1.ckpt'}"]
    script = tmp_path / "ddp_runs.py"
    script.write_text(DDP_SCRIPT)
    subprocess.run([sys.executable, str(script), json.dumps([straight, resumed])], check=True, cwd=workdir,
                   timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    straight, resumed = ([json.loads((tmp_path / run / f"rank{r}.json").read_text()) for r in (0, 1)]
                         for run in ("straight", "resumed"))

    (table,) = (workdir / "vstar_ddp").glob("*.json")
    stage1 = json.loads(table.read_text())
    smoke = yaml.safe_load(Path(SMOKE).read_text())["data"]["init_args"]
    assert len(stage1["rewards"]) == smoke["train_goals"]
    assert {len(r) for r in stage1["rewards"].values()} == {smoke["vstar"]["num_samples"]}
    assert [r["world_size"] for r in straight] == [2, 2] and [r["global_step"] for r in straight] == [3, 3]
    assert len(straight[0]["goals"]) == len(straight[1]["goals"]) == 6  # 3 batches of 2 goals each
    assert not set(straight[0]["goals"]) & set(straight[1]["goals"])  # each rank its own shard
    assert straight[0]["parameters_sha256"] == straight[1]["parameters_sha256"]

    first, last = (torch.load(checkpoints / f"step={n}.ckpt", weights_only=False)["state_dict"] for n in (1, 3))
    assert any(not torch.equal(first[k], last[k]) for k in first)  # the parameters moved after step 1
    for r, s in zip(resumed, straight):
        assert r["batches"] == s["batches"][1:] and r["goals"] == s["goals"][2:]
        assert r["parameters_sha256"] == s["parameters_sha256"]


@pytest.mark.slow
def test_ddp_with_the_script_launcher(workdir, tmp_path):
    """The ``ddp`` strategy of the CPU configs: Lightning re-runs ``cli.py`` for rank 1."""
    audit = tmp_path / "audit"
    command = [sys.executable, str(REPO / "cli.py"), "fit", "--config", SMOKE, *QUIET, "--trainer.strategy=ddp",
               "--trainer.devices=2", "--trainer.max_steps=2", *NO_CHECKPOINTS,
               "--trainer.callbacks+=tests.rank_audit.RankAudit", f"--trainer.callbacks.out_dir={audit}"]
    subprocess.run(command, check=True, cwd=workdir, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    ranks = [json.loads((audit / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["global_step"] for r in ranks] == [2, 2] and not set(ranks[0]["goals"]) & set(ranks[1]["goals"])
    assert ranks[0]["parameters_sha256"] == ranks[1]["parameters_sha256"]


# ------------------------------------------------------------------------------------------------ --ckpt_path best
def _checkpoint_config(folder):
    from jsonargparse import Namespace
    monitored = Namespace(class_path="lightning.pytorch.callbacks.ModelCheckpoint",
                          init_args=Namespace(monitor="val/score", dirpath=str(folder)))
    periodic = Namespace(class_path="lightning.pytorch.callbacks.ModelCheckpoint",
                         init_args=Namespace(monitor=None, dirpath=str(folder)))
    return Namespace(trainer=Namespace(callbacks=[periodic, monitored]))


def _save_checkpoint(path, step, best):
    """A checkpoint file as Lightning writes it, reduced to what ``best_checkpoint`` reads."""
    callbacks = {"ModelCheckpoint{'monitor': None}": {"monitor": None, "best_model_path": str(path)},
                 "ModelCheckpoint{'monitor': 'val/score'}": {"monitor": "val/score", "best_model_path": str(best)}}
    torch.save({"global_step": step, "callbacks": callbacks}, path)


def test_ckpt_path_best_is_the_best_recorded_by_the_newest_checkpoint(tmp_path):
    from apo_lightning.lit.outputs import best_checkpoint
    first, second = tmp_path / "best-step=15.ckpt", tmp_path / "best-step=30.ckpt"
    _save_checkpoint(first, 15, first)
    _save_checkpoint(tmp_path / "step=20.ckpt", 20, first)  # written before the second validation
    assert best_checkpoint(_checkpoint_config(tmp_path)) == str(first)
    _save_checkpoint(second, 30, second)
    _save_checkpoint(tmp_path / "last.ckpt", 45, first)  # the best stays at step 15 when later ones score lower
    assert best_checkpoint(_checkpoint_config(tmp_path)) == str(first)
    _save_checkpoint(tmp_path / "last.ckpt", 45, second)
    assert best_checkpoint(_checkpoint_config(tmp_path)) == str(second)
    second.unlink()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        best_checkpoint(_checkpoint_config(tmp_path))


def test_ckpt_path_best_without_a_monitor_or_a_record_says_so(tmp_path):
    from apo_lightning.lit.outputs import best_checkpoint
    config = _checkpoint_config(tmp_path)
    with pytest.raises(FileNotFoundError, match="records a best one"):
        best_checkpoint(config)
    config.trainer.callbacks = config.trainer.callbacks[:1]
    with pytest.raises(ValueError, match="needs a ModelCheckpoint callback with a monitor"):
        best_checkpoint(config)
