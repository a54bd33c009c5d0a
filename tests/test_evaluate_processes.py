"""``evaluate --processes``: the same episodes as one process, and no worker outlives a killed command."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from apo_lightning.eval.__main__ import main

REPO_ROOT = Path(__file__).resolve().parents[1]
POLICY = str(REPO_ROOT / "models" / "quickstart-ref")


def test_two_processes_give_the_episodes_of_one(tmp_path, capsys):
    common = ["evaluate", "--model", POLICY, "--data-dir", "synthetic", "--split", "test", "--limit", "6",
              "--batch-size", "2", "--max-steps", "5"]
    main(common + ["--results-dir", str(tmp_path / "one")])
    main(common + ["--processes", "2", "--results-dir", str(tmp_path / "two")])
    capsys.readouterr()
    one, two = ((tmp_path / name / "episodes.jsonl").read_text().splitlines() for name in ("one", "two"))
    assert len(one) == 6 and one == two


def children(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is ``pid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_killing_evaluate_ends_its_workers():
    # all synthetic test goals, 15 turns: the workers would run for minutes after their parent
    command = [sys.executable, "-m", "apo_lightning.eval", "evaluate", "--model", POLICY, "--data-dir", "synthetic",
               "--split", "test", "--batch-size", "4", "--processes", "2"]
    parent = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the two workers and multiprocessing's resource tracker
            workers = children(parent.pid)
            if len(workers) >= 3 or parent.poll() is not None:
                break
            time.sleep(0.5)
        assert len(workers) >= 3 and parent.poll() is None, f"workers {workers}, parent exit {parent.poll()}"
        time.sleep(5)  # past the workers' start
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(w) for w in workers):
            time.sleep(0.5)
        assert not [w for w in workers if alive(w)]
    finally:
        for w in workers:
            if alive(w):
                os.kill(w, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
