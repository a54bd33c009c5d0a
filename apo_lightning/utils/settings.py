"""The one way a setting is checked: ``check_settings``, called by every settings class when it is built."""

from __future__ import annotations

from typing import Any, Iterable


def check_settings(prefix: str, rules: Iterable[tuple[str, Any, bool, str]], error: type[Exception] = ValueError
                   ) -> None:
    """Raise ``error`` for the first rule ``(setting, value, ok, allowed)`` whose ``ok`` is False, as
    ``"{prefix}{setting} must be {allowed}, got {value}"`` (e.g. ``rollout.temperature must be > 0, got 0``): a
    float shown with ``:g``, a string quoted. ``prefix`` is the settings' key in a config, relative to the data or
    model class that holds them (``chat.``, ``vstar.``); the command line puts ``data.`` or ``model.`` before it.

    Raises:
        ``error`` (ValueError unless said): as above.
    """
    for name, value, ok, allowed in rules:
        if not ok:
            shown = f"{value:g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else value
            raise error(f"{prefix}{name} must be {allowed}, got {shown}")
