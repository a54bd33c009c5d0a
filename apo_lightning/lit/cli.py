"""The command line: ``LightningCLI`` with this project's links, run names, thread setting and quiet output.

    python cli.py fit --config configs/quickstart.yaml          # or: apo-lightning fit --config ...
    python cli.py fit --config configs/webshop_1k.yaml --config configs/objective/grpo.yaml
    python cli.py test --config configs/quickstart.yaml --ckpt_path last
    python cli.py fit --config configs/quickstart.yaml --print_config

Values two components share are linked, so a config states them once: the policy path (module → data module), the
run seed (``seed_everything`` → the data module, which derives every sampling seed from it), the objective (module →
data module: whether stage 1 runs, how many rollouts a goal gets), and the SFT drill steps (data module → module:
the learning-rate plateau). ``run_name`` names a run's outputs in one place: the TensorBoard run, ``checkpoints/<run>``,
``results/<run>`` and ``data/models/<run>`` wherever a config leaves them unset.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import torch
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.cli import LightningCLI
from transformers.utils import logging as transformers_logging

from ..apo.objectives import OBJECTIVES

DEFAULT_LOGGER_NAME = "lightning_logs"


def run_seed(seed_everything) -> int:
    """The data modules' run seed from ``seed_everything``, which must be an integer here.

    Raises:
        ValueError: ``seed_everything`` is a bool (``true`` would draw a seed no data module could repeat).
    """
    if isinstance(seed_everything, bool) or not isinstance(seed_everything, int):
        raise ValueError(f"seed_everything must be an integer run seed (got {seed_everything!r}): every rollout, "
                         "goal order and stage-1 sample is derived from it, so a run can be repeated")
    return seed_everything


def rollouts_per_goal(model_init_args) -> int:
    """How many trajectories the objective of a module config samples per goal (1 for modules without one)."""
    algorithm = getattr(model_init_args, "algorithm", None)
    if algorithm is None:
        return 1
    return OBJECTIVES[algorithm].rollouts_per_goal(getattr(model_init_args, algorithm))


class APOLightningCLI(LightningCLI):
    """LightningCLI with the links above, ``--run_name`` and a per-process torch thread setting (default 1: on a
    2-core machine, more threads make small matmuls far slower whenever the other core is busy)."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--num_threads", type=int, default=int(os.environ.get("APO_NUM_THREADS", "1")),
                            help="torch intra-op threads per process")
        parser.add_argument("--run_name", type=str | None, default=None,
                            help="names the run's TensorBoard run, checkpoints/<run>, results/<run> and "
                                 "data/models/<run> wherever the config leaves them unset")
        parser.link_arguments("model.init_args.model_name_or_path", "data.init_args.model_name_or_path")
        parser.link_arguments("seed_everything", "data.init_args.seed", compute_fn=run_seed)
        parser.link_arguments("model.init_args.algorithm", "data.init_args.algorithm")
        parser.link_arguments("model.init_args", "data.init_args.rollouts_per_goal", compute_fn=rollouts_per_goal)
        parser.link_arguments("data.init_args.drills.steps", "model.init_args.constant_steps")

    def _parse_ckpt_path(self) -> None:
        """Build the model from the config files and the command line, never from a checkpoint's hyperparameters.

        Lightning 2.6 overwrites the parsed model settings with those saved in a ``--ckpt_path`` *file* (not with
        ``last``/``best``), so ``cli.py test --ckpt_path run/best.ckpt --model.results_dir out`` silently wrote to
        the training run's results folder (Lightning-AI/pytorch-lightning#21455). Here, as in training, the
        configuration says what the model is; the checkpoint restores its weights (and, for ``fit``, the optimizer,
        step and data position).
        """

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        torch.set_num_threads(config.num_threads)
        if config.run_name:
            name_outputs(config, config.run_name)
        if self.subcommand in ("validate", "test") and config.get("ckpt_path") == "best":
            config.ckpt_path = best_checkpoint(config)

    def instantiate_classes(self) -> None:
        """Instantiate as LightningCLI does, then warn about a bfloat16 precision on a CPU that emulates it, with the
        accelerator as the Trainer resolved it (``auto`` included)."""
        super().instantiate_classes()
        slow_bf16 = bf16_on_cpu_warning(self.trainer.precision, isinstance(self.trainer.accelerator, CPUAccelerator))
        if slow_bf16:
            logging.getLogger(__name__).warning(slow_bf16)


def native_bf16_on_cpu() -> bool:
    """Whether this CPU has bfloat16 instructions (AVX512-BF16 or AMX), as torch's CPU kernels detect them."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)  # private helpers of torch.cpu (2.13); absent: no


def bf16_on_cpu_warning(precision: str, on_cpu: bool) -> str | None:
    """The warning for a bfloat16 ``trainer.precision`` that will run on a CPU without bfloat16 instructions, or
    None (float32, a GPU, or a CPU that has them).

    Without them torch emulates bfloat16: on a 2-core AVX2 machine ``benchmarks/training_throughput.py --settings
    short_pages bf16_mixed`` measured 0.395 trajectories/s under ``bf16-mixed`` against 2.032 in float32 (0.19×), and
    a real-data A*-PO step of the two-hour recipe took about 127 s against about 26 s in float32 (docs/experiments.md,
    "Twenty-third session"). On a CPU with them it made the loss's passes 1.6× faster ("Seventeenth session").

    Args:
        precision: the Trainer's precision (``"bf16-mixed"``, ``"32-true"``, ...).
        on_cpu: whether the Trainer's accelerator is the CPU.
    """
    if "bf16" not in precision or not on_cpu or native_bf16_on_cpu():
        return None
    return (f"trainer.precision={precision} on a CPU without bfloat16 instructions (no AVX512-BF16 or AMX): torch "
            "emulates bfloat16 here, about 5x slower than float32 (benchmarks/training_throughput.py); use "
            "--trainer.precision=32-true")


def best_checkpoint(config) -> str:
    """``--ckpt_path best`` for ``validate``/``test`` in a new process: the best checkpoint of the run on disk.

    Lightning resolves ``best`` only in the trainer that ran ``fit``; here the monitored ``ModelCheckpoint`` of the
    config names the folder, and of its checkpoint files the one with the highest ``global_step`` says, in that
    callback's saved state, which file is best so far (so an interrupted run's best is found too).

    Raises:
        ValueError: the config has no ``ModelCheckpoint`` with a ``monitor``.
        FileNotFoundError: no checkpoint in its folder records a best file, or that file is gone.
    """
    monitored = [c.init_args for c in config.trainer.callbacks or [] if getattr(c, "class_path", "").endswith(
        "ModelCheckpoint") and c.init_args.get("monitor")]
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


class _DropTips(logging.Filter):
    """Drops Lightning's advertising tips (``💡 Tip: ... try installing litlogger / litmodels``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


def quiet_known_warnings() -> None:
    """Silence the messages known to be harmless here, each by its text and origin (nothing globally)."""
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_DropTips())
    # the loaders roll out with the policy itself, so they run in the main process on purpose
    warnings.filterwarnings("ignore", message=r"The '(train|val|test)_dataloader' does not have many workers",
                            module=r"lightning\.pytorch\.trainer\.connectors\.data_connector")
    # Lightning 2.6 against torch 2.13's pytree: a deprecation inside Lightning, nothing a user can act on
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            module=r"lightning\.pytorch\.utilities\._pytree")
    # transformers' per-file "Loading weights" / "Writing model shards" bars: our own bars say what runs
    transformers_logging.disable_progress_bar()


def build_cli(args: list[str] | None = None, run: bool = True) -> APOLightningCLI:
    """The project's ``LightningCLI`` on ``args`` (instead of ``sys.argv[1:]``); with ``run=False`` it only parses
    and instantiates (no subcommand; call ``cli.trainer.fit(cli.model, cli.datamodule)`` yourself)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    quiet_known_warnings()
    return APOLightningCLI(subclass_mode_model=True, subclass_mode_data=True, args=args, run=run,
                           seed_everything_default=0, save_config_kwargs={"overwrite": True})


def main(args: list[str] | None = None) -> APOLightningCLI:
    """Run the command line (``args``: instead of ``sys.argv[1:]``)."""
    return build_cli(args)
