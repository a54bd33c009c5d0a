"""The command line's parser: Lightning's, through jsonargparse's public hooks, with a ``--help`` that lists a config's
settings one line each (``lit.help``), errors that lead with the setting (``lit.errors``), and a ``trainer.precision``
that also takes ``auto`` (``lit.precision``)."""

from __future__ import annotations

import os
import sys

from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser

from .errors import explain_parse_error
from .help import program_name, requested_settings_help
from .precision import PRECISION_SETTING


class APOArgumentParser(LightningArgumentParser):
    """Lightning's parser whose errors lead with the problem (:func:`~lit.errors.explain_parse_error`) and a pointer
    to the help, instead of 50 lines of usage first; whose help is the settings list that ``settings_help_of``
    asks for; whose ``trainer.precision`` also takes ``auto``; and which never takes a prefix of an option for the
    option (argparse's ``allow_abbrev``): ``--trainer.max_step 1`` is refused, not read as ``--trainer.max_steps``."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def add_class_arguments(self, class_type, nested_key=None, *args, skip=None, **kwargs) -> list[str]:
        """jsonargparse's, except that a Trainer's ``precision`` is :data:`~lit.precision.PRECISION_SETTING`,
        validated as such from a config file, the command line and ``--print_config`` alike; the CLI's
        ``before_instantiate_classes`` resolves ``auto`` before the Trainer sees it."""
        if not (isinstance(class_type, type) and issubclass(class_type, Trainer)):
            return super().add_class_arguments(class_type, nested_key, *args, skip=skip, **kwargs)
        added = super().add_class_arguments(class_type, nested_key, *args, skip={*(skip or ()), "precision"},
                                            **kwargs)
        key = f"{nested_key}.precision" if nested_key else "precision"
        self.groups.get(nested_key, self).add_argument(  # the Trainer's group: its place in --help=full
            f"--{key}", type=PRECISION_SETTING, default=None,
            help="Double precision (64, '64' or '64-true'), full precision (32, '32' or '32-true'), 16bit mixed "
                 "precision (16, '16', '16-mixed'), bfloat16 mixed precision ('bf16', 'bf16-mixed'), or 'auto': "
                 "bf16-mixed on a GPU or on a CPU with AMX/AVX512-BF16, else 32-true (lit.precision.auto_precision). "
                 "Default: '32-true'.")
        return [*added, key]

    def format_help(self, *args, **kwargs) -> str:
        """Inside ``lit.help.settings_help_of`` (a subcommand's ``-h``/``--help``), the config's settings one line
        each; elsewhere (``--help=full``, the program's own ``--help``) jsonargparse's help."""
        text = requested_settings_help(self)
        return super().format_help(*args, **kwargs) if text is None else text + "\n"  # print_help adds none

    def error(self, message: str, ex: Exception | None = None):
        """The error as one line (:func:`~lit.errors.explain_parse_error`) and where the settings are listed, on
        stderr, and exit status 2; jsonargparse's own error where it raises instead of exiting (``exit_on_error``
        off, or ``JSONARGPARSE_DEBUG`` set)."""
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        subcommand = self.prog.replace(" [options]", "").split(" ")[1:]
        command = f"{program_name()} {subcommand[0] if subcommand else 'fit'}"
        options = ()
        if message.startswith("unrecognized arguments"):  # explain_parse_error suggests the nearest known --KEY
            options = [f"--{key}" for key in self.get_defaults().keys()]
        sys.stderr.write(f"error: {explain_parse_error(message, options)}\n"
                         f"(the settings, one line each: {command} --config CONFIG --help)\n")
        sys.exit(2)
