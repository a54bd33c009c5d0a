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

``fit --config CONFIG --help`` lists the config's settings, one line each (``--help=full``: jsonargparse's help with
every Trainer flag). A setting that the parser or a class refuses is one line, ``error: data.batch_size must be >= 1,
got 0``, and exit status 2. A local policy path must exist (``settings.check_policy``: a fresh tiny policy is built
only under ``data/models/``). A ``fit`` whose checkpoint folder already holds checkpoints is refused: resume it with
``--ckpt_path last`` or start afresh under another ``--run_name``. Each run prints the folders it writes and leaves
``manifest.json`` (commit, packages, CPU, command line; ``lit.manifest``) beside its ``config.yaml``; the model summary
is off unless ``--trainer.enable_model_summary true``.

``trainer.precision`` also takes ``auto`` (:func:`auto_precision`: bf16-mixed on a GPU or on a CPU with bfloat16
instructions, else 32-true). It is resolved before the Trainer is built and printed as one line; the run's
``config.yaml`` records the resolved value, so that ``--config`` of it repeats the precision the run had on any machine.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Literal, get_type_hints

import torch
import yaml
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from transformers.utils import logging as transformers_logging

from ..apo.objectives import Objective
from ..rollout.vllm_backend import VLLMSettings, check_model
from .callbacks import LowCPUMemory
from .manifest import write_manifest
from .settings import SettingError, check_policy

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


def objective_of(objective) -> Objective:
    """The objective a module config names: its parsed ``class_path`` and ``init_args``, built (or an objective)."""
    if isinstance(objective, Objective):
        return objective
    module, _, name = objective.class_path.rpartition(".")
    init_args = objective.get("init_args")
    return getattr(importlib.import_module(module), name)(**(vars(init_args) if init_args else {}))


def needs_v_star(objective) -> bool:
    """Whether the configured objective needs stage 1 (``Objective.needs_v_star``), for the data module."""
    return objective_of(objective).needs_v_star


def rollouts_per_goal(objective) -> int:
    """How many trajectories the configured objective samples per goal (``Objective.rollouts_per_goal``)."""
    return objective_of(objective).rollouts_per_goal


class APOLightningCLI(LightningCLI):
    """LightningCLI with the links above, ``--run_name``, a per-process torch thread setting (default 1: on a
    2-core machine, more threads make small matmuls far slower whenever the other core is busy), and a command line
    that helps: ``fit --config CONFIG --help`` lists the config's settings one line each (``--help=full``:
    jsonargparse's help, every Trainer flag), a refused setting is one line that names it (``main``), a missing policy
    path is refused before anything is built, a finished run is never overwritten, and each run prints the paths it
    writes and leaves a ``manifest.json`` beside its ``config.yaml`` (``lit.manifest``)."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--num_threads", type=int, default=int(os.environ.get("APO_NUM_THREADS", "1")),
                            help="torch intra-op threads per process")
        parser.add_argument("--low_cpu_memory", type=bool, default=False,
                            help="in training steps, give every large CPU tensor its own memory mapping, returned to "
                                 "the system when freed (glibc; lit.callbacks.LowCPUMemory): a lower peak, slower steps")
        parser.add_argument("--run_name", type=str | None, default=None,
                            help="names the run's TensorBoard run, checkpoints/<run>, results/<run> and "
                                 "data/models/<run> wherever the config leaves them unset")
        parser.link_arguments("model.init_args.model_name_or_path", "data.init_args.model_name_or_path")
        parser.link_arguments("seed_everything", "data.init_args.seed", compute_fn=run_seed)
        parser.link_arguments("model.init_args.objective", "data.init_args.needs_v_star", compute_fn=needs_v_star)
        parser.link_arguments("model.init_args.objective", "data.init_args.rollouts_per_goal",
                              compute_fn=rollouts_per_goal)
        parser.link_arguments("data.init_args.drills.steps", "model.init_args.constant_steps")

    def _parse_ckpt_path(self) -> None:
        """Build the model from the config files and the command line, never from a checkpoint's hyperparameters.

        Lightning 2.6 overwrites the parsed model settings with those saved in a ``--ckpt_path`` *file* (not with
        ``last``/``best``), which would ignore e.g. ``--model.results_dir`` given with a checkpoint file
        (Lightning-AI/pytorch-lightning#21455). Here the configuration says what the model is; the checkpoint
        restores its weights (and, for ``fit``, the optimizer, step and data position).
        """

    def parse_arguments(self, parser, args) -> None:
        """Parse as LightningCLI does, except for a subcommand's help: ``-h``/``--help`` prints
        :func:`settings_help` (the config's settings, one line each) and exits; ``--help=full`` is jsonargparse's
        help with every Trainer flag."""
        if isinstance(args, (dict, Namespace)):
            return super().parse_arguments(parser, args)
        argv = list(sys.argv[1:] if args is None else args)
        subcommand = next((a for a in argv if a in self.subcommands()), None)
        after = argv[argv.index(subcommand) + 1:] if subcommand else []
        if "--help=full" in after:
            argv = ["--help" if a == "--help=full" else a for a in argv]
        elif any(a in ("-h", "--help") for a in after):
            rest = [a for a in argv if a not in ("-h", "--help")]
            chosen = any(a.split("=")[0] in ("-c", "--config", "--model", "--data") for a in after)
            config = parser.parse_args(rest)[subcommand] if chosen else None
            print(settings_help(self._subcommand_parsers[subcommand], config, f"{program_name()} {subcommand}"))
            sys.exit(0)
        self.config = parser.parse_args(argv)

    def before_instantiate_classes(self) -> None:
        """Set the threads, name the outputs, resolve ``trainer.precision: auto`` (:func:`auto_precision`, one line on
        rank 0) and ``--ckpt_path best``, and refuse (``SettingError``) a ``fit`` that would overwrite a run's
        checkpoints and, for a subcommand, a policy path that does not exist (``settings.check_policy``, before any
        process is launched)."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        torch.set_num_threads(config.num_threads)
        if config.run_name:
            name_outputs(config, config.run_name)
        with setting_errors(config):
            if config.trainer.get("precision") == "auto":  # before SaveConfigAndManifest dumps this config
                config.trainer.precision, why = auto_precision(config.trainer.get("accelerator"))
                rank_zero_info(f"trainer.precision auto -> {config.trainer.precision} ({why})")
            data = config.data.init_args if config.get("data") else Namespace()
            if self.subcommand and data.get("model_name_or_path"):  # parse-only use checks it in prepare_data
                check_policy(data.model_name_or_path, data.get("tiny"))
            if self.subcommand and data.get("rollout") and data.rollout.get("backend") == "vllm":
                check_vllm(config)
            if self.subcommand in ("validate", "test") and config.get("ckpt_path") == "best":
                config.ckpt_path = best_checkpoint(config)
            if self.subcommand == "fit" and config.get("ckpt_path") is None:
                refuse_to_overwrite(config)

    def instantiate_classes(self) -> None:
        """Instantiate as LightningCLI does (a setting a class refuses: ``SettingError``), add ``LowCPUMemory`` to the
        Trainer's callbacks with ``--low_cpu_memory``, then warn about a bfloat16 precision on a CPU that emulates it,
        with the accelerator as the Trainer resolved it (``auto`` included)."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        with setting_errors(config):
            super().instantiate_classes()
        if config.low_cpu_memory:
            self.trainer.callbacks.append(LowCPUMemory())
        slow_bf16 = bf16_on_cpu_warning(self.trainer.precision, isinstance(self.trainer.accelerator, CPUAccelerator))
        if slow_bf16:
            logging.getLogger(__name__).warning(slow_bf16)

    def after_instantiate_classes(self) -> None:
        """For ``fit`` from a checkpoint, refuse (``SettingError``) one trained under another setup before anything
        is written (the module's ``refuse_other_setup``); for a subcommand, on rank 0, print the paths the run
        writes (before any process is launched)."""
        if self.subcommand == "fit" and hasattr(self.model, "refuse_other_setup"):
            config = self.config[self.subcommand]
            path = resume_checkpoint(config)
            if path is not None:
                saved = torch.load(path, map_location="cpu", weights_only=False, mmap=True).get("training_setup")
                with setting_errors(config):
                    self.model.refuse_other_setup(saved, path)
        if self.subcommand is not None and rank_zero_only.rank == 0:
            rank_zero_info(describe_outputs(self.config[self.subcommand], Path(self.trainer.log_dir)))


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


def native_bf16_on_cpu() -> bool:
    """Whether this CPU has bfloat16 instructions (AVX512-BF16 or AMX), as torch's CPU kernels detect them."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)  # private helpers of torch.cpu (2.13); absent: no


def auto_precision(accelerator) -> tuple[str, str]:
    """The precision ``trainer.precision: auto`` stands for on ``accelerator``, and why (for the line printed).

    A GPU trains in ``bf16-mixed``; a CPU too when it has bfloat16 instructions (:func:`native_bf16_on_cpu`), and
    in ``32-true`` otherwise, since torch would emulate bfloat16 there (:func:`bf16_on_cpu_warning`).

    Args:
        accelerator: ``trainer.accelerator``: ``"cpu"``, ``"gpu"`` or ``"cuda"``, or ``"auto"`` (None too), which
            is CUDA where ``torch.cuda.is_available()`` and the CPU elsewhere, as Lightning chooses.

    Raises:
        ValueError: any other accelerator (``mps``, ``tpu``, an accelerator class): its precision must be given.
    """
    if accelerator in (None, "auto"):
        accelerator = "cuda" if torch.cuda.is_available() else "cpu"
    if accelerator in ("gpu", "cuda"):
        return "bf16-mixed", "GPU"
    if accelerator == "cpu":
        if native_bf16_on_cpu():
            return "bf16-mixed", "CPU with AMX/AVX512-BF16"
        return "32-true", "CPU without AMX/AVX512-BF16: bfloat16 would be emulated"
    raise ValueError(f"trainer.precision auto resolves for the accelerators cpu, gpu, cuda and auto, not "
                     f"{accelerator!r}: give trainer.precision itself (32-true, bf16-mixed, ...)")


def bf16_on_cpu_warning(precision: str, on_cpu: bool) -> str | None:
    """The warning for a bfloat16 ``trainer.precision`` that will run on a CPU without bfloat16 instructions, or
    None (float32, a GPU, or a CPU that has them).

    Without them torch emulates bfloat16, and ``bf16-mixed`` trains several times slower than float32; with them it
    trains faster (measured with ``benchmarks/training_throughput.py``: docs/experiments.md, the sections "bfloat16
    autocast on the CPU" and "one SFT pass as stage 0, then A*-PO, inside two hours").

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


# ------------------------------------------------------------------------------------------------ refused settings
def check_vllm(config) -> None:
    """Refuse a run whose policy the vLLM sampler cannot run (``rollout.vllm_backend.check_model``: no interpreter,
    a head size vLLM's CPU attention lacks, a LoRA rank above ``max_lora_rank``, a context longer than
    ``max_model_len``), before anything is built or written. A tiny policy not built yet is checked once built."""
    data, model = config.data.init_args, config.model.init_args
    rollout = data.rollout
    settings = VLLMSettings(**dict(rollout.vllm.items())) if rollout.get("vllm") else VLLMSettings()
    accelerator = config.trainer.get("accelerator") or "auto"
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    lora = model.get("lora")
    rank = int(lora.get("rank", 0)) if lora else 0
    budget = data.chat.get("context_budget", 0) if data.get("chat") else 0
    tiny = data.get("tiny")
    head_size = tiny.hidden_size // tiny.num_heads if tiny else None
    check_model(data.model_name_or_path, rank, settings, on_cpu, context_budget=budget or 0, prefix="data.rollout.",
                budget_setting="data.chat.context_budget", head_size=head_size)


def qualified(message: str, config) -> str:
    """``message`` with ``model.`` or ``data.`` put before the setting it leads with, when that is a setting of the
    config's model or data class (a key relative to the class, as the classes word their errors); the model first,
    since a setting the two share is linked from the model."""
    lead = re.match(r"[A-Za-z_][\w.]*", message)
    for component in ("model", "data"):
        init_args = config.get(component, Namespace()).get("init_args") if config.get(component) else None
        if lead and isinstance(init_args, Namespace) and lead.group(0) in init_args:
            return f"{component}.{message}"
    return message


def _raised_in_jsonargparse(error: BaseException) -> bool:
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and frame.tb_frame.f_globals.get("__name__", "").startswith("jsonargparse")


class setting_errors:  # noqa: N801 (a context manager, used as ``with setting_errors(config):``)
    """Turn a ``ValueError`` or ``FileNotFoundError`` raised inside into a ``SettingError`` with the message of the
    exception that jsonargparse wrapped (its Union error lists every subtype and dumps the whole config), qualified
    by :func:`qualified`; the original stays as ``__cause__``."""

    def __init__(self, config):
        self.config = config

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None or isinstance(error, SettingError) or not isinstance(error, (ValueError, FileNotFoundError)):
            return False
        root = error
        while root.__cause__ is not None and _raised_in_jsonargparse(root):
            root = root.__cause__
        if _raised_in_jsonargparse(root) or not isinstance(root, (ValueError, FileNotFoundError)):
            return False
        raise SettingError(qualified(str(root), self.config)) from root


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


# ------------------------------------------------------------------------------------------------ what a run writes
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
    data = config.data.init_args if config.get("data") else Namespace()
    if data.get("tiny") is not None and data.get("model_name_or_path"):
        rows.append(("data.tiny (a fresh tiny policy)", data.model_name_or_path))
    rows = list(dict.fromkeys(rows))  # two ModelCheckpoint callbacks usually share one folder
    width = max(len(label) for label, _ in rows)
    return "This run writes to:\n" + "\n".join(f"  {label:<{width}}  {path}" for label, path in rows)


# ------------------------------------------------------------------------------------------------ help
def program_name() -> str:
    """How this command line was typed: ``python cli.py`` or the installed ``apo-lightning``."""
    name = Path(sys.argv[0]).name
    return f"python {name}" if name.endswith(".py") else name


def _one_line(text: str | None) -> str:
    return " ".join((text or "").replace("``", "").split())


def _shown(value) -> str:
    """A setting's value as it would be typed (YAML-like), cut to 40 characters."""
    if isinstance(value, dict) and "class_path" in value:
        text = value["class_path"].rsplit(".", 1)[-1]
    elif isinstance(value, list):
        text = "[" + ", ".join(_shown(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    else:
        text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
    return text if len(text) <= 40 else text[:39] + "…"


def _class_helps(class_path: str, key: str) -> tuple[dict[str, str], set[str]]:
    """The help line of each setting of a class under ``key`` (its docstring's ``Args:``), and the keys that hold
    a single value (not a group of nested settings)."""
    module, _, name = class_path.rpartition(".")
    parser = ArgumentParser(exit_on_error=False)
    try:
        parser.add_class_arguments(getattr(importlib.import_module(module), name), key, fail_untyped=False)
    except Exception:  # a class jsonargparse cannot describe: its settings are listed without help
        return {}, set()
    actions = [a for a in parser._actions if a.dest and not a.dest.endswith(".help") and a.help != "==SUPPRESS=="]
    helps = {a.dest: _one_line(a.help) for a in actions}
    return helps, {a.dest for a in actions if type(a).__name__ != "_ActionConfigLoad"}


def _class_rows(value: dict, key: str) -> list[tuple[str, str, str]]:
    """``(--key, value, help)`` rows of a class setting (``class_path`` and ``init_args``) and its nested settings."""
    helps, leaves = _class_helps(value["class_path"], key)
    rows = [(f"--{key}", value["class_path"], "")]

    def walk(settings: dict, prefix: str) -> None:
        for name, setting in settings.items():
            dest = f"{prefix}.{name}"
            if isinstance(setting, dict) and "class_path" in setting:
                rows.extend(_class_rows(setting, dest))
            elif isinstance(setting, dict) and dest not in leaves:
                walk(setting, dest)
            else:
                rows.append((f"--{dest}", _shown(setting), helps.get(dest, "")))

    walk(value.get("init_args") or {}, key)
    return rows


def _rows_text(rows, width: int) -> list[str]:
    column = min(max((len(f"{o} {v}") for o, v, _ in rows), default=0), 46)
    lines = []
    for option, value, help_text in rows:
        line = f"  {f'{option} {value}':<{column}}  {help_text}".rstrip()
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return lines


def _config_files() -> list[tuple[str, str]]:
    """``(path, first comment line)`` of the YAML files in ``configs/`` (the working directory's, else the
    source tree's)."""
    folder = Path("configs") if Path("configs").is_dir() else Path(__file__).resolve().parents[2] / "configs"
    rows = []
    for file in sorted(folder.rglob("*.yaml")):
        first = next((line.lstrip("# ").strip() for line in file.read_text().splitlines() if line.startswith("#")), "")
        rows.append((str(file if folder == Path("configs") else file.relative_to(folder.parent)), first))
    return rows


def settings_help(parser, config, command: str) -> str:
    """The help of a subcommand: with a config, each of its settings on one line (``--key value  help``): the run's,
    the model's and the data's, and the Trainer flags it changes; without one, the configs to choose from.

    Args:
        parser: the subcommand's parser.
        config: the parsed settings of the subcommand (None: no config was given).
        command: how the subcommand is typed (``cli.py fit``).
    """
    width = max(shutil.get_terminal_size((120, 24)).columns, 80)
    dump = (yaml.safe_load(parser.dump(config, skip_link_targets=True, skip_none=False, skip_validation=True))
            if config is not None else {})
    helps = {a.dest: _one_line(a.help) for a in parser._actions if a.dest}
    defaults = parser.get_defaults()
    lines = [f"usage: {command} --config CONFIG [--config OVERLAY ...] [--KEY VALUE ...]"]
    if config is None:
        lines += ["", f"A config chooses the model and the data; {command} --config CONFIG --help lists its settings, "
                  "one line each, with their values:", f"  {command} --config configs/quickstart.yaml --help", "",
                  "Configs (an overlay goes after the config it changes):"]
        configs = _config_files()
        column = max((len(path) for path, _ in configs), default=0)
        lines += [f"  {path:<{column}}  {first}"[:width] for path, first in configs]
    run = [(f"--{key}", _shown(dump.get(key, defaults.get(key))), helps.get(key, ""))
           for key in ("run_name", "seed_everything", "num_threads", "low_cpu_memory", "ckpt_path") if key in helps]
    lines += ["", "Run:", *_rows_text(run, width)]
    for component in ("model", "data"):
        if dump.get(component):
            lines += ["", f"{component.capitalize()}:", *_rows_text(_class_rows(dump[component], component), width)]
    trainer = [(f"--trainer.{key}", _shown(value), helps.get(f"trainer.{key}", ""))
               for key, value in (dump.get("trainer") or {}).items()
               if value != yaml.safe_load(yaml.safe_dump(defaults.get(f"trainer.{key}")))]
    if trainer:
        lines += ["", "Trainer (the flags the config changes):", *_rows_text(trainer, width)]
    lines += ["", f"Every setting with its documentation: {command} --config CONFIG --print_config=comments",
              f"Every Trainer flag: {command} --help=full"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ parse errors
def _did_you_mean(word: str, candidates) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def explain_parse_error(message: str, options=()) -> str:
    """jsonargparse's parse error as one line that leads with the setting, the value and what is allowed.

    ``Parser key "data": Does not validate against any of the Union subtypes ... Parser key "batch_size": Expected
    a <class 'int'>. Got value: abc ...`` becomes ``data.batch_size: expected int, got abc``; an unknown setting
    gets the nearest known one (from ``options``, the parser's ``--keys``, or the class's settings). Other messages
    lose the Union's boilerplate (its subtypes and the dump of the given value).
    """
    message = re.sub(r"^Call to compute_fn of link '.*?' with args \(.*?\) failed: ", "", message, flags=re.S)
    key = ".".join(re.findall(r'Parser key "([^"]+)"', message))
    found = re.search(r"Expected an? (?P<type>.+?)\. Got value: (?P<value>.*)", message)
    rejected = re.search(r"given class_path '(?P<cls>[\w.]+)':\s*(?:Option|Key) '(?P<name>[^']+)' is not "
                         r"(?:accepted|expected)", message)
    unknown = re.match(r"unrecognized arguments: (--[^\s=]+)", message)
    unknown_class = re.search(r"Expected a dot import path string: (?P<value>\S+)", message)
    if unknown_class:
        known = sorted(c.__name__ for c in Objective.__subclasses__()) if key.endswith("objective") else []
        allowed = f"one of {', '.join(known)} or a full class path" if known else "a full class path"
        return (f"{key + ': ' if key else ''}{unknown_class['value']} is not a class it can import; expected "
                f"{allowed}{_did_you_mean(unknown_class['value'], known)}")
    if found:
        choices = re.fullmatch(r"typing\.Literal\[(.*)\]", found["type"])
        expected = (f"one of {choices[1]}" if choices else
                    re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", found["type"]))
        return f"{key + ': ' if key else ''}expected {expected}, got {found['value'].strip()}"
    if rejected:
        setting = f"{key}.{rejected['name']}" if key else rejected["name"]
        settings = _class_helps(rejected["cls"], key)[1] if key else ()
        return f"{setting}: not a setting of {rejected['cls'].rsplit('.', 1)[-1]}{_did_you_mean(setting, settings)}"
    if unknown:
        return message.splitlines()[0] + _did_you_mean(unknown[1], [o for o in options if o.startswith("--")])
    boilerplate = ("Does not validate against", "Subtypes:", "Errors:", "Given value",
                   "- Expected a <class 'NoneType'>")
    kept = [re.sub(r'Parser key "[^"]+":\s*', "", line.strip()).removeprefix("- ") for line in message.splitlines()
            if not line.strip().startswith(boilerplate)]
    rest = " ".join(line for line in kept if line)
    return f"{key}: {rest}" if key else rest


#: what ``trainer.precision`` accepts here: the Trainer's own type (so ``32`` stays an int) and ``auto``
#: (:func:`auto_precision`)
PRECISION_SETTING = get_type_hints(Trainer.__init__)["precision"] | Literal["auto"]


class APOArgumentParser(LightningArgumentParser):
    """Lightning's parser whose errors lead with the problem (:func:`explain_parse_error`) and a pointer to the
    help, instead of 50 lines of usage first, and whose ``trainer.precision`` also takes ``auto``."""

    def add_class_arguments(self, class_type, nested_key=None, *args, skip=None, **kwargs) -> list[str]:
        """jsonargparse's, except that a Trainer's ``precision`` is :data:`PRECISION_SETTING`, validated as such
        from a config file, the command line and ``--print_config`` alike; ``before_instantiate_classes`` resolves
        ``auto`` before the Trainer sees it."""
        if not (isinstance(class_type, type) and issubclass(class_type, Trainer)):
            return super().add_class_arguments(class_type, nested_key, *args, skip=skip, **kwargs)
        added = super().add_class_arguments(class_type, nested_key, *args, skip={*(skip or ()), "precision"},
                                            **kwargs)
        key = f"{nested_key}.precision" if nested_key else "precision"
        self.groups.get(nested_key, self).add_argument(  # the Trainer's group: its place in --help=full
            f"--{key}", type=PRECISION_SETTING, default=None,
            help="Double precision (64, '64' or '64-true'), full precision (32, '32' or '32-true'), 16bit mixed "
                 "precision (16, '16', '16-mixed'), bfloat16 mixed precision ('bf16', 'bf16-mixed'), or 'auto': "
                 "bf16-mixed on a GPU or on a CPU with AMX/AVX512-BF16, else 32-true (lit.cli.auto_precision). "
                 "Default: '32-true'.")
        return [*added, key]

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        subcommand = self.prog.replace(" [options]", "").split(" ")[1:]
        command = f"{program_name()} {subcommand[0] if subcommand else 'fit'}"
        sys.stderr.write(f"error: {explain_parse_error(message, self._option_string_actions)}\n"
                         f"(the settings, one line each: {command} --config CONFIG --help)\n")
        sys.exit(2)


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
    # a fresh fit into a folder with checkpoints is refused (``refuse_to_overwrite``): this one warns on resumes only
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    # transformers' per-file "Loading weights" / "Writing model shards" bars: our own bars say what runs
    transformers_logging.disable_progress_bar()


def build_cli(args: list[str] | None = None, run: bool = True) -> APOLightningCLI:
    """The project's ``LightningCLI`` on ``args`` (instead of ``sys.argv[1:]``); with ``run=False`` it only parses
    and instantiates (no subcommand; call ``cli.trainer.fit(cli.model, cli.datamodule)`` yourself)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    quiet_known_warnings()
    return APOLightningCLI(subclass_mode_model=True, subclass_mode_data=True, args=args, run=run,
                           seed_everything_default=0, save_config_callback=SaveConfigAndManifest,
                           save_config_kwargs={"overwrite": True, "command_line": [sys.argv[0], *(
                               sys.argv[1:] if args is None else args)]},
                           parser_class=APOArgumentParser, trainer_defaults={"enable_model_summary": False})


def main(args: list[str] | None = None) -> APOLightningCLI:
    """Run the command line (``args``: instead of ``sys.argv[1:]``). A refused setting (``SettingError``), whether
    raised while the classes are built or during the run (a checkpoint trained under another setup:
    ``WebShopRLModule.on_load_checkpoint``), is printed as one line, ``error: data.batch_size must be >= 1, got 0``,
    and exits with status 2; any other exception keeps its traceback. ``build_cli`` raises the ``SettingError``
    instead, with the class's exception and its traceback as ``__cause__`` where it wraps one."""
    try:
        return build_cli(args)
    except SettingError as error:
        sys.stderr.write(f"error: {error}\n")
        sys.exit(2)
