"""One model config, many machines: ``configs/<model>.yaml`` says what is trained and ``configs/machine/*.yaml``
where (DESIGN.md, "Models"). Every model config composes with every machine overlay and parses; each overlay sets
the machine it names and nothing else; a model config sets no machine setting. Nothing here loads a model: the
Trainer is replaced by the settings it would get, so the GPU overlay is checked on a CPU too.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from apo_lightning.lit.callbacks import LowCPUMemory
from apo_lightning.lit.cli import APOLightningCLI, build_cli
from apo_lightning.lit.precision import native_bf16_on_cpu

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

#: the model configs, each meant to be composed with one of the machine overlays
MODEL_CONFIGS = ["smollm2.yaml", "sft_smollm2.yaml", "qwen2.5_0.5b.yaml"]
MACHINES = {
    # precision auto: what this CPU trains in (lit.precision.auto_precision)
    "cpu.yaml": {"accelerator": "cpu", "devices": 2, "strategy": "ddp", "num_threads": 1, "low_cpu_memory": False,
                 "precision": "bf16-mixed" if native_bf16_on_cpu() else "32-true"},
    "gpu.yaml": {"accelerator": "gpu", "devices": "auto", "strategy": "ddp", "precision": "bf16-mixed"},
}
#: the Trainer settings that say where a run goes, which only a machine overlay may set
MACHINE_TRAINER_KEYS = {"accelerator", "devices", "strategy", "precision", "num_nodes"}
#: the data settings that depend on the machine (same key in the RL and the SFT data modules)
MACHINE_DATA_KEYS = {"eval_batch_size"}


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def compose(monkeypatch, *names: str, extra: tuple[str, ...] = ()) -> SimpleNamespace:
    """Parse ``configs/<name>`` files in order with the project's CLI and build the model and data module, but not
    the Trainer: returns the parsed config and the keyword arguments the Trainer would get."""
    trainer_kwargs = {}

    def stand_in_trainer(cli, config, callbacks):
        trainer_kwargs.update(config)
        return SimpleNamespace(precision=config["precision"], accelerator=config["accelerator"],
                               callbacks=list(callbacks))

    monkeypatch.setattr(APOLightningCLI, "_instantiate_trainer", stand_in_trainer)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the test process keeps its threads
    args = [a for name in names for a in ("--config", str(CONFIGS / name))]
    cli = build_cli([*args, "--trainer.logger=false", *extra], run=False)
    return SimpleNamespace(config=cli.config, trainer=trainer_kwargs, model=cli.model, data=cli.datamodule,
                           callbacks=cli.trainer.callbacks)


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("model_config", MODEL_CONFIGS)
def test_every_model_config_composes_with_every_machine_overlay(monkeypatch, model_config, machine):
    composed = compose(monkeypatch, model_config, f"machine/{machine}")
    for key, value in MACHINES[machine].items():
        top_level = key in ("num_threads", "low_cpu_memory")
        assert (composed.config[key] if top_level else composed.trainer[key]) == value, key
    assert not any(isinstance(c, LowCPUMemory) for c in composed.callbacks)
    overlay = load(CONFIGS / "machine" / machine)
    assert composed.data.eval_batch_size == overlay["data"]["init_args"]["eval_batch_size"]
    recipe = load(CONFIGS / model_config)
    assert composed.config.run_name == recipe["run_name"]
    assert type(composed.model).__module__ + "." + type(composed.model).__name__ == recipe["model"]["class_path"]
    assert composed.model.hparams.model_name_or_path == recipe["model"]["init_args"]["model_name_or_path"]


@pytest.mark.parametrize("setting", [None, "true", "false"])
def test_low_cpu_memory_adds_its_callback_only_when_set(monkeypatch, setting):
    extra = () if setting is None else (f"--low_cpu_memory={setting}",)
    composed = compose(monkeypatch, "smollm2.yaml", "machine/cpu.yaml", extra=extra)
    added = [c for c in composed.callbacks if isinstance(c, LowCPUMemory)]
    assert len(added) == (setting == "true") == composed.config.low_cpu_memory


def test_the_cpu_overlay_is_two_processes_with_one_thread_each_at_precision_auto():
    overlay = load(CONFIGS / "machine" / "cpu.yaml")
    assert overlay["trainer"] == {"accelerator": "cpu", "devices": 2, "strategy": "ddp", "precision": "auto"}
    assert overlay["num_threads"] == 1


def test_the_gpu_overlay_trains_in_bf16_mixed_precision():
    overlay = load(CONFIGS / "machine" / "gpu.yaml")
    assert overlay["trainer"]["accelerator"] == "gpu"
    assert overlay["trainer"]["precision"] == "bf16-mixed"


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_a_machine_overlay_sets_only_machine_settings(machine):
    """No recipe in an overlay, and no class: it goes on top of any model config (RL or SFT)."""
    overlay = load(CONFIGS / "machine" / machine)
    assert set(overlay) <= {"trainer", "num_threads", "low_cpu_memory", "data"}
    assert set(overlay.get("trainer", {})) <= MACHINE_TRAINER_KEYS
    assert set(overlay.get("data", {})) <= {"init_args"}
    assert set(overlay.get("data", {}).get("init_args", {})) <= MACHINE_DATA_KEYS


@pytest.mark.parametrize("model_config", MODEL_CONFIGS)
def test_a_model_config_sets_no_machine_settings(model_config):
    recipe = load(CONFIGS / model_config)
    assert "num_threads" not in recipe and "low_cpu_memory" not in recipe
    assert not MACHINE_TRAINER_KEYS & set(recipe.get("trainer", {}))
    assert not MACHINE_DATA_KEYS & set(recipe["data"]["init_args"])


def header_command(path: Path) -> list[str]:
    """The configs, in order, that the command on a config's first two comment lines composes."""
    header = " ".join(path.read_text().splitlines()[:2])
    return re.findall(r"(?:--config|-c) configs/(\S+\.yaml)", header)


def test_every_config_that_leaves_the_machine_open_is_a_model_config():
    """A new model config (a config its own command runs first, with no machine settings) is tested here too."""
    open_configs = {path.name for path in CONFIGS.glob("*.yaml")
                    if header_command(path)[:1] == [path.name]
                    and not MACHINE_TRAINER_KEYS & set(load(path).get("trainer") or {})}
    assert open_configs == set(MODEL_CONFIGS)


@pytest.mark.parametrize("model_config", MODEL_CONFIGS)
def test_a_model_config_says_how_to_run_it_with_a_machine_overlay(model_config):
    assert header_command(CONFIGS / model_config) in ([model_config, f"machine/{m}"] for m in MACHINES)


# ------------------------------------------------------------------------------------------------ SmolLM2
#: SmolLM2-135M's shape (its config.json): the in and out features of each linear layer LoRA can adapt
SMOLLM2 = {"layers": 30, "hidden": 576, "intermediate": 1536, "heads": 9, "kv_heads": 3, "head_dim": 64}
SMOLLM2_LINEAR = {
    "q_proj": (576, 9 * 64), "k_proj": (576, 3 * 64), "v_proj": (576, 3 * 64), "o_proj": (9 * 64, 576),
    "gate_proj": (576, 1536), "up_proj": (576, 1536), "down_proj": (1536, 576),
}
#: the most an adapter that ships in the repository may weigh (DESIGN.md, "What ships")
SHIPPED_ADAPTER_BYTES = 10_000_000


def lora_parameters(rank: int, target_modules: list[str]) -> int:
    """LoRA's trainable parameters over SmolLM2-135M: A (r x in) and B (out x r) for each adapted linear layer of
    each decoder layer."""
    return SMOLLM2["layers"] * sum(rank * (SMOLLM2_LINEAR[m][0] + SMOLLM2_LINEAR[m][1]) for m in target_modules)


def test_lora_parameter_count_by_hand():
    # per layer and rank: q 1152 + k 768 + v 768 + o 1152 + gate 2112 + up 2112 + down 2112 = 10176
    assert lora_parameters(1, list(SMOLLM2_LINEAR)) == 30 * 10176
    assert lora_parameters(8, ["q_proj", "v_proj"]) == 30 * 8 * (1152 + 768)


@pytest.mark.parametrize("model_config", ["sft_smollm2.yaml", "smollm2.yaml"])
def test_the_smollm2_adapter_fits_the_shipping_limit_in_bfloat16(model_config):
    lora = load(CONFIGS / model_config)["model"]["init_args"]["lora"]
    assert lora["rank"] > 0, f"{model_config}: LoRA, not full fine-tuning"
    assert set(lora["target_modules"]) <= set(SMOLLM2_LINEAR)
    size = 2 * lora_parameters(lora["rank"], lora["target_modules"])  # bytes in bfloat16
    assert size <= SHIPPED_ADAPTER_BYTES, f"{model_config}: the adapter would weigh {size / 1e6:.1f} MB"


def test_the_smollm2_sft_exports_a_bfloat16_adapter_without_drills():
    init_args = load(CONFIGS / "sft_smollm2.yaml")["model"]["init_args"]
    assert init_args["export_dtype"] == "bfloat16"
    assert init_args["export_dir"].startswith("data/models/")
    assert load(CONFIGS / "sft_smollm2.yaml")["data"]["init_args"]["drills"]["steps"] == 0


def test_smollm2_rl_starts_from_the_sft_adapter_in_the_prompt_format_it_was_trained_in(monkeypatch):
    """A*-PO's reference is the SFT'd policy (base + SFT adapter, ``models.lora``), so the RL config takes the
    adapter's LoRA settings, and the prompts and reply limit SFT taught it."""
    sft = compose(monkeypatch, "sft_smollm2.yaml", "machine/cpu.yaml")
    rl = compose(monkeypatch, "smollm2.yaml", "machine/cpu.yaml")
    shipped = rl.model.hparams.model_name_or_path  # the adapter sft_smollm2.yaml made, as models/ ships it
    assert shipped == "models/smollm2-webshop-1k-sft" and Path(sft.model.hparams.export_dir).name == "sft_smollm2"
    adapter = json.loads((REPO / shipped / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], set(adapter["target_modules"])) == \
        (sft.model.lora_config.rank, sft.model.lora_config.alpha, set(sft.model.lora_config.target_modules))
    lora = [(c.rank, c.alpha, set(c.target_modules)) for c in (rl.model.lora_config, sft.model.lora_config)]
    assert lora[0] == lora[1], "training on from an adapter folder takes the folder's LoRA settings"
    # how a sampled episode that outgrows the budget is rebuilt is RL's alone
    prompt = {"rebuild_fill"}
    assert ({k: v for k, v in vars(rl.data.chat).items() if k not in prompt}
            == {k: v for k, v in vars(sft.data.chat).items() if k not in prompt})
    assert rl.data.rollout.max_new_tokens == sft.data.max_new_tokens
    assert vars(rl.data.env) == vars(sft.data.env)
