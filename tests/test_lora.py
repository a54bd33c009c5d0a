"""LoRA end to end on the tiny policy: SFT trains only an adapter and exports it unmerged; ``load_policy`` opens an
adapter folder over its base; A*-PO from that adapter regresses against the SFT'd model (base + SFT adapter) as
π_ref, starts equal to it, and exports its own adapter over the base alone; resumes are checked against the
reference the loss sees. The slow test takes one LoRA SFT step on SmolLM2-135M-Instruct.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from safetensors.torch import load_file, save_file

from apo_lightning.apo.logprobs import generated_logprobs, pack_generated
from apo_lightning.apo.vstar import VStarTable
from apo_lightning.lit.callbacks import ExportPolicy
from apo_lightning.lit.export import export_checkpoint
from apo_lightning.lit.rl_module import WebShopRLModule
from apo_lightning.lit.settings import SettingError
from apo_lightning.lit.sft_module import SFTModule
from apo_lightning.models.hub import ADAPTER_CONFIG
from apo_lightning.models.loading import export_policy, load_policy, tokenizer_folder
from apo_lightning.models.lora import LoraSettings
from apo_lightning.utils.hashing import hash_parameters
from conftest import fit_in_process, link_smollm2

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "configs" / "smoke.yaml")
SFT_CONFIG = str(REPO / "configs" / "sft_quickstart.yaml")
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.logger=false"]
NO_CHECKPOINTS = ["--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"]
#: the adapter every run here trains: rank 4 on every projection of the tiny Qwen2 policy
LORA = ["--model.lora.rank=4", "--model.lora.alpha=8"]
BASE = "data/models/lora-base"  # the tiny policy (untrained) the SFT adapter applies to
SFT_ADAPTER = "data/models/lora-sft"
#: configs/sft_quickstart.yaml on one process with the smoke test's tiny policy and a six-step course
SFT_RUN = [*NO_CHECKPOINTS, "--trainer.devices=1", "--trainer.strategy=auto", f"--model.model_name_or_path={BASE}",
           "--model.tiny.vocab_size=512", "--model.tiny.hidden_size=32", "--model.tiny.num_layers=2",
           "--model.tiny.num_heads=2", "--model.tiny.num_kv_heads=1", "--model.tiny.intermediate_size=64",
           "--model.tiny.corpus_goals=10", "--data.drills.steps=4", "--data.drills.batch_size=4",
           "--data.drills.checks_per_kind=0", "--data.num_demos=4", "--data.num_val_demos=2", "--data.demo_epochs=1",
           "--data.batch_size=2", "--data.max_new_tokens=8", "--data.env.max_steps=10", "--data.val_goals=0",
           "--trainer.limit_val_batches=0", "--model.learning_rate=0.01", "--model.warmup_steps=1",
           f"--model.export_dir={SFT_ADAPTER}", "--model.export_dtype=null", *LORA]
#: A*-PO (configs/smoke.yaml) from the SFT adapter
RL_RUN = [f"--model.model_name_or_path={SFT_ADAPTER}", "--model.tiny=null", *LORA]


def fit(*overrides, config=SMOKE, callbacks=(), ckpt_path=None):
    """``cli.py fit --config config`` in this process, quiet, with ``callbacks`` added to the trainer's."""
    return fit_in_process("--config", config, *QUIET, *overrides, callbacks=callbacks, ckpt_path=ckpt_path)


class Snapshot(Callback):
    """The policy's parameters when ``fit`` starts."""

    def on_fit_start(self, trainer, pl_module):
        self.start = {n: p.detach().clone() for n, p in pl_module.policy.named_parameters()}


def some_tokens(tokenizer, n: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, gen_mask)``: ``n`` chat prompts with replies, right-padded."""
    rows = []
    for i in range(n):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"find red shoes size {i + 6}"}],
                                               tokenize=False, add_generation_prompt=True)
        reply = f"<think>search</think><answer>search[red shoes {i + 6}]</answer>"
        p, r = tokenizer(prompt)["input_ids"], tokenizer(reply)["input_ids"]
        rows.append((p + r, [0] * len(p) + [1] * len(r)))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([t + [tokenizer.pad_token_id] * (width - len(t)) for t, _ in rows])
    attention = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t, _ in rows])
    gen = torch.tensor([g + [0] * (width - len(g)) for _, g in rows])
    return ids, attention, gen


def logprobs(model, tokens) -> torch.Tensor:
    """(S, T) log-probs of the generated tokens under ``model`` in eval mode, without gradients."""
    training = model.training
    model.eval()
    with torch.no_grad():
        out = generated_logprobs(model, *tokens)
    model.train(training)
    return out


# ------------------------------------------------------------------------------------------------ SFT
@pytest.fixture(scope="module")
def sft_run(workdir):
    """LoRA SFT of the tiny policy through the Trainer (``cli.py fit`` of configs/sft_quickstart.yaml), exported
    in float32 to ``SFT_ADAPTER``; ``(cli, the policy's parameters when fit started)``."""
    snapshot = Snapshot()
    cli = fit(*SFT_RUN, config=SFT_CONFIG, callbacks=[snapshot])
    return cli, snapshot.start


def test_lora_sft_trains_only_the_adapter(sft_run):
    cli, start = sft_run
    policy = cli.model.policy
    assert cli.trainer.global_step == 6
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # the optimizer holds the adapter and nothing else
    optimized = {id(p) for group in cli.trainer.optimizers[0].param_groups for p in group["params"]}
    assert optimized == {id(p) for n, p in policy.named_parameters() if n in trainable}
    now = dict(policy.named_parameters())
    moved = {n for n in now if not torch.equal(now[n], start[n])}
    assert moved == trainable  # every adapter weight moved, no base weight did
    base, _ = load_policy(BASE)
    base_weights = dict(base.named_parameters())
    for name, weight in now.items():
        if name not in trainable:
            assert torch.equal(weight, base_weights[name.removeprefix("base_model.model.").replace(".base_layer", "")])


def test_lora_sft_exports_an_unmerged_adapter_that_load_policy_opens_to_the_same_logprobs(sft_run):
    cli, _ = sft_run
    folder = Path(SFT_ADAPTER)
    assert {p.name for p in folder.iterdir()} >= {ADAPTER_CONFIG, "adapter_model.safetensors", "tokenizer.json"}
    assert not (folder / "model.safetensors").exists() and not (folder / "config.json").exists()
    config = json.loads((folder / ADAPTER_CONFIG).read_text())
    assert (config["base_model_name_or_path"], config["r"], config["lora_alpha"]) == (BASE, 4, 8)
    weights = load_file(folder / "adapter_model.safetensors")
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights)  # the adapter alone, not merged
    loaded, tokenizer = load_policy(SFT_ADAPTER)
    assert type(loaded).__name__ == "PeftModel" and not any(p.requires_grad for p in loaded.parameters())
    tokens = some_tokens(tokenizer)
    expected = logprobs(cli.model.policy, tokens)
    assert torch.equal(logprobs(loaded, tokens), expected)
    base, _ = load_policy(BASE)
    assert not torch.allclose(logprobs(base, tokens), expected, atol=1e-3)  # the adapter is applied


def test_an_adapter_exports_in_bfloat16_and_loads_in_the_requested_dtype(sft_run, tmp_path):
    cli, _ = sft_run
    export_policy(cli.model.policy, cli.model.tokenizer, tmp_path / "bf16", dtype="bfloat16")
    weights = load_file(tmp_path / "bf16" / "adapter_model.safetensors")
    assert {w.dtype for w in weights.values()} == {torch.bfloat16}
    full = load_file(Path(SFT_ADAPTER) / "adapter_model.safetensors")
    assert (tmp_path / "bf16" / "adapter_model.safetensors").stat().st_size < 0.6 * (
        Path(SFT_ADAPTER) / "adapter_model.safetensors").stat().st_size
    loaded, _ = load_policy(str(tmp_path / "bf16"))  # float32 by default: every weight, the adapter's too
    adapter = {n: p for n, p in loaded.named_parameters() if ".lora_" in n}
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    for name, weight in adapter.items():
        key = name.replace(".default.", ".")
        assert torch.equal(weight, full[key].to(torch.bfloat16).float()), name
    halved, _ = load_policy(SFT_ADAPTER, dtype="bfloat16")  # a float32 folder, loaded in bfloat16: base and adapter
    assert {p.dtype for p in halved.parameters()} == {torch.bfloat16}


def test_an_adapter_whose_base_is_missing_is_refused_naming_its_config(sft_run, tmp_path):
    folder = tmp_path / "orphan"
    shutil.copytree(SFT_ADAPTER, folder)
    config = json.loads((folder / ADAPTER_CONFIG).read_text())
    (folder / ADAPTER_CONFIG).write_text(json.dumps({**config, "base_model_name_or_path": "data/models/gone"}))
    with pytest.raises(FileNotFoundError, match=rf"base model 'data/models/gone' .*{folder}/{ADAPTER_CONFIG}"):
        load_policy(str(folder))
    (folder / ADAPTER_CONFIG).write_text(json.dumps({**config, "base_model_name_or_path": None}))
    with pytest.raises(ValueError, match=rf"{folder}/{ADAPTER_CONFIG} names no base model"):
        load_policy(str(folder))
    (folder / ADAPTER_CONFIG).write_text("{not json")
    with pytest.raises(ValueError, match=rf"{folder}/{ADAPTER_CONFIG}: cannot read it as JSON"):
        load_policy(str(folder))
    (folder / "adapter_model.safetensors").unlink()
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match=rf"adapter folder {folder} has {ADAPTER_CONFIG} but no weights"):
        load_policy(str(folder))


def test_the_tokenizer_of_an_adapter_folder_is_its_own_else_its_bases(sft_run, tmp_path):
    assert tokenizer_folder(SFT_ADAPTER) == SFT_ADAPTER and tokenizer_folder(BASE) == BASE
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in (ADAPTER_CONFIG, "adapter_model.safetensors"):
        shutil.copy(Path(SFT_ADAPTER) / name, bare / name)
    assert tokenizer_folder(str(bare)) == BASE
    # SFT goes on from such a folder: its data module reads the base's tokenizer, the adapter's copy trains
    snapshot = Snapshot()
    cli = fit(*SFT_RUN, f"--model.model_name_or_path={bare}", "--model.tiny=null", "--trainer.max_steps=1",
              "--model.export_dir=null", config=SFT_CONFIG, callbacks=[snapshot])
    assert set(cli.model.policy.peft_config) == {"policy"}
    sft = load_file(Path(SFT_ADAPTER) / "adapter_model.safetensors")
    assert all(torch.equal(snapshot.start[k.replace(".weight", ".policy.weight")], w) for k, w in sft.items())


# ------------------------------------------------------------------------------------------------ A*-PO
class PackedRecorder:
    """Every training step's batch tensors and the packed log π / log π_ref the objective was given."""

    def __init__(self):
        self.steps = []

    def __call__(self, real):
        def packed_batch(module, batch):
            packed = real(module, batch)
            self.steps.append({"tokens": (batch["input_ids"].clone(), batch["attention_mask"].clone(),
                                          batch["gen_mask"].clone()),
                               "traj_index": batch["traj_index"].clone(), "n": len(batch["reward"]),
                               "logp": packed.logp.detach().clone(), "ref_logp": packed.ref_logp.clone()})
            return packed
        return packed_batch


def packed(model, step: dict) -> torch.Tensor:
    """(B, L) log-probs of a recorded step's generated tokens under ``model``, packed as the loss sees them."""
    values = logprobs(model, step["tokens"])
    return pack_generated(values, step["tokens"][2], step["traj_index"], step["n"])[0]


@pytest.fixture(scope="module")
def rl_run(sft_run, workdir, tmp_path_factory):
    """Two A*-PO steps from the SFT adapter (V* = 0, so the policy moves), checkpointed after each, exported by
    ``ExportPolicy``; ``(cli, recorded steps, checkpoint folder)``."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(VStarTable, "lookup", lambda self, goals, device=None: torch.zeros(len(goals)))
    recorder = PackedRecorder()
    monkeypatch.setattr(WebShopRLModule, "packed_batch", recorder(WebShopRLModule.packed_batch))
    checkpoints = tmp_path_factory.mktemp("rl-checkpoints")
    try:
        cli = fit(*RL_RUN, "--trainer.max_steps=2", "--trainer.callbacks=[]",
                  "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                  f"--trainer.callbacks.dirpath={checkpoints}", "--trainer.callbacks.filename={step}",
                  "--trainer.callbacks.save_top_k=-1", "--trainer.callbacks.every_n_train_steps=1",
                  callbacks=[ExportPolicy("data/models/lora-rl")])
    finally:
        monkeypatch.undo()
    return cli, recorder.steps, checkpoints


def test_apo_from_an_sft_adapter_regresses_against_the_sfted_model(rl_run):
    """The reference log-probs the loss sees are those of base + SFT adapter (not the bare base's) at every step;
    the policy starts equal to them, then moves while the reference does not."""
    cli, steps, _ = rl_run
    assert cli.trainer.global_step == 2 and len(steps) == 2
    sfted, _ = load_policy(SFT_ADAPTER)
    base, _ = load_policy(BASE)
    for step in steps:
        torch.testing.assert_close(step["ref_logp"], packed(sfted, step), rtol=0, atol=1e-6)
        assert (step["ref_logp"] - packed(base, step)).abs().max() > 1e-2
    torch.testing.assert_close(steps[0]["logp"], steps[0]["ref_logp"], rtol=0, atol=1e-6)  # π_0 = π_ref
    assert (steps[1]["logp"] - steps[1]["ref_logp"]).abs().max() > 1e-4  # the first update moved the policy


def test_apo_from_an_sft_adapter_trains_a_copy_and_keeps_the_sft_adapter_frozen(rl_run):
    cli, _, _ = rl_run
    policy = cli.model.policy
    assert cli.model.reference is None and set(policy.peft_config) == {"reference", "policy"}
    assert policy.active_adapter == "policy"
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all(".policy." in n for n in trainable)
    sft = load_file(Path(SFT_ADAPTER) / "adapter_model.safetensors")
    now = dict(policy.named_parameters())
    for key, weight in sft.items():
        reference = now[key.replace(".weight", ".reference.weight")]
        assert torch.equal(reference, weight), key
    moved = [k for k in sft if not torch.equal(now[k.replace(".weight", ".policy.weight")], sft[k])]
    assert moved, "the trained copy must have moved"


def test_the_exported_rl_adapter_loads_over_the_base_alone(rl_run):
    cli, steps, checkpoints = rl_run
    folder = Path("data/models/lora-rl")
    config = json.loads((folder / ADAPTER_CONFIG).read_text())
    assert config["base_model_name_or_path"] == BASE  # the SFT adapter's base, not the SFT adapter
    assert not (folder / "model.safetensors").exists()
    assert all(".reference." not in k and ".policy." not in k for k in load_file(folder / "adapter_model.safetensors"))
    loaded, _ = load_policy(str(folder))
    expected = packed(cli.model.policy, steps[1])
    assert torch.equal(packed(loaded, steps[1]), expected)
    assert not torch.allclose(expected, steps[1]["ref_logp"], atol=1e-4)  # the RL policy, not its reference
    # a checkpoint exports the same adapter (lit.export)
    again = export_checkpoint(checkpoints / "step=2.ckpt", "data/models/lora-rl-ckpt", like=SFT_ADAPTER)
    exported, from_checkpoint = (load_file(p / "adapter_model.safetensors") for p in (folder, again))
    assert exported.keys() == from_checkpoint.keys()
    assert all(torch.equal(exported[k], from_checkpoint[k]) for k in exported)


def shifted_adapter(folder: str) -> Path:
    """A copy of ``SFT_ADAPTER`` in ``folder`` with one LoRA B weight shifted by 0.01: the same base and settings,
    another reference."""
    other = Path(folder)
    shutil.copytree(SFT_ADAPTER, other, dirs_exist_ok=True)
    weights = load_file(other / "adapter_model.safetensors")
    name = next(k for k in sorted(weights) if ".lora_B." in k)
    save_file({**weights, name: weights[name] + 0.01}, other / "adapter_model.safetensors", metadata={"format": "pt"})
    return other


def test_apo_from_an_adapter_resumes_and_refuses_another_adapter_by_its_reference(rl_run, zero_v_star):
    """A checkpoint of A*-PO from the SFT adapter resumes to the uninterrupted run's parameters; the same adapter
    in another folder resumes; an adapter with the same base but other adapter weights is refused as another
    reference (the hash is of base + adapter, the reference the loss sees)."""
    cli, _, checkpoints = rl_run
    expected = hash_parameters(cli.model.policy)
    resumed = fit(*RL_RUN, "--trainer.max_steps=2", *NO_CHECKPOINTS, ckpt_path=checkpoints / "step=1.ckpt")
    assert resumed.trainer.global_step == 2 and hash_parameters(resumed.model.policy) == expected
    moved = Path("data/models/lora-sft-moved")
    shutil.copytree(SFT_ADAPTER, moved, dirs_exist_ok=True)
    fit(*RL_RUN, f"--model.model_name_or_path={moved}", "--trainer.max_steps=2", *NO_CHECKPOINTS,
        ckpt_path=checkpoints / "step=1.ckpt")
    other = shifted_adapter("data/models/lora-sft-other")
    with pytest.raises(SettingError, match=rf"with reference {SFT_ADAPTER} \(float32 weights, sha256 [0-9a-f]{{16}}\); "
                                           rf"this run asks for reference {other} "):
        fit(*RL_RUN, f"--model.model_name_or_path={other}", "--trainer.max_steps=2", *NO_CHECKPOINTS,
            ckpt_path=checkpoints / "step=1.ckpt")


def test_a_lora_checkpoint_holds_only_what_it_trains_and_takes_the_rest_from_its_checked_start(rl_run):
    """The checkpoint's state dict is the trained adapter (every frozen weight is listed as reloaded, none is
    stored); loading it puts back the start's frozen weights and gives the trained policy; another start is refused
    outside ``fit`` too, by its reference."""
    cli, _, checkpoints = rl_run
    saved = torch.load(checkpoints / "step=2.ckpt", map_location="cpu", weights_only=False)
    trained = {f"policy.{n}" for n, p in cli.model.policy.named_parameters() if p.requires_grad}
    assert trained and set(saved["state_dict"]) == trained
    reloaded = set(saved["reloaded_weights"])
    assert reloaded and not reloaded & trained
    assert any(".reference." in n for n in reloaded) and any(".base_layer." in n for n in reloaded)
    module = WebShopRLModule(model_name_or_path=SFT_ADAPTER, lora=LoraSettings(rank=4, alpha=8))
    module.configure_model()
    assert hash_parameters(module.policy) != hash_parameters(cli.model.policy)  # the start: training moved it
    module.on_load_checkpoint(saved)
    module.load_state_dict(saved["state_dict"])  # strict: nothing left out any more
    assert hash_parameters(module.policy) == hash_parameters(cli.model.policy)
    other = shifted_adapter("data/models/lora-sft-other-start")
    module = WebShopRLModule(model_name_or_path=str(other), lora=LoraSettings(rank=4, alpha=8))
    module.configure_model()
    again = torch.load(checkpoints / "step=2.ckpt", map_location="cpu", weights_only=False)
    with pytest.raises(SettingError, match=rf"trained with reference {SFT_ADAPTER} .*this run asks for reference {other}"):
        module.on_load_checkpoint(again)


def test_the_reference_adapter_runs_without_dropout_while_the_policy_trains(sft_run, tmp_path):
    """An adapter trained with dropout, as π_ref of a policy in training mode: its log-probs are the adapted
    model's, deterministic."""
    folder = tmp_path / "dropout"
    shutil.copytree(SFT_ADAPTER, folder)
    config = json.loads((folder / ADAPTER_CONFIG).read_text())
    (folder / ADAPTER_CONFIG).write_text(json.dumps({**config, "lora_dropout": 0.5}))
    module = WebShopRLModule(model_name_or_path=str(folder), lora=LoraSettings(rank=4, alpha=8, dropout=0.5))
    module.configure_model()
    sfted, tokenizer = load_policy(SFT_ADAPTER)
    tokens = some_tokens(tokenizer)
    assert module.policy.training
    torch.testing.assert_close(module.reference_logprobs(*tokens), logprobs(sfted, tokens), rtol=0, atol=1e-6)
    assert module.policy.training and module.policy.active_adapter == "policy"


def test_lora_settings_other_than_the_adapters_are_refused_naming_its_config(sft_run):
    module = WebShopRLModule(model_name_or_path=SFT_ADAPTER, lora=LoraSettings(rank=2, alpha=8))
    with pytest.raises(SettingError, match=rf"model.lora: the LoRA settings \(rank 2, alpha 8, .* differ from those of "
                                           rf"the adapter that {SFT_ADAPTER}/{ADAPTER_CONFIG} holds \(rank 4, alpha 8"):
        module.configure_model()
    sft = SFTModule(model_name_or_path=SFT_ADAPTER, lora=LoraSettings(rank=4, alpha=8, target_modules=("q_proj",)))
    with pytest.raises(SettingError, match=rf"{ADAPTER_CONFIG} holds"):
        sft.configure_model()
    for module in (SFTModule, WebShopRLModule):
        with pytest.raises(ValueError, match="lora.rank must be >= 0, got -1"):
            module(model_name_or_path=BASE, lora=LoraSettings(rank=-1))


def test_rank_0_from_an_adapter_fine_tunes_it_merged_against_itself(sft_run):
    """Full fine-tuning from an adapter folder: the policy and the separate reference are both base + adapter,
    merged into plain models."""
    module = WebShopRLModule(model_name_or_path=SFT_ADAPTER)
    module.configure_model()
    assert not hasattr(module.policy, "peft_config") and not hasattr(module.reference, "peft_config")
    sfted, tokenizer = load_policy(SFT_ADAPTER)
    tokens = some_tokens(tokenizer)
    expected = logprobs(sfted, tokens)
    for model in (module.policy, module.reference):
        torch.testing.assert_close(logprobs(model, tokens), expected, rtol=0, atol=1e-5)


def test_sft_refuses_to_resume_under_other_lora_settings(sft_run):
    """The SFT record holds the LoRA settings; a record without them, or no record, is refused."""
    cli, _ = sft_run
    saved = cli.model.training_setup()
    assert saved["lora"] == repr(LoraSettings(rank=4, alpha=8))
    full = SFTModule(model_name_or_path=BASE)
    with pytest.raises(SettingError, match=r"was trained with lora LoraSettings\(rank=4, .* asks for lora "
                                           r"LoraSettings\(rank=0,"):
        full.refuse_other_setup(saved, "x.ckpt")
    full.configure_model()
    older = {k: v for k, v in full.training_setup().items() if k != "lora"}
    with pytest.raises(SettingError, match="was trained with lora None"):
        full.refuse_other_setup(older, "x.ckpt")
    with pytest.raises(SettingError, match="x.ckpt has no training_setup record"):
        full.refuse_other_setup(None, "x.ckpt")
    full.refuse_other_setup(full.training_setup(), "x.ckpt")
    lora = SFTModule(model_name_or_path=BASE, lora=LoraSettings(rank=4, alpha=8))
    with pytest.raises(SettingError, match="lora"):
        lora.refuse_other_setup(older, "x.ckpt")
    lora.refuse_other_setup(saved, "x.ckpt")


@pytest.mark.parametrize("module_class", [SFTModule, WebShopRLModule])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(sft_run, module_class):
    """SFT and RL with gradient checkpointing on (LoRA over the tiny base): the decoder layers recompute their
    activations in the backward pass, and the loss and every adapter gradient equal those without it."""
    from apo_lightning.apo.logprobs import generated_nll

    results = {}
    for checkpointing in (False, True):
        module = module_class(model_name_or_path=BASE, lora=LoraSettings(rank=4, alpha=8),
                              gradient_checkpointing=checkpointing)
        torch.manual_seed(0)  # the same fresh adapter both times
        module.configure_model()
        assert module.policy.is_activation_checkpointing == checkpointing
        with torch.no_grad():  # lora_B starts at 0: move it, so the gradients reach lora_A too
            for name, p in module.policy.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
        input_ids, attention_mask, gen_mask = some_tokens(module.tokenizer)
        loss = generated_nll(module.policy, input_ids, attention_mask, gen_mask)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in module.policy.named_parameters() if p.requires_grad}
        assert grads and all(g.abs().sum() > 0 for g in grads.values())
        results[checkpointing] = (loss.detach(), grads)
    torch.testing.assert_close(results[True][0], results[False][0], rtol=0, atol=1e-6)
    for name, grad in results[False][1].items():
        torch.testing.assert_close(results[True][1][name], grad, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------------------ SmolLM2 (slow)
@pytest.mark.slow
def test_a_lora_sft_step_on_smollm2_exports_a_shippable_adapter(tmp_path, monkeypatch, smollm2_base):
    """One LoRA SFT step (rank 8 on every projection) of SmolLM2-135M-Instruct through the Trainer: only the adapter
    moves, and the bfloat16 export (adapter and tokenizer) is under 10 MB and loads over 'smollm2-135m-instruct'."""
    monkeypatch.chdir(link_smollm2(tmp_path, smollm2_base))  # 'smollm2-135m-instruct' is data/models/ here
    _, tokenizer = load_policy("smollm2-135m-instruct")
    assert tokenizer_folder("smollm2-135m-instruct") == "data/models/smollm2-135m-instruct"  # what SFT data reads
    ids, attention, gen = some_tokens(tokenizer, n=2)
    batch = {"input_ids": ids, "attention_mask": attention, "gen_mask": gen, "phase": "demos"}
    module = SFTModule(model_name_or_path="smollm2-135m-instruct", export_dir="adapter", export_dtype="bfloat16",
                       learning_rate=1e-3, warmup_steps=0, lora=LoraSettings(rank=8))
    snapshot = Snapshot()
    trainer = Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, callbacks=[snapshot])
    trainer.fit(module, torch.utils.data.DataLoader([batch], batch_size=None))
    now = dict(module.policy.named_parameters())
    moved = {n for n in now if not torch.equal(now[n], snapshot.start[n])}
    adapter = {n for n in now if ".lora_" in n}
    assert adapter and moved == adapter == {n for n, p in now.items() if p.requires_grad}  # the base did not move
    folder = Path("adapter")
    assert json.loads((folder / ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == "smollm2-135m-instruct"
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 10_000_000
    loaded, _ = load_policy("adapter")
    tokens = (ids, attention, gen)
    torch.testing.assert_close(logprobs(loaded, tokens), logprobs(module.policy, tokens), rtol=0, atol=2e-2)
