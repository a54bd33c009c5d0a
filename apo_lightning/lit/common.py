"""Settings and helpers shared by the Lightning data modules: which WebShop, which env, the policy files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from ..agent.chat import ChatFormat
from ..agent.policy import looks_local
from ..agent.tiny import TinyPolicySpec, ensure_tiny_policy
from ..webshop import WebShop, WebShopEnv


@dataclass
class EnvConfig:
    """Which WebShop data and how episodes run.

    Args:
        data_dir: WebShop data folder; None = the synthetic catalog (generated under data/synthetic/seed0).
        goals: "synthetic" or "human" goals.
        seed: price/goal seed; 233 reproduces the original.
        split_scheme: "webshop" (test [0, 500), val [500, 1500), train [1500, N)) or "verl".
        observation_mode: "text" or "text_rich".
        max_steps: env steps (turns) per episode before it ends with reward 0.
    """

    data_dir: str | None = None
    goals: str = "synthetic"
    seed: int = 233
    split_scheme: str = "webshop"
    observation_mode: str = "text"
    max_steps: int = 15

    def shop(self) -> WebShop:
        """The loaded catalog (cached per process)."""
        return _load_shop(self.data_dir, self.goals, self.seed)

    def envs(self, n: int) -> list[WebShopEnv]:
        """``n`` fresh envs over the shared catalog."""
        shop = self.shop()
        return [WebShopEnv(shop, self.observation_mode, max_steps=self.max_steps) for _ in range(n)]

    def split(self, name: str) -> list[int]:
        """Goal indices of a split."""
        return list(self.shop().split(name, self.split_scheme))


@lru_cache(maxsize=4)
def _load_shop(data_dir: str | None, goals: str, seed: int) -> WebShop:
    return WebShop.load(data_dir, goals=goals, seed=seed)


def ensure_policy(model_name_or_path: str, tiny: TinyPolicySpec | None, env: EnvConfig, chat: ChatFormat) -> None:
    """Make sure the policy directory exists: build the tiny policy there when ``tiny`` is set and it is missing.

    Raises:
        FileNotFoundError: no such directory and no ``tiny`` spec to build one.
    """
    path = Path(model_name_or_path)
    if tiny is not None:
        ensure_tiny_policy(path, tiny, env.shop(), chat, env.split("train"))
    elif looks_local(model_name_or_path) and not path.exists():
        raise FileNotFoundError(
            f"policy directory {path} does not exist; train it first (e.g. `python cli.py fit --config "
            "configs/sft_tiny.yaml` exports data/models/tiny-sft) or set model_name_or_path")


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-able parts (cache keys)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def files_fingerprint(directory: str | Path, names: tuple[str, ...]) -> str:
    """Hash of the named files' bytes in ``directory`` (missing files hash as absent)."""
    digest = hashlib.sha256()
    for name in names:
        path = Path(directory) / name
        digest.update(name.encode())
        digest.update(path.read_bytes() if path.is_file() else b"<absent>")
    return digest.hexdigest()[:16]


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def export_policy(model, tokenizer, out_dir: str | Path) -> Path:
    """Save ``model`` and ``tokenizer`` as a Hugging Face model directory, atomically (temp dir + rename)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        backup = None
        if out_dir.exists():
            backup = out_dir.with_name(f".{out_dir.name}.old")
            shutil.rmtree(backup, ignore_errors=True)
            os.replace(out_dir, backup)
        os.replace(tmp, out_dir)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def chat_dict(chat: ChatFormat) -> dict:
    """A ChatFormat as a plain dict (for cache keys).

    ``reward`` is left out at its default, ``"score"``, so that V* caches made before the setting existed keep their
    keys; any other value is part of the key.
    """
    settings = asdict(chat)
    if settings["reward"] == "score":
        del settings["reward"]
    return settings
