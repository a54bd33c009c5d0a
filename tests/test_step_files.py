"""One training step reads top to bottom in a few files: the package files whose functions the step's own methods
call (``WebShopRLDataModule.train_batch``; ``WebShopRLModule.training_step`` with ``packed_batch`` and
``_log_training``), recorded with a profiler during a one-step smoke fit (stage 1 and validation are not the step).
A new file on that list is a new place a reader must open to follow a step: add it here only on purpose."""

import sys
from pathlib import Path

from conftest import fit_in_process

PACKAGE = Path(__file__).resolve().parents[1] / "apo_lightning"
SMOKE = str(PACKAGE.parent / "configs" / "smoke.yaml")
STEP = {"train_batch", "training_step", "packed_batch", "_log_training"}  # the step's own methods
#: the files a reader opens to follow one step, in the order the step first calls into them
STEP_FILES = ["lit/rl_data.py", "lit/sampler.py", "lit/stage1.py", "lit/rl_module.py", "apo/logprobs.py",
              "apo/objectives/base.py", "apo/objectives/apo.py", "eval/metrics.py"]


def called_files(monkeypatch) -> tuple[list[str], list[str]]:
    """``(files the step calls from its own methods, every package file it enters)`` during a one-step smoke fit,
    paths relative to the package, in first-call order. A call's caller is its nearest package frame (a library
    wrapper such as ``torch.no_grad`` in between is skipped)."""
    from apo_lightning.lit.rl_data import WebShopRLDataModule
    from apo_lightning.lit.rl_module import WebShopRLModule

    root, direct, entered, depth = str(PACKAGE), [], [], [0]

    def profile(frame, event, arg):
        if event != "call" or not depth[0] or not frame.f_code.co_filename.startswith(root):
            return
        path = str(Path(frame.f_code.co_filename).relative_to(PACKAGE))
        entered.append(path) if path not in entered else None
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(root):
            caller = caller.f_back
        if caller is not None and caller.f_code.co_name in STEP and path not in direct:
            direct.append(path)

    def traced(function):
        def wrapped(*args, **kwargs):
            depth[0] += 1
            try:
                return function(*args, **kwargs)
            finally:
                depth[0] -= 1
        return wrapped

    monkeypatch.setattr(WebShopRLDataModule, "train_batch", traced(WebShopRLDataModule.train_batch))
    monkeypatch.setattr(WebShopRLModule, "training_step", traced(WebShopRLModule.training_step))
    sys.setprofile(profile)
    try:
        fit_in_process("--config", SMOKE, "--trainer.max_steps=1", "--trainer.limit_val_batches=0",
                       "--trainer.logger=false", "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false")
    finally:
        sys.setprofile(None)
    return direct, entered


def test_one_training_step_reads_top_to_bottom_in_eight_files(workdir, monkeypatch):
    direct, entered = called_files(monkeypatch)
    assert "rollout/engine.py" in entered and "apo/objectives/apo.py" in entered  # the step was traced
    assert direct == STEP_FILES, direct
