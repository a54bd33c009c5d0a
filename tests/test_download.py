"""``python -m apo_lightning.webshop download`` against a local HTTP server on 127.0.0.1 (never the internet).

The server serves copies of the shared data files under the names the download expects, counts every request,
honours ``Range`` (unless told not to) and can corrupt, truncate or cut off a file.
"""

import gzip
import io
import json
import os
import re
import socket
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apo_lightning.webshop import __main__ as cli
from apo_lightning.webshop import download as dl

INS, SHUFFLE, HUMAN = "items_ins_v2_1000.json", "items_shuffle_1000.json", "items_human_ins.json"
#: served name -> file in the shared folder (the original product file is not there: its reconstruction stands in)
SHARED_COPIES = {INS: INS, SHUFFLE: "items_shuffle_1000.reconstructed.json", HUMAN: "items_human_ins.subset_1000.json"}


class FileServer:
    """A threaded HTTP server for ``files`` (URL path -> bytes) that records ``(path, range, bytes sent)``."""

    def __init__(self, files):
        self.files = dict(files)
        self.requests = []
        self.cut_after = {}  # path -> bytes to send before closing the connection (Content-Length stays full)
        self.honour_range = True
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                body = server.files.get(self.path)
                range_header = self.headers.get("Range")
                if body is None:
                    server.requests.append((self.path, range_header, 0))
                    self.send_error(404)
                    return
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
                if match and server.honour_range:
                    start = int(match.group(1))
                    if start >= len(body):
                        server.requests.append((self.path, range_header, 0))
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                payload = body[start:]
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                sent = payload[: server.cut_after.get(self.path, len(payload))]
                # recorded before the body goes out: a client that has read it all may check the log at once
                server.requests.append((self.path, range_header, len(sent)))
                self.wfile.write(sent)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def originals(real_data_dir):
    """served name -> the shared file's bytes"""
    return {name: (real_data_dir / source).read_bytes() for name, source in SHARED_COPIES.items()}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory, originals):
    """A manifest of the served copies (the built-in one holds the originals' hashes, which the copies lack)."""
    folder = tmp_path_factory.mktemp("copies")
    table = {}
    for name, data in originals.items():
        (folder / name).write_bytes(data)
        size, sha256, blob = dl.file_digests(folder / name)
        table[name] = dl.FileSpec(name, size, sha256, blob)
    return table


@pytest.fixture
def server(originals):
    srv = FileServer({f"/{name}": data for name, data in originals.items()})
    yield srv
    srv.close()


def fetch(dest, urls, manifest, **kwargs):
    return dl.download(dest, urls=urls, use_default_mirrors=False, manifest=manifest, progress=False, **kwargs)


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(dl.PART_SUFFIX))


# ------------------------------------------------------------------------------------------------ the table
def test_built_in_table_reproduces_source_md(real_data_dir):
    """Sizes, git blob ids and SHA-256 values of the three originals, as SOURCE.md's first table gives them."""
    text = (real_data_dir / "SOURCE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (items_\S+\.json) \| ([\d,]+) \| ([0-9a-f]{40}) \| ([0-9a-f]{64})", text, re.MULTILINE)
    assert {name for name, *_ in rows} == set(dl.MANIFEST) == {INS, SHUFFLE, HUMAN}
    for name, size, blob, sha256 in rows:
        assert dl.MANIFEST[name] == dl.FileSpec(name, int(size.replace(",", "")), sha256, blob,
                                                dl.MANIFEST[name].note)
    # the one original the shared folder holds verifies against the built-in entry, both hashes included
    dl.verify_file(real_data_dir / INS, dl.MANIFEST[INS])


def test_verify_file_checks_size_sha256_and_git_blob(tmp_path):
    path = tmp_path / "f.json"
    path.write_bytes(b"hello\n")
    size, sha256, blob = dl.file_digests(path)
    assert (size, blob) == (6, "ce013625030ba8dba906f756967f9e9ca394464a")  # `git hash-object` of "hello\n"
    dl.verify_file(path, dl.FileSpec("f.json", 6, sha256, blob))
    for wrong in (dl.FileSpec("f.json", 7, sha256), dl.FileSpec("f.json", 6, "0" * 64),
                  dl.FileSpec("f.json", 6, git_blob="0" * 40)):
        with pytest.raises(dl.VerificationError, match="f.json"):
            dl.verify_file(path, wrong)


# ------------------------------------------------------------------------------------------------ downloading
def test_download_verifies_and_installs(tmp_path, server, manifest, originals):
    outcomes = fetch(tmp_path / "webshop_1k", [server.url], manifest)
    assert [(o.name, o.action, o.source) for o in outcomes] == [
        (name, "downloaded", server.url + name) for name in manifest]
    for name, data in originals.items():
        assert (tmp_path / "webshop_1k" / name).read_bytes() == data
    assert leftovers(tmp_path / "webshop_1k") == []
    assert sorted(path for path, _, _ in server.requests) == sorted(f"/{name}" for name in manifest)


def identities(folder):
    """name -> (inode, mtime) of every file in ``folder``: what an install (a rename over the file) changes."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}


def test_second_run_downloads_nothing(tmp_path, server, manifest):
    fetch(tmp_path, [server.url], manifest)
    assert len(server.requests) == len(manifest)  # the server sees each download, so a second run's would show
    for path in tmp_path.iterdir():
        os.utime(path, ns=(10**18, 10**18))  # a stamp from 2001: any write from now on changes it
    installed = identities(tmp_path)
    server.requests.clear()
    outcomes = fetch(tmp_path, [server.url], manifest)
    assert [o.action for o in outcomes] == ["present"] * len(manifest)
    assert server.requests == []  # not one HTTP request
    assert identities(tmp_path) == installed  # and not one file rewritten ...
    (tmp_path / INS).write_bytes((tmp_path / INS).read_bytes())
    assert identities(tmp_path)[INS] != installed[INS]  # ... which even a rewrite of the same bytes would show


@pytest.mark.parametrize("damage", ["one_byte_changed", "truncated"])
def test_corrupt_download_is_refused(tmp_path, server, manifest, damage):
    data = server.files[f"/{SHUFFLE}"]
    if damage == "one_byte_changed":
        middle = len(data) // 2
        server.files[f"/{SHUFFLE}"] = data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:]
    else:
        server.files[f"/{SHUFFLE}"] = data[: len(data) - 1000]
    with pytest.raises(dl.DownloadError) as failure:
        fetch(tmp_path, [server.url], manifest)
    message = str(failure.value)
    assert SHUFFLE in message and manifest[SHUFFLE].sha256 in message  # names the file and the expected hash
    assert not (tmp_path / SHUFFLE).exists()  # nothing under the final name ...
    assert leftovers(tmp_path) == []  # ... and no half file beside it
    assert (tmp_path / INS).is_file()  # the good files are installed


def test_cut_connection_keeps_the_part_and_the_next_run_resumes(tmp_path, server, manifest, originals):
    server.cut_after[f"/{SHUFFLE}"] = 1_000_000
    with pytest.raises(dl.DownloadError, match="connection closed"):
        fetch(tmp_path, [server.url], manifest)
    part = tmp_path / f".{SHUFFLE}{dl.PART_SUFFIX}"
    assert part.stat().st_size == 1_000_000
    assert not (tmp_path / SHUFFLE).exists()

    server.cut_after.clear()
    server.requests.clear()
    outcomes = fetch(tmp_path, [server.url], manifest)
    assert {o.name: o.action for o in outcomes} == {INS: "present", SHUFFLE: "downloaded", HUMAN: "present"}
    assert server.requests == [(f"/{SHUFFLE}", "bytes=1000000-", len(originals[SHUFFLE]) - 1_000_000)]
    assert (tmp_path / SHUFFLE).read_bytes() == originals[SHUFFLE]
    assert leftovers(tmp_path) == []


def test_stale_part_that_does_not_verify_is_fetched_again(tmp_path, server, manifest, originals):
    (tmp_path / f".{INS}{dl.PART_SUFFIX}").write_bytes(b"x" * 5000)  # not a prefix of the file
    fetch(tmp_path, [server.url], manifest, files=[INS])
    size = len(originals[INS])
    assert server.requests == [(f"/{INS}", "bytes=5000-", size - 5000), (f"/{INS}", None, size)]
    assert (tmp_path / INS).read_bytes() == originals[INS]
    assert leftovers(tmp_path) == []


def test_server_ignoring_range_restarts_from_zero(tmp_path, server, manifest, originals):
    server.honour_range = False
    (tmp_path / f".{INS}{dl.PART_SUFFIX}").write_bytes(originals[INS][:5000])
    fetch(tmp_path, [server.url], manifest, files=[INS])
    assert server.requests == [(f"/{INS}", "bytes=5000-", len(originals[INS]))]
    assert (tmp_path / INS).read_bytes() == originals[INS]


def test_next_mirror_is_tried_after_a_failure(tmp_path, server, manifest):
    server.files["/bad/" + INS] = b"not the file"
    outcomes = fetch(tmp_path, [server.url + "missing/", server.url + "bad/", server.url], manifest, files=[INS])
    assert outcomes[0].source == server.url + INS
    assert [path for path, _, _ in server.requests] == ["/missing/" + INS, "/bad/" + INS, "/" + INS]


def test_archive_mirror(tmp_path, server, manifest, originals):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in originals.items():
            info = tarfile.TarInfo(f"data/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    server.files["/raw/webshop-small.tar.gz"] = buffer.getvalue()
    outcomes = fetch(tmp_path, [server.url + "raw/webshop-small.tar.gz"], manifest)
    assert [o.action for o in outcomes] == ["downloaded"] * 3
    assert all(o.source.endswith(f"(member data/{o.name})") for o in outcomes)
    for name, data in originals.items():
        assert (tmp_path / name).read_bytes() == data
    assert [path for path, _, _ in server.requests] == ["/raw/webshop-small.tar.gz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(originals)  # the archive is gone


def test_local_folder_as_mirror(tmp_path, manifest, originals):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / INS).write_bytes(originals[INS])
    outcomes = fetch(tmp_path / "dest", [str(mirror)], manifest, files=[INS])
    assert outcomes[0].source == (mirror / INS).as_uri()
    assert (tmp_path / "dest" / INS).read_bytes() == originals[INS]


# ------------------------------------------------------------------------------------------------ refusing
def unused_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_network_says_what_failed_and_what_to_do(tmp_path, manifest):
    url = f"http://127.0.0.1:{unused_port()}/"
    with pytest.raises(dl.DownloadError) as failure:
        fetch(tmp_path, [url], manifest, timeout=5)
    message = str(failure.value)
    for name, spec in manifest.items():
        assert f"* {name} (expected {spec.expected()})" in message
        assert f"{url}{name}: cannot connect" in message
    assert "--url" in message and f"put them in {tmp_path}" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_existing_wrong_file_is_an_error_unless_forced(tmp_path, server, manifest, originals):
    (tmp_path / INS).write_bytes(b"{}")
    with pytest.raises(dl.VerificationError, match=f"{INS}.*--force"):
        fetch(tmp_path, [server.url], manifest, files=[INS])
    assert server.requests == []
    assert (tmp_path / INS).read_bytes() == b"{}"  # left alone
    fetch(tmp_path, [server.url], manifest, files=[INS], force=True)
    assert (tmp_path / INS).read_bytes() == originals[INS]


def test_unknown_file_and_no_mirror_are_value_errors(tmp_path, manifest):
    with pytest.raises(ValueError, match="nothing.json"):
        fetch(tmp_path, ["http://127.0.0.1:1/"], manifest, files=["nothing.json"])
    with pytest.raises(ValueError, match="no mirror"):
        fetch(tmp_path, [], manifest)


# ------------------------------------------------------------------------------------------------ command line
def write_manifest(path, manifest):
    path.write_text(json.dumps({n: {"size": s.size, "sha256": s.sha256, "git_blob": s.git_blob}
                                for n, s in manifest.items()}))
    return path


def test_command_line(tmp_path, server, manifest, capsys):
    manifest_file = write_manifest(tmp_path / "manifest.json", manifest)
    dest = tmp_path / "webshop_1k"
    args = ["download", "--dest", str(dest), "--url", server.url, "--no-default-mirrors",
            "--manifest", str(manifest_file), "--quiet", "--no-human"]
    cli.main(args)
    out = capsys.readouterr().out
    assert f"{INS}: downloaded from {server.url}{INS} -> {dest / INS} (verified)" in out
    assert sorted(p.name for p in dest.iterdir()) == [INS, SHUFFLE]  # --no-human

    (dest / INS).unlink()
    server.files[f"/{INS}"] = gzip.compress(server.files[f"/{INS}"])  # the wrong bytes
    with pytest.raises(SystemExit) as exit_:
        cli.main(args)
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: 1 of 2 WebShop files could not be downloaded")
    assert manifest[INS].sha256 in err and "Traceback" not in err
    assert not (dest / INS).exists()

