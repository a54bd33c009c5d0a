"""Files: atomic writes, so a reader (another rank, a crashed run's successor) never sees half a file or half a
folder, and reading a JSON file with an error that names it.

One helper per kind of output: :func:`atomic_write` for a file (bytes, text or anything written through a file
object) and :func:`atomic_directory` for a folder built in one go (a model directory, a generated catalog).
:func:`read_json` reads any JSON file of the package.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import IO, Any, Iterator

_UMASK = os.umask(0o022)  # read once, at import, before any thread could create files meanwhile
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; on success it is fsynced and moved over ``path``.

    On any exception the temporary file is removed and ``path`` is left as it was. The file gets the permissions
    of the file it replaces, else the usual ``0666 & ~umask`` (``mkstemp`` alone would give ``0600``). The parent
    folder is created if needed.

    Args:
        path: the final file.
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        encoding: text encoding (ignored for ``"wb"``).

    Yields:
        The open file object.

    Raises:
        ValueError: ``mode`` is not ``"w"`` or ``"wb"``.
        OSError: the folder cannot be created or written.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes new files only: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_UMASK)
        kwargs = {} if mode == "wb" else {"encoding": encoding, "newline": ""}
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "w") as f:
        f.write(text)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, replace: bool = True) -> Iterator[Path]:
    """Build a folder in a temporary sibling and rename it to ``path`` when the block succeeds.

    With ``replace``, an existing ``path`` is moved aside first and deleted after the rename, so ``path`` is at
    every moment either the old folder or the new one. Without it, when another process installed ``path`` first
    (two DDP ranks building the same thing), the finished temporary folder is dropped and theirs is kept. On an
    exception nothing is installed and the temporary folder is deleted.

    Yields:
        The temporary folder to write into (permissions as ``mkdir`` would give, not ``mkdtemp``'s 0700).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    tmp.chmod(0o777 & ~_UMASK)
    try:
        yield tmp
        for item in tmp.iterdir():  # safetensors writes 0600; a shared cache is readable as usual
            if item.is_file():
                item.chmod(0o666 & ~_UMASK)
        old = None
        if replace and path.exists():
            old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
            os.rename(path, old)
        try:
            os.rename(tmp, path)  # atomic on one filesystem; also fine onto an empty folder
        except OSError:
            if replace or not path.exists():
                raise
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_json(path: str | os.PathLike, expected: type | tuple[type, ...] = object, what: str = "JSON",
              error: type[ValueError] = ValueError) -> Any:
    """The content of the UTF-8 JSON file ``path``, whose top level must be an instance of ``expected``.

    A caller for which a missing file is normal checks ``path.is_file()`` first.

    Args:
        path: the file.
        expected: the allowed type(s) of the top level, e.g. ``dict`` or ``list``; ``object`` allows any.
        what: what the file should hold, for the error message (``"a JSON object {asin: [nouns]}"``).
        error: the ``ValueError`` subclass to raise for an unreadable or malformed file (e.g. the data layer's
            ``WebShopDataError``).

    Raises:
        FileNotFoundError: ``path`` does not exist (the message names it).
        error: ``path`` cannot be read, is not UTF-8 JSON, or its top level is not ``expected``; the message names
            the file and ``what`` was expected.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path}: cannot read it as JSON ({e}); expected {what}") from e
    if not isinstance(data, expected):
        raise error(f"{path}: top level is a {type(data).__name__}; expected {what}")
    return data
