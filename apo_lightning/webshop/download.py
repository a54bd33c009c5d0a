"""Fetch and verify the WebShop 1k data files: ``python -m apo_lightning.webshop download``.

The real 1k setting reads three files (WebShop's ``setup.sh -d small`` fetches them from Google Drive, which needs
a sign-in today): ``items_shuffle_1000.json`` (the products), ``items_ins_v2_1000.json`` (attributes and synthetic
instructions) and, for human goals only, ``items_human_ins.json``. This module downloads them from public mirrors
and installs a file only when its size, SHA-256 and git blob id are those in :data:`MANIFEST` (docs/webshop.md,
"Getting the data").

How a file is fetched:

* A file already in the destination with the right size and hashes is kept; no request is made for it. A file
  there that does not match is an error (move it away, or pass ``force=True`` / ``--force`` to replace it).
* Mirrors are tried in order: the user's ``--url`` values, then :data:`DEFAULT_MIRRORS`. A :class:`Mirror` is a
  base URL under which the file names are looked up (``BASE/items_shuffle_1000.json``); an :class:`ArchiveMirror`
  is one ``.tar.gz`` holding the files (the Hugging Face mirror).
* Bytes go to a temporary file ``.NAME.part`` in the destination folder. Only after the size and hashes match is
  it moved to ``NAME`` with ``os.replace``, so a partial or corrupt download never sits under the final name. A
  download cut off by the network leaves its ``.part`` behind and the next run resumes it with an HTTP ``Range``
  request; a server that ignores the range restarts it, and a resumed file that fails verification is fetched
  again from the start. A complete download with the wrong size or hash is deleted.
* When every mirror fails, :class:`DownloadError` names the file, the expected size and hashes, each URL tried
  with its error, and what to do (``--url``, or placing the file by hand).

Nothing in the package downloads anything except through this explicit command.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import logging
import os
import sys
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Mapping, Sequence

from tqdm import tqdm

from .datadir import DEFAULT_DATA_DIR

log = logging.getLogger(__name__)

USER_AGENT = "apo_lightning-webshop-download/1"
CHUNK_BYTES = 1 << 16
PART_SUFFIX = ".part"
DOWNLOAD_COMMAND = "python -m apo_lightning.webshop download"


@dataclass(frozen=True)
class FileSpec:
    """What a verified file is: its name, size in bytes and at least one hash (lower-case hex).

    Attributes:
        name: the file name in the data directory and on the mirrors.
        size: exact size in bytes.
        sha256: SHA-256 of the bytes, or None to check only the git blob id.
        git_blob: git's blob id (``git hash-object``: SHA-1 of ``b"blob <size>\\0" + bytes``), or None.
        note: what the file is for (printed by ``--help``-style listings).
    """

    name: str
    size: int
    sha256: str | None = None
    git_blob: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.sha256 is None and self.git_blob is None:
            raise ValueError(f"{self.name}: a file spec needs a sha256 or a git_blob to verify against")
        if self.size < 0:
            raise ValueError(f"{self.name}: size must be >= 0, got {self.size}")

    def expected(self) -> str:
        """The expected size and hashes as one phrase, for messages."""
        parts = [f"{self.size:,} B"]
        if self.sha256:
            parts.append(f"sha256 {self.sha256}")
        if self.git_blob:
            parts.append(f"git blob {self.git_blob}")
        return ", ".join(parts)


#: The WebShop 1k files, as SOURCE.md lists them. The git blob ids come from the trees of AgentGym @ 3ef9235d and
#: webshop-minimal @ ec82552d (they agree); the SHA-256 values were published by a third party and agree with the
#: blob ids wherever the file could be checked here (items_ins_v2_1000.json).
MANIFEST: dict[str, FileSpec] = {
    spec.name: spec
    for spec in (
        FileSpec("items_shuffle_1000.json", 4_467_013,
                 sha256="30a4765c3a327af72d9a9a95a6b2486d516f0fa1d3ecd83681901ce82a21b269",
                 git_blob="08dfda9a1c896e0f69d50e3437dd3fe94419b7d7", note="the 1,000 products"),
        FileSpec("items_ins_v2_1000.json", 147_099,
                 sha256="f88a36314a397b53b3d9c3fa5878e5f7b26d35019a51ec83fbedeca61a948f6f",
                 git_blob="22837ad99f3173712fc9cb1cce7de6b75fe90595",
                 note="attributes and synthetic instructions"),
        FileSpec("items_human_ins.json", 5_137_548,
                 sha256="cf78667548a71786e1d9049c24b802e48e1084ad4bb021cae56ce1f6d96954a3",
                 git_blob="b2ab7479b9798e0b62ea394e065f3d506875f090",
                 note="human instructions (only --goals human reads it)"),
    )
}
#: The file only human goals need; ``--no-human`` leaves it out.
HUMAN_FILE = "items_human_ins.json"


@dataclass(frozen=True)
class Mirror:
    """Files under one base URL: ``base_url + paths.get(name, name)``.

    ``base_url`` may be ``http(s)://`` or ``file://``; a trailing ``/`` is added when missing.
    """

    label: str
    base_url: str
    paths: Mapping[str, str] = field(default_factory=dict)

    def url(self, name: str) -> str:
        """The URL of file ``name`` on this mirror."""
        base = self.base_url if self.base_url.endswith("/") else self.base_url + "/"
        return base + self.paths.get(name, name)


@dataclass(frozen=True)
class ArchiveMirror:
    """One ``.tar.gz`` (or ``.tar``) holding the files; a member matches a file when its base name is the file's.

    The archive is downloaded whole into the destination folder (at most ``max_bytes``), the wanted members are
    extracted to temporary files and verified like any download, and the archive is deleted.
    """

    label: str
    url: str
    max_bytes: int = 64 << 20


AGENTGYM_COMMIT = "3ef9235d23e68e7c2920c5422ad957dc8ced5c6c"
WEBSHOP_MINIMAL_COMMIT = "ec82552d2458efb486701b138c9d038e1759489c"
#: Public copies of the files (SOURCE.md). Git-pinned raw URLs first: their bytes cannot change. The Hugging Face
#: archive (2,142,159 B, sha256 37261e08…, holding data/items_*.json, by a third party's note) has all three in one
#: request.
DEFAULT_MIRRORS: tuple[Mirror | ArchiveMirror, ...] = (
    Mirror("GitHub WooooDyy/AgentGym",
           f"https://raw.githubusercontent.com/WooooDyy/AgentGym/{AGENTGYM_COMMIT}/agentenv-webshop/webshop/data/"),
    Mirror("GitHub ZihanWang314/webshop-minimal",
           "https://raw.githubusercontent.com/ZihanWang314/webshop-minimal/"
           f"{WEBSHOP_MINIMAL_COMMIT}/webshop_minimal/data/",
           paths={"items_shuffle_1000.json": "small/items_shuffle_1000.json",
                  "items_ins_v2_1000.json": "small/items_ins_v2_1000.json"}),
    ArchiveMirror("Hugging Face zhangdw/webshop",
                  "https://huggingface.co/datasets/zhangdw/webshop/resolve/main/raw/webshop-small.tar.gz"),
)


class DownloadError(RuntimeError):
    """A file could not be fetched or verified. The message names the file, what was expected and what to do."""


class VerificationError(DownloadError):
    """A file's size or hash is not the expected one."""


@dataclass(frozen=True)
class Outcome:
    """What ``download`` did for one file: ``action`` is "present" (already verified there) or "downloaded"."""

    name: str
    path: Path
    action: str
    source: str | None = None


# ------------------------------------------------------------------------------------------------ verification
def file_digests(path: str | os.PathLike) -> tuple[int, str, str]:
    """``(size in bytes, sha256 hex, git blob id hex)`` of a file, read once in 64 KiB chunks.

    Raises:
        OSError: the file cannot be read.
    """
    size = os.path.getsize(path)
    sha256, blob = hashlib.sha256(), hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            sha256.update(chunk)
            blob.update(chunk)
    return size, sha256.hexdigest(), blob.hexdigest()


def verify_file(path: str | os.PathLike, spec: FileSpec, what: str | None = None) -> None:
    """Check a file's size and hashes against ``spec``.

    Args:
        path: the file to check.
        spec: the expected size and hashes.
        what: how to name the file in the message (default: ``spec.name`` and ``path``).

    Raises:
        VerificationError: the size, the SHA-256 or the git blob id differs; the message names the file and gives
            the expected and the found values.
    """
    size, sha256, blob = file_digests(path)
    what = what or f"{spec.name} ({path})"
    if size != spec.size:
        raise VerificationError(f"{what}: {size:,} B, expected {spec.expected()}")
    if spec.sha256 is not None and sha256 != spec.sha256.lower():
        raise VerificationError(f"{what}: sha256 {sha256}, expected {spec.expected()}")
    if spec.git_blob is not None and blob != spec.git_blob.lower():
        raise VerificationError(f"{what}: git blob {blob}, expected {spec.expected()}")


def load_manifest(path: str | os.PathLike) -> dict[str, FileSpec]:
    """Read a manifest file ``{name: {"size": int, "sha256": hex, "git_blob": hex}}`` (either hash may be absent).

    Raises:
        ValueError: the file is not such a JSON object; the message names it.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or not data:
            raise TypeError("the top level must be a non-empty object")
        return {name: FileSpec(name, int(entry["size"]), entry.get("sha256"), entry.get("git_blob"))
                for name, entry in data.items()}
    except (OSError, json.JSONDecodeError, TypeError, KeyError, ValueError) as e:
        raise ValueError(f'{path}: expected a JSON object {{name: {{"size": bytes, "sha256": hex, "git_blob": hex}}}} '
                         f"({e})") from e


# ------------------------------------------------------------------------------------------------ fetching
def mirror_from_url(url: str) -> Mirror | ArchiveMirror:
    """A mirror for a ``--url`` value: a URL ending in ``.tar.gz``/``.tgz``/``.tar`` is an archive, an existing
    local folder becomes a ``file://`` base, anything else is a base URL."""
    if url.endswith((".tar.gz", ".tgz", ".tar")):
        if os.path.isfile(url):
            url = Path(url).resolve().as_uri()
        return ArchiveMirror(url, url)
    if os.path.isdir(url):
        url = Path(url).resolve().as_uri()
    return Mirror(url, url)


def _open(url: str, timeout: float, offset: int = 0):
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)


def _copy(source: BinaryIO, target: BinaryIO, limit: int, total: int | None, initial: int, desc: str,
          progress: bool) -> int:
    """Copy ``source`` into ``target`` with a progress bar; returns the bytes written.

    Raises:
        VerificationError: more than ``limit`` bytes arrive (the caller deletes the file).
        ConnectionError: ``source`` is an HTTP response whose connection closed before its Content-Length was
            reached (``http.client`` reports that as a plain end of data when reading in chunks).
    """
    written = 0
    with tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024, desc=desc,
              file=sys.stderr, disable=not progress, leave=False) as bar:
        while chunk := source.read(CHUNK_BYTES):
            written += len(chunk)
            if written > limit:
                raise VerificationError(f"{desc}: the server sent more than the expected {limit:,} B")
            target.write(chunk)
            bar.update(len(chunk))
        target.flush()
        os.fsync(target.fileno())
    missing = getattr(source, "length", None)  # http.client.HTTPResponse: bytes still owed, None if unknown
    if missing:
        raise ConnectionError(f"the connection closed after {written:,} B with {missing:,} B of the response "
                              "still to come; the partial file is kept and the next attempt resumes it")
    return written


def _fetch_file(url: str, part: Path, spec: FileSpec, timeout: float, progress: bool) -> None:
    """Bring ``part`` to the complete, verified bytes of ``spec`` from ``url``, resuming what is there.

    Raises:
        VerificationError: the complete file has the wrong size or hash (``part`` is deleted).
        urllib.error.URLError, http.client.HTTPException, OSError: the transfer failed (``part`` is kept, so that
            the next attempt resumes it).
    """
    for _attempt in range(2):
        offset = part.stat().st_size if part.exists() else 0
        if offset > spec.size:  # not a prefix of this file: start again
            part.unlink()
            offset = 0
        if offset < spec.size or spec.size == 0:
            try:
                response = _open(url, timeout, offset)
            except urllib.error.HTTPError as e:
                if e.code != 416 or not offset:  # 416: the range does not fit what the server has
                    raise
                part.unlink()
                continue
            with response:
                content_range = response.headers.get("Content-Range", "")
                resumed = offset > 0 and getattr(response, "status", None) == 206 and \
                    content_range.startswith(f"bytes {offset}-")
                if offset and not resumed:
                    log.info("%s: %s ignored the range request; downloading from the start", spec.name, url)
                start = offset if resumed else 0
                with open(part, "ab" if resumed else "wb") as f:
                    try:
                        _copy(response, f, spec.size - start, spec.size, start, spec.name, progress)
                    except VerificationError:
                        f.close()
                        part.unlink()
                        raise
            if resumed:
                log.info("%s: resumed at byte %d", spec.name, offset)
        try:
            verify_file(part, spec, f"{spec.name} from {url}")
            return
        except VerificationError:
            part.unlink()
            if offset == 0:
                raise
            log.info("%s: the resumed file does not verify; downloading it again from the start", spec.name)
    raise VerificationError(f"{spec.name} from {url}: no complete download after restarting; "
                            f"expected {spec.expected()}")


def _install(part: Path, final: Path) -> None:
    os.replace(part, final)
    with contextlib.suppress(OSError):  # make the rename durable where the platform allows it
        fd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _from_archive(mirror: ArchiveMirror, dest: Path, pending: dict[str, FileSpec], timeout: float, progress: bool,
                  errors: dict[str, list[str]], done: list[Outcome]) -> None:
    """Fetch ``mirror``'s archive once and install every pending file that it holds and that verifies."""
    archive = dest / f".{mirror.url.rstrip('/').rsplit('/', 1)[-1]}{PART_SUFFIX}"
    try:  # archives are not resumed: "wb" starts a leftover afresh
        try:
            with _open(mirror.url, timeout) as response, open(archive, "wb") as f:
                length = response.headers.get("Content-Length")
                _copy(response, f, mirror.max_bytes, int(length) if length else None, 0, archive.name[1:-5],
                      progress)
            with tarfile.open(archive, "r:*") as tar:
                members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
                for name, spec in list(pending.items()):
                    member = members.get(name)
                    if member is None:
                        errors[name].append(f"{mirror.url}: the archive has no member named {name}")
                        continue
                    part = dest / f".{name}{PART_SUFFIX}"
                    try:
                        with tar.extractfile(member) as source, open(part, "wb") as f:  # type: ignore[union-attr]
                            _copy(source, f, spec.size, spec.size, 0, name, progress)
                        verify_file(part, spec, f"{name} from {mirror.url}")
                    except VerificationError as e:
                        part.unlink(missing_ok=True)
                        errors[name].append(str(e))
                        continue
                    _install(part, dest / name)
                    done.append(Outcome(name, dest / name, "downloaded", f"{mirror.url} (member {member.name})"))
                    del pending[name]
        except (urllib.error.URLError, http.client.HTTPException, OSError, tarfile.TarError,
                VerificationError) as e:
            for name in pending:
                errors[name].append(f"{mirror.url}: {_reason(e)}")
    finally:
        archive.unlink(missing_ok=True)


def _reason(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return f"cannot connect ({error.reason})"
    return f"{type(error).__name__}: {error}"


def download(
    dest: str | os.PathLike = DEFAULT_DATA_DIR,
    files: Sequence[str] | None = None,
    urls: Sequence[str] = (),
    use_default_mirrors: bool = True,
    manifest: Mapping[str, FileSpec] | None = None,
    force: bool = False,
    timeout: float = 60.0,
    progress: bool = True,
) -> list[Outcome]:
    """Fetch, verify and install WebShop data files into ``dest`` (the rules are in the module docstring).

    Args:
        dest: the data directory (created when missing).
        files: the names to fetch (default: every file of the manifest, in its order).
        urls: the user's mirrors, tried first: base URLs, local folders or ``.tar.gz`` archive URLs.
        use_default_mirrors: also try :data:`DEFAULT_MIRRORS` (after ``urls``).
        manifest: name -> expected size and hashes (default :data:`MANIFEST`); tests pass their own.
        force: replace a file already in ``dest`` whose size or hash is wrong (default: that is an error).
        timeout: seconds a connection may stay silent.
        progress: show a tqdm progress bar per transfer (on stderr).

    Returns:
        One :class:`Outcome` per file, in ``files`` order.

    Raises:
        ValueError: no mirror to try, or a name in ``files`` that the manifest does not have.
        VerificationError: a file already in ``dest`` does not match and ``force`` is False (nothing is
            downloaded then).
        DownloadError: some files could not be fetched from any mirror; the files that could are installed, and
            the message names each missing file, every URL tried with its error, and what to do.
    """
    manifest = MANIFEST if manifest is None else manifest
    names = list(manifest) if files is None else list(files)
    unknown = [n for n in names if n not in manifest]
    if unknown:
        raise ValueError(f"no expected size/hash for {unknown}; known files: {', '.join(manifest)}")
    mirrors = [mirror_from_url(u) for u in urls] + (list(DEFAULT_MIRRORS) if use_default_mirrors else [])
    if not mirrors:
        raise ValueError("no mirror to download from: pass --url BASE_URL or allow the default mirrors")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)

    done: list[Outcome] = []
    pending: dict[str, FileSpec] = {}
    for name in names:
        spec, final = manifest[name], dest / name
        if final.exists():
            try:
                verify_file(final, spec)
                log.info("%s: already present and verified (%s)", name, final)
                done.append(Outcome(name, final, "present"))
                continue
            except VerificationError as e:
                if not force:
                    raise VerificationError(f"{e}. It was not put there by this command: move it away, or rerun "
                                            "with --force to replace it with a verified download.") from None
                log.info("%s: does not verify; replacing it (--force)", final)
        pending[name] = spec

    errors: dict[str, list[str]] = {name: [] for name in pending}
    for mirror in mirrors:
        if not pending:
            break
        if isinstance(mirror, ArchiveMirror):
            log.info("trying %s for %s", mirror.url, ", ".join(pending))
            _from_archive(mirror, dest, pending, timeout, progress, errors, done)
            continue
        for name, spec in list(pending.items()):
            url = mirror.url(name)
            log.info("%s: trying %s", name, url)
            try:
                _fetch_file(url, dest / f".{name}{PART_SUFFIX}", spec, timeout, progress)
            except (urllib.error.URLError, http.client.HTTPException, OSError, VerificationError) as e:
                errors[name].append(f"{url}: {e}" if isinstance(e, VerificationError) else f"{url}: {_reason(e)}")
                log.info("%s: %s", name, errors[name][-1])
                continue
            _install(dest / f".{name}{PART_SUFFIX}", dest / name)
            done.append(Outcome(name, dest / name, "downloaded", url))
            del pending[name]

    if pending:
        raise DownloadError(_failure_message(dest, pending, errors, installed=len(names) - len(pending),
                                             wanted=len(names)))
    return sorted(done, key=lambda o: names.index(o.name))


def _failure_message(dest: Path, pending: Mapping[str, FileSpec], errors: Mapping[str, list[str]], installed: int,
                     wanted: int) -> str:
    lines = [f"{len(pending)} of {wanted} WebShop files could not be downloaded into {dest} "
             f"({installed} present or installed):"]
    for name, spec in pending.items():
        lines.append(f"* {name} (expected {spec.expected()}). Tried:")
        lines += [f"    - {error}" for error in errors[name]]
    example = next(iter(pending))
    lines += [
        "What to do: check the network connection or proxy (HTTPS_PROXY) and rerun the same command (a download "
        "that was cut off is resumed); or rerun it with --url BASE_URL for a mirror where "
        f"BASE_URL/{example} can be fetched (a local folder or a .tar.gz archive works too); or download the "
        f"files by hand and put them in {dest} (e.g. {dest / example}): the next run verifies them against the "
        "sizes and hashes above.",
    ]
    return "\n".join(lines)
