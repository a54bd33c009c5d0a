"""The command line: ``LightningCLI`` with this project's links, run names, thread setting and quiet output.

    python cli.py fit --config configs/quickstart.yaml          # or: apo-lightning fit --config ...
    python cli.py fit --config configs/webshop_1k.yaml --config configs/objective/grpo.yaml
    python cli.py test --config configs/quickstart.yaml --ckpt_path last
    python cli.py fit --config configs/quickstart.yaml --print_config

Values two components share are linked, so a config states them once: the policy path (module → SFT data module,
which tokenizes demonstrations with its tokenizer), the run seed (``seed_everything`` → the data module, which derives
every sampling seed from it), the objective (module → data module: whether stage 1 runs, how many rollouts a goal
gets), and the SFT drill steps (data module → module: the learning-rate plateau). ``--run_name`` names a run's
outputs in one place (``lit.outputs``).

The command line's other jobs each have a module: the parser (``lit.parser``), whose ``fit --config CONFIG --help``
lists the config's settings one line each (``lit.help``; ``--help=full``: jsonargparse's help with every Trainer flag)
and whose refused setting is one line, ``error: data.batch_size must be >= 1, got 0``, with exit status 2
(``lit.errors``); ``trainer.precision: auto`` (``lit.precision``); what a run writes (``lit.outputs``: run names, a
``fit`` that would overwrite a run's checkpoints refused, ``--ckpt_path best``, the folders printed, ``manifest.json``
beside ``config.yaml``). A local policy path must exist (``settings.check_policy``: a fresh tiny policy is built only
under ``data/models/``); the model summary is off unless ``--trainer.enable_model_summary true``.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

import torch
from jsonargparse import Namespace
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from transformers.utils import logging as transformers_logging

from ..rollout.vllm_backend import VLLMSettings, check_model
from .callbacks import LowCPUMemory
from .errors import setting_errors
from .help import program_name, settings_help_of
from .outputs import (SaveConfigAndManifest, best_checkpoint, describe_outputs, name_outputs, refuse_to_overwrite,
                      resume_checkpoint)
from .parser import APOArgumentParser
from .precision import auto_precision, bf16_on_cpu_warning
from .settings import SettingError, check_policy


def run_seed(seed_everything) -> int:
    """The data modules' run seed from ``seed_everything``, which must be an integer here.

    Raises:
        ValueError: ``seed_everything`` is a bool (``true`` would draw a seed no data module could repeat).
    """
    if isinstance(seed_everything, bool) or not isinstance(seed_everything, int):
        raise ValueError(f"seed_everything must be an integer run seed (got {seed_everything!r}): every rollout, "
                         "goal order and stage-1 sample is derived from it, so a run can be repeated")
    return seed_everything


def module_objective(model):
    """The objective the RL module built, for its data module: one object, built once and asked (whether stage 1
    runs, how many rollouts a goal gets); None for a module without one (SFT, whose data module has no such
    setting)."""
    return getattr(model, "objective", None)


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
        parser.link_arguments("model", "data.init_args.objective", compute_fn=module_objective,
                              apply_on="instantiate")
        parser.link_arguments("data.init_args.drills.steps", "model.init_args.constant_steps")

    def _parse_ckpt_path(self) -> None:
        """Build the model from the config files and the command line, never from a checkpoint's hyperparameters.

        Lightning 2.6 overwrites the parsed model settings with those saved in a ``--ckpt_path`` *file* (not with
        ``last``/``best``), which would ignore e.g. ``--model.results_dir`` given with a checkpoint file. Here the
        configuration says what the model is; the checkpoint restores its weights (and, for ``fit``, the optimizer,
        step and data position).
        """
        # A private method of Lightning's, overridden as the workaround of a Lightning bug that the open pull request
        # Lightning-AI/pytorch-lightning#21455 fixes (the command line and config files take precedence over a
        # checkpoint's hyperparameters). No public route: LightningCLI.__init__ calls this method between the public
        # hooks parse_arguments and before_instantiate_classes; the latter could undo the overwrite, but not the load
        # of the whole checkpoint file nor a failed parse of its hyperparameters, which exits first. Drop this
        # override once Lightning ships that fix.

    def parse_arguments(self, parser, args) -> None:
        """Parse as LightningCLI does, except for a subcommand's help: ``-h``/``--help`` prints the config's
        settings, one line each (``lit.help.settings_help``: the subcommand parser's own ``--help`` within
        ``settings_help_of``), and exits; ``--help=full`` is jsonargparse's help with every Trainer flag."""
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
            with settings_help_of(config, f"{program_name()} {subcommand}"):
                parser.parse_args([subcommand, "--help"])  # prints it and exits
        self.config = parser.parse_args(argv)

    def before_instantiate_classes(self) -> None:
        """Set the threads, name the outputs, resolve ``trainer.precision: auto`` (``lit.precision.auto_precision``,
        one line on rank 0) and ``--ckpt_path best``, and refuse (``SettingError``) a ``fit`` that would overwrite a
        run's checkpoints and, for a subcommand, a policy path that does not exist (``settings.check_policy``, before
        any process is launched)."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        torch.set_num_threads(config.num_threads)
        if config.run_name:
            name_outputs(config, config.run_name)
        with setting_errors(config):
            if config.trainer.get("precision") == "auto":  # before SaveConfigAndManifest dumps this config
                config.trainer.precision, why = auto_precision(config.trainer.get("accelerator"))
                rank_zero_info(f"trainer.precision auto -> {config.trainer.precision} ({why})")
            data = config.data.init_args if config.get("data") else Namespace()
            model = config.model.init_args if config.get("model") else Namespace()
            if self.subcommand and model.get("model_name_or_path"):  # parse-only use checks it in prepare_data
                check_policy(model.model_name_or_path, model.get("tiny"))
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
    tiny = model.get("tiny")
    head_size = tiny.hidden_size // tiny.num_heads if tiny else None
    check_model(model.model_name_or_path, rank, settings, on_cpu, context_budget=budget or 0, prefix="data.rollout.",
                budget_setting="data.chat.context_budget", head_size=head_size)


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
