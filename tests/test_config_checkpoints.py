"""``--ckpt_path last`` must be the run's final step in every config that writes a ``last.ckpt``.

Lightning (2.6) writes ``last.ckpt`` of a ``ModelCheckpoint`` with a ``monitor`` at a validation only when that
callback also saved a top-k checkpoint, so with ``save_top_k: 1`` saving at validations ``last.ckpt`` is the best step
so far, not the last one, and ``--ckpt_path last`` would test (and resume from) an earlier step whenever the score
fell. Such a config keeps a second, unmonitored ``ModelCheckpoint`` for ``last.ckpt``. (A monitored callback that saves
every N training steps writes ``last.ckpt`` at each of them, so those configs are right as they are.) This test trains
a tiny module under each config's checkpoint callbacks with a monitored metric that gets worse at every validation and
checks that ``last.ckpt`` holds the final step.
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


def checkpoint_arguments(config: Path) -> list[dict]:
    """The ``init_args`` of the config's ``ModelCheckpoint`` callbacks (none for a config without callbacks)."""
    callbacks = (yaml.safe_load(config.read_text()).get("trainer") or {}).get("callbacks") or []
    return [c.get("init_args") or {} for c in callbacks if c["class_path"].endswith("ModelCheckpoint")]


#: every config that writes a last.ckpt
CONFIGS = sorted(p.relative_to(REPO / "configs").as_posix() for p in (REPO / "configs").rglob("*.yaml")
                 if any(a.get("save_last") for a in checkpoint_arguments(p)))


def test_the_configs_with_a_best_by_metric_checkpoint_are_among_those_tested():
    monitored = {"quickstart.yaml", "webshop_1k.yaml", "qwen2.5_0.5b.yaml", "smollm2.yaml", "sft_smollm2.yaml",
                 "sft_tiny.yaml"}
    assert monitored <= set(CONFIGS)


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
    arguments = checkpoint_arguments(REPO / "configs" / config)
    callbacks = [ModelCheckpoint(dirpath=tmp_path, **a) for a in arguments]
    steps = 4 * math.lcm(*[max(1, a.get("every_n_train_steps") or 1) for a in arguments if a.get("save_last")])
    data = DataLoader(TensorDataset(torch.ones(steps // 2, 1)), batch_size=1)  # two epochs, a validation after each
    trainer = Trainer(max_steps=steps, callbacks=callbacks, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                      num_sanity_val_steps=0)
    trainer.fit(WorseEachValidation(), data, DataLoader(TensorDataset(torch.ones(1, 1)), batch_size=1))
    assert trainer.global_step == steps
    last = torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == steps, f"{config}: last.ckpt holds step {last['global_step']}, not {steps}"
