"""Where the WebShop data is read from: one rule for every command.

1. ``--data-dir`` when it is given (the word ``synthetic`` asks for the synthetic catalog);
2. else the environment variable ``APO_WEBSHOP_DATA`` when it is set and not empty;
3. else ``data/webshop_1k`` in the current directory when that folder exists (where
   ``python -m apo_lightning.webshop download`` puts the files by default);
4. else nothing: the generated synthetic catalog.

Commands print the description :func:`resolve_data_dir` returns at start, so a user always sees which data a run
used and why.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

#: The environment variable that names the data directory when ``--data-dir`` is not given.
ENV_VAR = "APO_WEBSHOP_DATA"
#: The default download destination, looked up relative to the current directory.
DEFAULT_DATA_DIR = Path("data") / "webshop_1k"
DOWNLOAD_HINT = "python -m apo_lightning.webshop download"
#: The ``--data-dir`` / ``data_dir`` value that asks for the generated synthetic catalog whatever the rule finds.
SYNTHETIC = "synthetic"


def resolve_data_dir(
    explicit: str | os.PathLike | None,
    environ: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
) -> tuple[Path | None, str]:
    """Apply the data-location rule (module docstring) and say where the choice came from.

    Args:
        explicit: the ``--data-dir`` value, or None when the option was not given. An empty string counts as not
            given; ``"synthetic"`` chooses the synthetic catalog.
        environ: the environment to read ``APO_WEBSHOP_DATA`` from (default ``os.environ``).
        cwd: the folder ``data/webshop_1k`` is looked up in (default the current directory).

    Returns:
        ``(data_dir, description)``: the folder (``~`` expanded; the ``data/webshop_1k`` case as an absolute path),
        or None for the synthetic catalog; and one line for a human, e.g.
        ``"WebShop data: /x/data/webshop_1k (found data/webshop_1k in the current directory)"``.

    Nothing is checked beyond the existence of ``data/webshop_1k``: a folder named by ``--data-dir`` or the
    environment variable is the user's choice, and loading it raises ``WebShopDataError`` (naming the missing
    file) when it is wrong. This function raises nothing.
    """
    environ = os.environ if environ is None else environ
    if explicit is not None and str(explicit) == SYNTHETIC:
        return None, "WebShop data: the synthetic catalog (asked for by name)"
    if explicit is not None and str(explicit) != "":
        path = Path(explicit).expanduser()
        return path, f"WebShop data: {path} (--data-dir)"
    from_env = environ.get(ENV_VAR, "")
    if from_env:
        path = Path(from_env).expanduser()
        return path, f"WebShop data: {path} (from ${ENV_VAR})"
    default = Path(cwd if cwd is not None else Path.cwd()) / DEFAULT_DATA_DIR
    if default.is_dir():
        path = default.absolute()
        return path, f"WebShop data: {path} (found {DEFAULT_DATA_DIR} in the current directory)"
    return None, (f"WebShop data: the synthetic catalog (no --data-dir, ${ENV_VAR} unset, no {DEFAULT_DATA_DIR} "
                  f"here; `{DOWNLOAD_HINT}` fetches the real 1k set)")
