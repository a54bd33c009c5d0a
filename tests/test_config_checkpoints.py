"""``--ckpt_path last`` must be the run's final step in every config that saves a best-by-metric checkpoint.

Lightning (2.6) writes ``last.ckpt`` of a ``ModelCheckpoint`` with a ``monitor`` only when that callback also saved
a top-k checkpoint, so with ``save_top_k: 1`` alone ``last.ckpt`` is the best step so far, not the last one: a quick
start whose validation score fell at its last validation tested (and would resume from) an earlier step. Each config
therefore keeps a second, unmonitored ``ModelCheckpoint`` for ``last.ckpt``. This test trains a tiny module under
each config's checkpoint callbacks with a monitored metric that gets worse at every validation and checks that
``last.ckpt`` holds the final step.
"""

import math
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

REPO = Path(__file__).resolve().parents[1]
CONFIGS = ["quickstart.yaml", "webshop_1k.yaml", "qwen2.5_0.5b_gpu.yaml", "sft_tiny.yaml"]


def checkpoint_callbacks(config: str, dirpath: Path) -> list[ModelCheckpoint]:
    """The config's ``ModelCheckpoint`` callbacks, built from its YAML, writing to ``dirpath``."""
    callbacks = yaml.safe_load((REPO / "configs" / config).read_text())["trainer"]["callbacks"]
    return [ModelCheckpoint(dirpath=dirpath, **c.get("init_args", {})) for c in callbacks
            if c["class_path"].endswith("ModelCheckpoint")]


class WorseEachValidation(LightningModule):
    """A one-parameter module whose monitored metrics get worse at every validation."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.validations = 0

    def training_step(self, batch, batch_idx):
        return (self.weight - batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        self.validations += 1
        self.log("val/score", -float(self.validations))  # mode max: every validation worse
        self.log("val/loss", float(self.validations))  # mode min: every validation worse

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("config", CONFIGS)
def test_last_checkpoint_is_the_final_step_when_the_monitored_metric_gets_worse(config, tmp_path):
    callbacks = checkpoint_callbacks(config, tmp_path)
    assert any(c.monitor for c in callbacks), f"{config}: no best-by-metric checkpoint to test against"
    every = [c._every_n_train_steps for c in callbacks if c.save_last] or [1]
    steps = 2 * math.lcm(*[max(1, n) for n in every])
    data = DataLoader(TensorDataset(torch.ones(steps // 2, 1)), batch_size=1)  # two epochs, a validation after each
    trainer = Trainer(max_steps=steps, callbacks=callbacks, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                      num_sanity_val_steps=0)
    trainer.fit(WorseEachValidation(), data, DataLoader(TensorDataset(torch.ones(1, 1)), batch_size=1))
    assert trainer.global_step == steps
    last = torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == steps, f"{config}: last.ckpt holds step {last['global_step']}, not {steps}"
