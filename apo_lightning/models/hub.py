"""What a model directory (or a LoRA adapter folder) holds, and whether a name is a local path or a Hugging Face
hub id.

The helpers every model loader shares (``models.loading``, ``models.gguf``, ``models.tiny``); nothing here loads a
model or downloads anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..utils.files import read_json

#: Weight files of a model directory; any one of them will do.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
#: Tokenizer files a loadable model directory needs at least one of.
REQUIRED_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: The tokenizer files a model directory may hold (what tokenizes a demonstration the same way).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
#: What marks a ``peft`` adapter folder; its ``base_model_name_or_path`` names the model the adapter applies to.
ADAPTER_CONFIG = "adapter_config.json"
#: Weight files of an adapter folder; any one of them will do.
ADAPTER_WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def looks_local(name: str) -> bool:
    """Whether ``name`` is meant as a filesystem path rather than a hub id like ``Qwen/Qwen2.5-0.5B-Instruct``."""
    path = Path(name).expanduser()
    return path.exists() or path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1


def missing_model_files(path: Path) -> list[str]:
    """What a model directory lacks: the directory itself, config.json, weights, tokenizer files (``[]``: none)."""
    if not path.is_dir():
        return [f"directory {path}"]
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json")
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        missing.append(" or ".join(WEIGHT_FILES))
    if not any((path / name).is_file() for name in REQUIRED_TOKENIZER_FILES):
        missing.append(" or ".join(REQUIRED_TOKENIZER_FILES))
    return missing


def adapter_base(name: str) -> str | None:
    """The base model of the ``peft`` adapter folder ``name`` (``base_model_name_or_path`` of its
    ``adapter_config.json``: ``smollm2-135m-instruct``, a model directory or a hub id); None when ``name`` is not a
    folder with ``adapter_config.json``.

    Raises:
        ValueError: ``adapter_config.json`` is not a JSON object with a non-empty ``base_model_name_or_path`` (the
            message names the file).
    """
    config_file = Path(name).expanduser() / ADAPTER_CONFIG
    if not config_file.is_file():
        return None
    config = read_json(config_file, dict, "a peft adapter config (a JSON object)")
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise ValueError(f"{config_file} names no base model (base_model_name_or_path is {base!r}): set it to the "
                         "model the adapter was trained over")
    return base


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for no downloads ("1", "true", "yes" or "on", any case)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
