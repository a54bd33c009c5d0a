"""The old code (bc018e7): is the batch trained at step k rolled out by the parameters after k updates?

Run from a worktree of the old commit, e.g. ``git worktree add ../wt-old bc018e7 && cd ../wt-old && python
<this repository>/docs/evidence/old_loop_onpolicy.py .`` — the argument is the old tree (default: the working directory).
Kept as evidence for issue 14's closing note; it imports the *old* package, not this one.
"""
import os
import sys

OLD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")

import sys, os, tempfile
sys.path.insert(0, OLD)
import torch
from apo_lightning.apo.vstar import VStarTable
VStarTable.lookup = lambda self, goals, device=None: torch.zeros(len(goals))
from apo_lightning.lit import rl_module
from apo_lightning.lit.callbacks import parameters_sha256
real = rl_module.WebShopRLModule.collect_rollouts
def collect(self, goals, seed, data):
    batch = real(self, goals, seed, data); batch["policy_hash"] = parameters_sha256(self.policy); return batch
rl_module.WebShopRLModule.collect_rollouts = collect
from lightning.pytorch import Callback
class Check(Callback):
    same = []
    def on_train_batch_start(self, trainer, pl_module, batch, i):
        self.same.append(batch["policy_hash"] == parameters_sha256(pl_module.policy))
from cli import APOLightningCLI
os.chdir(tempfile.mkdtemp())
cli = APOLightningCLI(subclass_mode_model=True, subclass_mode_data=True, run=False, args=["--config", os.path.join(OLD, "configs", "smoke.yaml"),
      "--trainer.max_steps=4", "--data.steps_per_epoch=4", "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false", "--trainer.logger=false"])
cli.trainer.callbacks.append(Check())
cli.trainer.fit(cli.model, cli.datamodule)
print("OLD CODE: batch k rolled out by the parameters after k updates, per step:", Check.same)
