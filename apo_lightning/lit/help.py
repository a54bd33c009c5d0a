"""A subcommand's ``--help``: with a config, each of its settings on one line (``--key value  help``); without one,
the configs to choose from. ``--help=full`` stays jsonargparse's help, with every Trainer flag.

The parser prints it from its own ``--help`` (``lit.parser.APOArgumentParser.format_help``, argparse's public hook),
inside :func:`settings_help_of`, which carries the config the command line chose.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import yaml
from jsonargparse import SUPPRESS, ArgumentParser, Namespace

#: the config and the command of the settings help asked for, inside :func:`settings_help_of`
_REQUEST: ContextVar[tuple[Namespace | None, str] | None] = ContextVar("settings_help_request", default=None)


def program_name() -> str:
    """How this command line was typed: ``python cli.py`` or the installed ``apo-lightning``."""
    name = Path(sys.argv[0]).name
    return f"python {name}" if name.endswith(".py") else name


def argument_helps(parser) -> dict[str, str]:
    """The help of each argument of ``parser`` as one line, by its key (``trainer.max_steps``); arguments whose help
    is suppressed, and the ``--KEY.help`` options of class settings, are left out."""
    # The one private attribute the command line reads: argparse keeps a parser's arguments in ``_actions`` and has
    # no public way to list them or read their help (only ``get_default(dest)``; accessors are open requests,
    # python/cpython#125363 and #144932), and jsonargparse, built on it, adds none.
    return {action.dest: _one_line(action.help) for action in parser._actions
            if action.dest and not action.dest.endswith(".help") and action.help != SUPPRESS}


def class_settings(class_path: str, key: str) -> tuple[dict[str, str], set[str]]:
    """The settings of the class ``class_path`` as they appear under ``key``: the help line of each (its docstring's
    ``Args:``), and the keys that hold a single value (not a group of nested settings). A class jsonargparse cannot
    describe has neither."""
    module, _, name = class_path.rpartition(".")
    parser = ArgumentParser(exit_on_error=False)
    try:
        parser.add_class_arguments(getattr(importlib.import_module(module), name), key, fail_untyped=False)
        values = parser.get_defaults()
    except Exception:  # a class jsonargparse cannot describe: its settings are listed without help
        return {}, set()
    return argument_helps(parser), _single_values(values)


def _single_values(values: Namespace, prefix: str = "") -> set[str]:
    """The keys under ``values`` that hold one value: a class setting (its ``class_path`` and ``init_args``) is one;
    a group of nested settings is not, its settings are."""
    keys = set()
    for name, value in values.items(branches=True, nested=False):
        if isinstance(value, Namespace) and "class_path" not in value:
            keys |= _single_values(value, f"{prefix}{name}.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


@contextmanager
def settings_help_of(config: Namespace | None, command: str) -> Iterator[None]:
    """Inside, a parser's help is :func:`settings_help` of ``config`` (None: no config was given) and ``command``."""
    token = _REQUEST.set((config, command))
    try:
        yield
    finally:
        _REQUEST.reset(token)


def requested_settings_help(parser) -> str | None:
    """:func:`settings_help` of ``parser`` inside :func:`settings_help_of`, else None (the parser's own help)."""
    request = _REQUEST.get()
    return None if request is None else settings_help(parser, *request)


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
    helps = argument_helps(parser)
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


def _class_rows(value: dict, key: str) -> list[tuple[str, str, str]]:
    """``(--key, value, help)`` rows of a class setting (``class_path`` and ``init_args``) and its nested settings."""
    helps, leaves = class_settings(value["class_path"], key)
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
