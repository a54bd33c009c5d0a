"""Hashes: cache keys over settings, and fingerprints of weights and files.

One helper per job: :func:`cache_key` for "everything this result depends on" (the V* cache, the demonstration
cache), :func:`hash_state_dict` for model weights, :func:`hash_files` for files on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor


def canonical(value: Any, where: str = "parts") -> Any:
    """A JSON-ready copy of ``value`` whose serialisation with sorted keys is canonical.

    Tuples become lists, sets sorted lists, paths strings, dataclasses their fields; floats keep ``repr`` precision.

    Raises:
        TypeError: a value has no canonical JSON form (the message names where it is).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "__dataclass_fields__"):
        return canonical({name: getattr(value, name) for name in value.__dataclass_fields__}, where)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"cache_key: mapping keys must be str, got {type(k).__name__} key {k!r} at {where}")
            out[k] = canonical(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [canonical(v, f"{where}{{}}") for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")))
    raise TypeError(
        f"cache_key: cannot hash a {type(value).__name__} at {where}; pass str, int, float, bool, None, paths, "
        "dataclasses and lists/tuples/sets/mappings of those (hash weights with hash_state_dict first)"
    )


def cache_key(parts: Mapping[str, Any], version: int = 1) -> str:
    """sha256 (64 hex characters) of the canonical JSON of ``parts`` and ``version``.

    The key does not depend on the insertion order of any mapping and changes whenever any value changes. ``1`` and
    ``1.0`` are different values (different keys): pass numbers with a consistent type.

    Args:
        parts: everything the cached result depends on; keys must be str.
        version: the format version of what is cached; bump it to orphan old entries.

    Raises:
        TypeError: ``parts`` is not a mapping, or holds a value with no canonical JSON form.
    """
    if not isinstance(parts, Mapping):
        raise TypeError(f"cache_key: parts must be a mapping, got {type(parts).__name__}")
    doc = {"format_version": version, "parts": canonical(parts)}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def hash_state_dict(state_dict: Mapping[str, Tensor]) -> str:
    """A stable sha256 (hex) of model weights: parameter names, dtypes, shapes and raw bytes.

    Order-independent (entries are hashed sorted by name) and device-independent (bytes are read on the CPU). Each
    field is length-prefixed, so no two different state dicts hash the same by concatenation accident.

    Args:
        state_dict: str names -> tensors (``model.state_dict()``, or ``dict(model.named_parameters())``).

    Raises:
        TypeError: a key is not a str or a value is not a tensor (the message names the entry).
        ValueError: a tensor has no plain dense data (meta device, sparse, quantized).
    """
    hasher = hashlib.sha256()

    def put(data: bytes) -> None:
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)

    names = list(state_dict.keys())
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"hash_state_dict: keys must be str, got {type(name).__name__} {name!r}")
    put(str(len(names)).encode())
    for name in sorted(names):
        tensor = state_dict[name]
        if not isinstance(tensor, Tensor):
            raise TypeError(f"hash_state_dict: entry {name!r} is a {type(tensor).__name__}, not a tensor")
        if tensor.is_meta or tensor.layout != torch.strided or tensor.is_quantized:
            raise ValueError(f"hash_state_dict: entry {name!r} has no plain dense data to hash ({tensor.layout}, "
                             f"device {tensor.device})")
        put(name.encode("utf-8"))
        put(str(tensor.dtype).encode())
        put(json.dumps(list(tensor.shape)).encode())
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)  # (numel,)
        raw = flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)  # (nbytes,)
        put(raw.numpy().tobytes())
    return hasher.hexdigest()


def hash_parameters(module: torch.nn.Module) -> str:
    """:func:`hash_state_dict` of a module's parameters (what training changes; buffers left out)."""
    return hash_state_dict(dict(module.named_parameters()))


def hash_files(directory: str | os.PathLike, names: tuple[str, ...]) -> str:
    """sha256 (hex) of the named files' bytes in ``directory``; a missing file hashes as absent."""
    hasher = hashlib.sha256()
    for name in names:
        path = Path(directory) / name
        hasher.update(name.encode())
        hasher.update(path.read_bytes() if path.is_file() else b"<absent>")
    return hasher.hexdigest()
