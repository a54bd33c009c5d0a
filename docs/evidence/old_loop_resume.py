"""The old code (bc018e7) under the new resume test's conditions: V* patched to 0 so the parameters move.

Run from a worktree of the old commit, e.g. ``git worktree add ../wt-old bc018e7 && cd ../wt-old && python
<this repository>/docs/evidence/old_loop_resume.py .`` — the argument is the old tree (default: the working directory).
Kept as evidence for issue 14's closing note; it imports the *old* package, not this one.
"""
import os
import sys

OLD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")

import sys, os
sys.path.insert(0, OLD)
import apo_lightning; assert apo_lightning.__file__.startswith(OLD), apo_lightning.__file__
import torch, tempfile
from apo_lightning.apo.vstar import VStarTable
VStarTable.lookup = lambda self, goals, device=None: torch.zeros(len(goals))
from cli import main
from apo_lightning.lit.callbacks import parameters_sha256
SMOKE = os.path.join(OLD, "configs", "smoke.yaml")
Q = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--data.steps_per_epoch=8"]
tmp = tempfile.mkdtemp(); os.chdir(tmp)
straight = main(["fit", "--config", SMOKE, *Q, "--trainer.max_steps=4", "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"])
expected = dict(straight.model.policy.named_parameters())
moved = any(not torch.equal(p, straight.model.reference.get_parameter(n)) for n, p in expected.items())
cb = ["--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint", f"--trainer.callbacks.dirpath={tmp}/b",
      "--trainer.callbacks.save_last=true", "--trainer.callbacks.every_n_train_steps=1"]
main(["fit", "--config", SMOKE, *Q, "--trainer.max_steps=2", "--trainer.callbacks=[]", *cb])
ck = torch.load(f"{tmp}/b/last.ckpt", weights_only=False)
resumed = main(["fit", "--config", SMOKE, *Q, "--trainer.max_steps=4", "--trainer.callbacks=[]", *cb, f"--ckpt_path={tmp}/b/last.ckpt"])
diff = max((p - expected[n]).abs().max().item() for n, p in resumed.model.policy.named_parameters())
print(f"OLD CODE: parameters moved: {moved}; checkpoint cursor after 2 steps: {ck['WebShopRLDataModule']['cursor']}; "
      f"max |resumed - straight| = {diff:.3g} -> {'FAILS' if diff > 0 else 'passes'}")
