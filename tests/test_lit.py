"""The Lightning layer end to end on a tiny untrained policy: configs, fit/test, exact resume, DDP, skipped steps."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from apo_lightning.lit.callbacks import parameters_sha256
from apo_lightning.agent.logprobs import generated_logprobs
from apo_lightning.lit.rl_module import pack_generated

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from cli import main  # noqa: E402

SMOKE = str(REPO / "configs" / "smoke.yaml")
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory shared by the tests of this file (catalog, tiny policy and V* cache built once)."""
    path = tmp_path_factory.mktemp("lit")
    cwd = os.getcwd()
    os.chdir(path)
    yield path
    os.chdir(cwd)


def fit(*overrides):
    return main(["fit", "--config", SMOKE, *QUIET, *overrides])


@pytest.mark.parametrize("config", sorted(str(p) for p in (REPO / "configs").glob("*.yaml")))
def test_every_config_parses_and_instantiates(config):
    from cli import APOLightningCLI

    parsed = APOLightningCLI(subclass_mode_model=True, subclass_mode_data=True, run=False,
                             args=["--config", config, "--trainer.logger=false", "--trainer.accelerator=cpu"])
    assert parsed.model is not None and parsed.datamodule is not None
    assert yaml.safe_load(Path(config).read_text())["model"]["class_path"].startswith("apo_lightning.")


def test_fit_then_test_writes_checkpoint_and_results(workdir):
    cli = fit("--trainer.max_steps=2")
    assert cli.trainer.global_step == 2
    assert (workdir / "checkpoints/smoke/last.ckpt").exists()
    checkpoint = torch.load(workdir / "checkpoints/smoke/last.ckpt", weights_only=False)
    assert not any(k.startswith("_reference") or "reference" in k for k in checkpoint["state_dict"])
    assert checkpoint["WebShopRLDataModule"]["cursor"] == 2
    events = EventAccumulator(cli.trainer.logger.log_dir)
    events.Reload()
    stage1 = events.Scalars("stage1/pass_at_n")
    assert len(stage1) == 1 and stage1[0].step == 0 and 0.0 <= stage1[0].value <= 1.0
    assert {"train/loss", "rollout/success_rate", "train/kl"} <= set(events.Tags()["scalars"])
    main(["test", "--config", SMOKE, *QUIET, "--ckpt_path", "last"])
    for name in ("summary.csv", "episodes.jsonl", "failure_analysis.md"):
        assert (workdir / "results/smoke" / name).exists()
    # a checkpoint file (not last/best): the command line, not the checkpoint's hyperparameters, sets the model
    main(["test", "--config", SMOKE, *QUIET, "--ckpt_path", str(workdir / "checkpoints/smoke/last.ckpt"),
          "--model.results_dir", "results/explicit", "--model.method_name", "explicit"])
    assert (workdir / "results/explicit/summary.csv").read_text().splitlines()[1].startswith("explicit,test,")


def test_training_changes_every_policy_parameter(workdir, monkeypatch):
    # an untrained policy earns the same format penalty everywhere, so r == V* and the A*-PO gradient is 0;
    # V* = 0 makes the advantage non-zero
    from apo_lightning.apo.vstar import VStarTable

    monkeypatch.setattr(VStarTable, "lookup", lambda self, goals, device=None: torch.zeros(len(goals)))
    cli = fit("--trainer.max_steps=1", "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false")
    trained = dict(cli.model.policy.named_parameters())
    reference = dict(cli.model.reference.named_parameters())
    changed = [n for n in trained if not torch.equal(trained[n], reference[n])]
    assert len(changed) == len(trained)
    assert all(not p.requires_grad for p in reference.values())


def test_lora_trains_only_the_adapters_and_uses_the_base_as_reference(workdir, monkeypatch):
    from apo_lightning.apo.vstar import VStarTable

    monkeypatch.setattr(VStarTable, "lookup", lambda self, goals, device=None: torch.zeros(len(goals)))
    cli = fit("--trainer.max_steps=1", "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false",
              "--model.lora.rank=2", "--model.lora.target_modules=[q_proj,v_proj]")
    assert cli.model.reference is None
    trainable = [n for n, p in cli.model.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    changed = [n for n, p in cli.model.policy.named_parameters() if "lora_B" in n and p.abs().sum() > 0]
    assert changed, "the adapters' B matrices start at 0 and must have moved"


def test_resume_continues_exactly(workdir, tmp_path):
    straight = fit("--trainer.max_steps=4", f"--trainer.default_root_dir={tmp_path}/a",
                   "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false")
    expected = parameters_sha256(straight.model.policy)
    ckpt = tmp_path / "b"
    callback = ("--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                f"--trainer.callbacks.dirpath={ckpt}", "--trainer.callbacks.save_last=true",
                "--trainer.callbacks.every_n_train_steps=1")
    first = fit("--trainer.max_steps=2", "--trainer.callbacks=[]", *callback)
    assert first.trainer.global_step == 2
    resumed = fit("--trainer.max_steps=4", "--trainer.callbacks=[]", *callback, f"--ckpt_path={ckpt}/last.ckpt")
    assert resumed.trainer.global_step == 4
    assert resumed.datamodule.cursor == 4
    assert parameters_sha256(resumed.model.policy) == expected


def test_non_finite_loss_skips_the_step(workdir, monkeypatch):
    import apo_lightning.lit.rl_module as rl_module

    real = rl_module.apo_loss

    def nan_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(rl_module, "apo_loss", nan_loss)
    cli = fit("--trainer.max_steps=2", "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false")
    assert cli.model.skipped_nonfinite == 2
    before = dict(cli.model.reference.named_parameters())
    assert all(torch.equal(p, before[n]) for n, p in cli.model.policy.named_parameters())


def test_ddp_two_processes_roll_out_different_goals_and_agree(workdir):
    audit = workdir / "audit"
    command = [sys.executable, str(REPO / "cli.py"), "fit", "--config", SMOKE, *QUIET,
               "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.max_steps=2",
               "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false",
               "--trainer.callbacks+=apo_lightning.lit.callbacks.RankAudit", f"--trainer.callbacks.out_dir={audit}",
               "--data.vstar.cache_dir=vstar_ddp"]  # a fresh cache: stage 1 runs, each rank sampling half the goals
    subprocess.run(command, check=True, cwd=workdir, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    (table,) = (workdir / "vstar_ddp").glob("*.json")
    stage1 = json.loads(table.read_text())
    smoke = yaml.safe_load(Path(SMOKE).read_text())["data"]["init_args"]
    assert len(stage1["rewards"]) == smoke["train_goals"]
    assert {len(r) for r in stage1["rewards"].values()} == {smoke["vstar"]["num_samples"]}
    ranks = [json.loads((audit / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert [r["global_step"] for r in ranks] == [2, 2]
    assert len(ranks[0]["goals"]) == len(ranks[1]["goals"]) == 4  # 2 batches of 2 goals each
    assert not set(ranks[0]["goals"]) & set(ranks[1]["goals"])
    assert ranks[0]["parameters_sha256"] == ranks[1]["parameters_sha256"]


def test_pack_generated_gathers_each_trajectorys_tokens_across_segments():
    values = torch.arange(12, dtype=torch.float32).reshape(3, 4)  # 3 segments x 4 positions
    gen_mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    traj_index = torch.tensor([0, 1, 0])  # segments 0 and 2 belong to trajectory 0
    packed, mask = pack_generated(values, gen_mask, traj_index, 2)
    assert packed.tolist() == [[1.0, 2.0, 8.0], [6.0, 7.0, 0.0]]
    assert mask.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def test_v_star_cache_key_covers_what_v_star_depends_on():
    from apo_lightning.agent.chat import ChatFormat
    from apo_lightning.apo.vstar import cache_key
    from apo_lightning.lit.common import EnvConfig
    from apo_lightning.lit.rl_data import VStarConfig, WebShopRLDataModule

    def key(reference="w0", **changes):
        settings = dict(env=EnvConfig(data_dir=None, max_steps=3), chat=ChatFormat(), train_goals=4,
                        vstar=VStarConfig(num_samples=2), max_new_tokens=8)
        settings.update(changes)
        return cache_key(WebShopRLDataModule(**settings).vstar_key_parts(reference))

    base = key()
    assert key() == base  # stable
    for changed in (key(reference="w1"), key(train_goals=5), key(vstar=VStarConfig(num_samples=3)),
                    key(max_new_tokens=9),
                    key(env=EnvConfig(data_dir=None, max_steps=4)), key(chat=ChatFormat(format_penalty=-0.2)),
                    key(chat=ChatFormat(history_turns=1)), key(vstar=VStarConfig(num_samples=2, temperature=0.7)),
                    key(chat=ChatFormat(reward="success"))):
        assert changed != base
    # the default reward is left out of the key, so caches made before the setting existed stay valid
    parts = WebShopRLDataModule(env=EnvConfig(data_dir=None), chat=ChatFormat(reward="score")).vstar_key_parts("w0")
    assert "reward" not in parts["chat"] and "format_penalty" in parts["chat"]
    assert key(vstar=VStarConfig(num_samples=2, cache_dir="elsewhere")) == base  # where it is stored is not a part
    # the cache keeps the N rewards and V* is recomputed from them for any beta1, so beta1 never re-samples
    assert key(vstar=VStarConfig(num_samples=2, beta1=0.1)) == base


def _tiny_qwen_and_segments():
    """A small random Qwen2 and a right-padded (4, 12) batch of segments of lengths 12, 9, 5, 7; the last has no
    generated token."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    input_ids = torch.randint(1, 50, (4, 12))
    attention_mask = torch.ones(4, 12, dtype=torch.long)
    attention_mask[1, 9:] = 0
    attention_mask[2, 5:] = 0
    attention_mask[3, 7:] = 0
    gen_mask = torch.zeros(4, 12)
    gen_mask[0, 3:7] = gen_mask[0, 10:] = 1
    gen_mask[1, 6:9] = 1
    gen_mask[2, 2:5] = 1
    return model, input_ids, attention_mask, gen_mask


def test_generated_logprobs_match_the_full_logits_path():
    """Head + log-softmax at generated positions only (no mask on a right-padded batch) = the full-logits
    log-probs on every generated token, 0 elsewhere, with gradients (each segment runs cut to its length)."""
    from apo_lightning.apo.losses import token_logprobs

    model, input_ids, attention_mask, gen_mask = _tiny_qwen_and_segments()
    full = token_logprobs(model(input_ids=input_ids, attention_mask=attention_mask).logits, input_ids) * gen_mask
    fast = generated_logprobs(model, input_ids, attention_mask, gen_mask)
    assert torch.allclose(fast, full, atol=1e-5)
    padded = generated_logprobs(model, input_ids, attention_mask, gen_mask, per_segment=False)
    assert torch.allclose(padded, full, atol=1e-5)
    assert (fast[gen_mask == 0] == 0).all()
    fast.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None


def test_generated_nll_is_the_sft_loss_with_its_gradients():
    """The SFT loss through generated_logprobs = apo.losses.sft_loss on the full logits, value and gradient; a batch
    with no generated target token is refused as sft_loss refuses it."""
    from apo_lightning.agent.logprobs import generated_nll
    from apo_lightning.apo.losses import sft_loss

    model, input_ids, attention_mask, gen_mask = _tiny_qwen_and_segments()
    full = sft_loss(model(input_ids=input_ids, attention_mask=attention_mask).logits, input_ids, gen_mask)
    full.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    fast = generated_nll(model, input_ids, attention_mask, gen_mask)
    fast.backward()
    assert fast.dtype == torch.float32 and fast.item() == pytest.approx(full.item(), abs=1e-5)
    for name, p in model.named_parameters():
        assert torch.allclose(p.grad, expected[name], atol=1e-5), name
    only_first = torch.zeros_like(gen_mask)
    only_first[:, 0] = 1  # token 0 has no prediction: nothing to learn
    with pytest.raises(ValueError, match="no generated target token"):
        generated_nll(model, input_ids, attention_mask, only_first)
