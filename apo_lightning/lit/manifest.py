"""A run's manifest: what produced it (the code's commit, the packages, the CPU, the command line), as one JSON file.

``cli.py`` writes it as ``manifest.json`` beside the run's ``config.yaml`` in its log folder, so that a figure read
from a run's logs or results can be traced to the code and the machine that made it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import torch

#: the packages whose versions a manifest records
PACKAGES = ("apo_lightning", "torch", "lightning", "transformers", "peft", "jsonargparse", "tokenizers")

#: the CPU flags a manifest records (``/proc/cpuinfo`` names): bfloat16 runs natively only with the last three
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")

#: the source tree of this package: the git repository a manifest reads, when there is one
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def git_state(root: Path = SOURCE_ROOT) -> dict | None:
    """``{"commit": sha, "dirty": bool}`` of the git repository at ``root`` (dirty: tracked files differ from the
    commit), or None when ``root`` is not one or git is missing."""
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=30).stdout.strip()
        changes = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(changes.strip())}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """The installed version of each package (None: not installed), and Python's."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, bool] | None:
    """Which of ``CPU_FLAGS`` this CPU has, from ``/proc/cpuinfo`` (None where that file does not exist)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return {flag: flag in flags for flag in CPU_FLAGS}


def run_manifest(argv: list[str]) -> dict:
    """The manifest of a run started by the command line ``argv`` (program name first) in this process."""
    return {
        "command": [Path(argv[0]).name, *argv[1:]] if argv else [],
        "cwd": os.getcwd(),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(),
        "packages": package_versions(),
        "cpu": {"capability": torch.backends.cpu.get_cpu_capability(), "flags": cpu_flags(),
                "count": os.cpu_count()},
        "torch_threads": torch.get_num_threads(),
        "cuda_devices": torch.cuda.device_count(),
        "platform": platform.platform(),
    }


def write_manifest(path: str | Path, argv: list[str] | None = None) -> Path:
    """Write :func:`run_manifest` of ``argv`` (default ``sys.argv``) to ``path`` as JSON (its folder is created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run_manifest(list(sys.argv if argv is None else argv)), indent=2) + "\n")
    return path
