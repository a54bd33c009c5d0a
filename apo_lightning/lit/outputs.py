"""What a run writes, and where: output folders named from ``--run_name``, the checkpoint a command resumes or
tests (``--ckpt_path last`` / ``best``), the refusal of a fresh ``fit`` over an earlier run's checkpoints, the list of
folders a run prints, and ``manifest.json`` beside the run's ``config.yaml`` (``lit.manifest``).

``--run_name`` names a run's outputs in one place: the TensorBoard run, ``checkpoints/<run>``, ``results/<run>`` and
``data/models/<run>`` wherever a config leaves them unset.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from jsonargparse import Namespace
from lightning.pytorch.cli import SaveConfigCallback

from .manifest import write_manifest
from .settings import SettingError

#: the TensorBoard logger's name when a config leaves it at Lightning's default
DEFAULT_LOGGER_NAME = "lightning_logs"


def name_outputs(config, run_name: str) -> None:
    """Fill the outputs a config leaves unset from ``run_name`` (see the module docstring)."""
    trainer = config.trainer
    logger = trainer.logger
    if getattr(logger, "class_path", "").endswith("TensorBoardLogger"):
        if logger.init_args.get("name") in (None, DEFAULT_LOGGER_NAME):
            logger.init_args.name = run_name
    if trainer.default_root_dir is None:
        trainer.default_root_dir = os.path.join("lightning_logs", run_name)
    for callback in trainer.callbacks or []:
        init_args = getattr(callback, "init_args", None)
        if init_args is None:
            continue
        if callback.class_path.endswith("ModelCheckpoint") and init_args.get("dirpath") is None:
            init_args.dirpath = os.path.join("checkpoints", run_name)
        if callback.class_path.endswith("ExportPolicy") and init_args.get("out_dir") is None:
            init_args.out_dir = os.path.join("data", "models", run_name)
    model_args = config.model.init_args
    if "results_dir" in model_args and model_args.results_dir is None:
        model_args.results_dir = os.path.join("results", run_name)


def checkpoint_callbacks(config) -> list[Namespace]:
    """The ``init_args`` of the config's ``ModelCheckpoint`` callbacks, in order."""
    return [c.init_args for c in config.trainer.callbacks or []
            if getattr(c, "class_path", "").endswith("ModelCheckpoint")]


def resume_checkpoint(config) -> Path | None:
    """The checkpoint file ``fit --ckpt_path`` resumes: the file itself, or for ``last`` the ``last.ckpt`` of the
    config's ``ModelCheckpoint`` folders (the newest when several hold one); None without one."""
    ckpt_path = config.get("ckpt_path")
    if ckpt_path is None:
        return None
    if ckpt_path != "last":
        return Path(ckpt_path) if Path(ckpt_path).is_file() else None
    found = [Path(args.dirpath) / "last.ckpt" for args in checkpoint_callbacks(config) if args.get("dirpath")]
    found = [f for f in found if f.is_file()]
    return max(found, key=lambda f: f.stat().st_mtime) if found else None


def best_checkpoint(config) -> str:
    """``--ckpt_path best`` for ``validate``/``test`` in a new process: the best checkpoint of the run on disk.

    Lightning resolves ``best`` only in the trainer that ran ``fit``; here the monitored ``ModelCheckpoint`` of the
    config names the folder, and of its checkpoint files the one with the highest ``global_step`` says, in that
    callback's saved state, which file is best so far (so an interrupted run's best is found too).

    Raises:
        ValueError: the config has no ``ModelCheckpoint`` with a ``monitor``.
        FileNotFoundError: no checkpoint in its folder records a best file, or that file is gone.
    """
    monitored = [args for args in checkpoint_callbacks(config) if args.get("monitor")]
    if not monitored or monitored[0].get("dirpath") is None:
        raise ValueError("--ckpt_path best needs a ModelCheckpoint callback with a monitor and a dirpath (or "
                         "--run_name) in the config; give a checkpoint file or 'last' instead")
    folder, monitor = Path(monitored[0].dirpath), monitored[0].monitor
    newest_step, best = -1, None
    for file in sorted(folder.glob("*.ckpt")):
        checkpoint = torch.load(file, map_location="cpu", weights_only=False, mmap=True)  # tensors stay on disk
        for key, state in checkpoint.get("callbacks", {}).items():
            if (key.startswith("ModelCheckpoint") and state.get("monitor") == monitor
                    and state.get("best_model_path") and checkpoint.get("global_step", -1) > newest_step):
                newest_step, best = checkpoint["global_step"], state["best_model_path"]
    if best is None:
        raise FileNotFoundError(f"--ckpt_path best: no checkpoint in {folder} records a best one by {monitor} "
                                "(did the run validate?); give a checkpoint file or 'last' instead")
    if not Path(best).is_file():
        raise FileNotFoundError(f"--ckpt_path best: {best}, the best checkpoint by {monitor} recorded in {folder}, "
                                "does not exist")
    logging.getLogger(__name__).warning("--ckpt_path best: %s (best %s, recorded at step %d)", best, monitor,
                                        newest_step)
    return best


def refuse_to_overwrite(config) -> None:
    """Refuse a fresh ``fit`` whose checkpoint folder already holds checkpoints (an earlier run of the same name):
    Lightning would write ``last-v1.ckpt`` beside the old ``last.ckpt`` and mix the two runs' best checkpoints.

    Raises:
        SettingError: naming the folder and its files, and how to resume the run or start afresh.
    """
    for args in checkpoint_callbacks(config):
        folder = args.get("dirpath")
        files = sorted(Path(folder).glob("*.ckpt"), key=lambda f: f.stat().st_mtime) if folder else []
        if files:
            resume = "last" if any(f.name == "last.ckpt" for f in files) else str(files[-1])
            afresh = "another --run_name" if config.get("run_name") else "another checkpoint dirpath"
            raise SettingError(f"{folder} already holds the checkpoints of an earlier run ("
                               f"{', '.join(f.name for f in files[-3:])}): continue it with --ckpt_path {resume}, or "
                               f"start afresh with {afresh} or after deleting {folder}")


def _output_dirs(init_args, prefix: str):
    """``(key, value)`` of the settings named ``*_dir`` under ``init_args``, nested settings included; the WebShop
    data folder (``env.data_dir``) is an input, not an output."""
    for key, value in (init_args or Namespace()).items(branches=True, nested=False):
        if isinstance(value, Namespace):
            yield from _output_dirs(value.get("init_args", value), f"{prefix}{key}.")
        elif key.endswith("_dir") and value and f"{prefix}{key}" not in ("data.env.data_dir",):
            yield f"{prefix}{key}", value


def describe_outputs(config, log_dir: Path) -> str:
    """The folders a run writes, one line each: checkpoints, logs (with ``config.yaml`` and ``manifest.json``), and
    every ``*_dir`` setting of the model, the data and the callbacks (results, exports, caches)."""
    rows = []
    for callback in config.trainer.callbacks or []:
        init_args, name = getattr(callback, "init_args", None), getattr(callback, "class_path", "").rsplit(".", 1)[-1]
        if name == "ModelCheckpoint":
            rows.append(("checkpoints", init_args.get("dirpath") or str(log_dir / "checkpoints")))
        elif init_args is not None:
            rows += [(f"{name}.{k}", v) for k, v in _output_dirs(init_args, "")]
    rows.append(("logs, config.yaml, manifest.json", str(log_dir)))
    for component in ("model", "data"):
        if config.get(component):
            rows += list(_output_dirs(config[component].get("init_args"), f"{component}."))
    model = config.model.init_args if config.get("model") else Namespace()
    if model.get("tiny") is not None and model.get("model_name_or_path"):
        rows.append(("model.tiny (a fresh tiny policy)", model.model_name_or_path))
    rows = list(dict.fromkeys(rows))  # two ModelCheckpoint callbacks usually share one folder
    width = max(len(label) for label, _ in rows)
    return "This run writes to:\n" + "\n".join(f"  {label:<{width}}  {path}" for label, path in rows)


class SaveConfigAndManifest(SaveConfigCallback):
    """Lightning's ``config.yaml`` in the run's log folder, and ``manifest.json`` beside it (``lit.manifest``;
    rank 0, once per run, when the Trainer sets up).

    Args:
        command_line: the command line to record (program name first; None: ``sys.argv``).
        *args, **kwargs: ``SaveConfigCallback``'s.
    """

    def __init__(self, *args, command_line: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.command_line = command_line

    def setup(self, trainer, pl_module, stage: str) -> None:
        first = not self.already_saved
        super().setup(trainer, pl_module, stage)
        if first:
            log_dir = trainer.log_dir  # a broadcast: every rank asks
            if trainer.is_global_zero:
                write_manifest(Path(log_dir) / "manifest.json", self.command_line)
