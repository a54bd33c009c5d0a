"""A refused setting as one line that names it: jsonargparse's parse errors (:func:`explain_parse_error`, printed by
``lit.parser.APOArgumentParser.error``) and the exceptions a class raises for its settings (:class:`setting_errors`:
a ``SettingError``, which ``cli.main`` prints as ``error: data.batch_size must be >= 1, got 0``).
"""

from __future__ import annotations

import difflib
import re

from jsonargparse import Namespace

from ..apo.objectives import Objective
from .help import class_settings
from .settings import SettingError


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
        settings = class_settings(rejected["cls"], key)[1] if key else ()
        return f"{setting}: not a setting of {rejected['cls'].rsplit('.', 1)[-1]}{_did_you_mean(setting, settings)}"
    if unknown:
        return message.splitlines()[0] + _did_you_mean(unknown[1], [o for o in options if o.startswith("--")])
    boilerplate = ("Does not validate against", "Subtypes:", "Errors:", "Given value",
                   "- Expected a <class 'NoneType'>")
    kept = [re.sub(r'Parser key "[^"]+":\s*', "", line.strip()).removeprefix("- ") for line in message.splitlines()
            if not line.strip().startswith(boilerplate)]
    rest = " ".join(line for line in kept if line)
    return f"{key}: {rest}" if key else rest


def _did_you_mean(word: str, candidates) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


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


def _raised_in_jsonargparse(error: BaseException) -> bool:
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and frame.tb_frame.f_globals.get("__name__", "").startswith("jsonargparse")
