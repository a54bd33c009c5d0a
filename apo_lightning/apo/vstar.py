"""Stage-1 bookkeeping for A*-PO: the on-disk V* cache and the per-goal V* table.

Stage 1 samples ``N`` trajectories per training goal from the frozen reference policy and turns their rewards into
``V̂*(x) = β1 · (logsumexp_i(r_i/β1) − ln N)`` (:func:`apo_lightning.apo.losses.v_star_from_rewards`). That is the
most expensive thing the project does once, so its result is cached on disk, keyed by a hash of *everything* it
depends on, and reused across runs and resumes.

This module holds no model code: the caller does the rollouts and hands them in through ``compute_fn``.

* :func:`cache_key` — sha256 of the canonical JSON of the key parts (reference weights hash, goal ids, N, β1, reward
  and env settings, prompt format, ...). The caller decides what goes in; anything that changes V* must.
* :func:`hash_state_dict` — a stable, order-independent sha256 of model weights, for the key.
* :class:`VStarCache` — one JSON file per key under a directory (``data/vstar/<key>.json``), written atomically.
* :class:`VStarTable` — V* and raw reward samples per goal id, with ``lookup`` (goal ids -> (B,) tensor) and
  ``drop_all_zero`` (goals no reference sample solved, which A*-PO's paper filters out of training).

Goal ids are identified by ``str(goal_id)`` (JSON object keys are strings): ``7`` and ``"7"`` are the same goal.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from apo_lightning.apo.losses import v_star_from_rewards

__all__ = [
    "CACHE_FORMAT_VERSION",
    "VStarCache",
    "VStarCacheWarning",
    "VStarTable",
    "cache_key",
    "hash_state_dict",
]

#: Mixed into every key: bump it when the file layout or the meaning of a payload changes, to orphan old files.
CACHE_FORMAT_VERSION = 1

_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


class VStarCacheWarning(UserWarning):
    """A cache file could not be used (unreadable, not JSON, wrong layout, wrong key); it is recomputed."""


# ----------------------------------------------------------------------------------------------------------------
# keys and hashes
# ----------------------------------------------------------------------------------------------------------------


def _canonical(value: Any, where: str) -> Any:
    """A JSON-ready copy of ``value`` whose serialisation with sorted keys is canonical; TypeError if impossible."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)  # json writes finite floats with float.__repr__ (shortest round-trip form)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"cache_key: mapping keys must be str, got {type(k).__name__} key {k!r} at {where}")
            out[k] = _canonical(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [_canonical(v, f"{where}{{}}") for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")))
    raise TypeError(
        f"cache_key: cannot hash a {type(value).__name__} at {where}; pass str, int, float, bool, None, paths, "
        "and lists/tuples/sets/mappings of those (hash tensors or weights with hash_state_dict first)"
    )


def cache_key(parts: Mapping[str, Any]) -> str:
    """The cache key for a V* table: sha256 (hex) of the canonical JSON of ``parts``.

    Canonical means: mapping keys sorted, no whitespace, floats written with ``repr`` (exact round trip), tuples as
    lists, sets sorted, paths as strings; :data:`CACHE_FORMAT_VERSION` is mixed in. So the key does not depend on the
    insertion order of any mapping, and changes whenever any value changes. ``1`` and ``1.0`` are different values
    (different keys): pass numbers with a consistent type.

    Args:
        parts: everything V* depends on, e.g. ``{"ref_weights": hash_state_dict(...), "goal_ids": [...], "n": 8,
            "beta1": 0.5, "reward": {...}, "env": {...}, "prompt_format": "..."}``. Keys must be str.

    Returns:
        64 lowercase hex characters.

    Raises:
        TypeError: if ``parts`` is not a mapping, or holds a value that has no canonical JSON form (the message
            names where).
    """
    if not isinstance(parts, Mapping):
        raise TypeError(f"cache_key: parts must be a mapping, got {type(parts).__name__}")
    doc = {"format_version": CACHE_FORMAT_VERSION, "parts": _canonical(parts, "parts")}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def hash_state_dict(state_dict: Mapping[str, Tensor]) -> str:
    """A stable sha256 (hex) of model weights: parameter names, dtypes, shapes and raw bytes.

    Order-independent (entries are hashed sorted by name) and device-independent (bytes are read on the CPU). Each
    field is length-prefixed, so no two different state dicts hash the same by concatenation accident. Changing one
    element of one tensor, a name, a dtype or a shape changes the hash.

    Args:
        state_dict: mapping of str names to tensors (e.g. ``model.state_dict()``).

    Returns:
        64 lowercase hex characters.

    Raises:
        TypeError: if a key is not a str or a value is not a tensor (the message names the entry).
        ValueError: if a tensor has no data (meta device) or is sparse/quantized.
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


# ----------------------------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class VStarTable:
    """V̂* per goal, with the raw reference-policy reward samples it came from.

    Attributes:
        key: the cache key (:func:`cache_key` of ``key_parts``).
        v_star: goal id (str) -> V̂*(x), a float.
        rewards: goal id (str) -> the ``N`` reward samples of that goal, in sampling order.
        beta1: the stage-1 temperature the V* values were computed with.
        key_parts: the parts the key was made from (for humans reading the file; not used for lookups).
    """

    key: str
    v_star: dict[str, float]
    rewards: dict[str, list[float]]
    beta1: float
    key_parts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_rewards(
        cls, key: str, rewards: Mapping[Any, Iterable[float]], beta1: float, key_parts: Mapping[str, Any] | None = None
    ) -> VStarTable:
        """Build the table from reward samples, computing V* with :func:`v_star_from_rewards`.

        Args:
            key: the cache key.
            rewards: goal id -> ``N`` finite reward samples; ``N ≥ 1`` and the same for every goal.
            beta1: stage-1 temperature, finite and > 0.
            key_parts: recorded in the table as is.

        Raises:
            ValueError: if there are no goals, two ids share the same ``str``, the ``N`` differ between goals, a
                reward is not finite, or ``beta1`` is not > 0.
        """
        normalised: dict[str, list[float]] = {}
        for goal, samples in rewards.items():
            gid = str(goal)
            if gid in normalised:
                raise ValueError(
                    f"goal ids {goal!r} and another id both read as {gid!r}; goal ids must be unique as str"
                )
            values = [float(r) for r in samples]
            if not all(math.isfinite(r) for r in values):
                raise ValueError(f"goal {gid!r} has a non-finite reward sample: {values}")
            normalised[gid] = values
        if not normalised:
            raise ValueError("no goals: the reward samples mapping is empty")
        sizes = {len(v) for v in normalised.values()}
        if len(sizes) != 1 or 0 in sizes:
            example = {n: next(g for g, v in normalised.items() if len(v) == n) for n in sorted(sizes)}
            raise ValueError(
                f"every goal needs the same number N >= 1 of reward samples; got N in {sorted(sizes)} "
                f"(one goal per N: {example})"
            )
        goals = list(normalised)
        matrix = torch.tensor([normalised[g] for g in goals], dtype=torch.float64)  # (G, N)
        v = v_star_from_rewards(matrix, beta1)  # (G,)
        return cls(
            key=key,
            v_star={g: float(x) for g, x in zip(goals, v.tolist())},
            rewards=normalised,
            beta1=float(beta1),
            key_parts=dict(key_parts or {}),
        )

    def __len__(self) -> int:
        return len(self.v_star)

    def __contains__(self, goal_id: object) -> bool:
        return str(goal_id) in self.v_star

    @property
    def n_samples(self) -> int:
        """N, the number of reference samples per goal."""
        return len(next(iter(self.rewards.values()))) if self.rewards else 0

    def drop_all_zero(self, threshold: float = 0.0) -> set[str]:
        """Goal ids none of whose ``N`` reference samples scored above ``threshold`` (default: above 0).

        These are the goals the reference policy never solved even partially; A*-PO's paper drops such prompts from
        stage 2 (they carry no signal and cost rollouts). With the project's reward (WebShop score, 0 without a
        purchase, minus format penalties) a sample "scored 0" when its reward is ``<= 0``, so penalised samples count
        as zero-score too.

        Returns:
            the set of goal ids (str) to drop; the table itself is not modified.
        """
        return {g for g, samples in self.rewards.items() if max(samples) <= threshold}

    def summary(self, full_reward: float = 1.0) -> dict[str, float]:
        """What stage 1 saw of the reference policy's samples, as plain floats.

        ``pass_at_n`` bounds what on-policy exploration from π_ref finds: a goal none of whose ``N`` samples reached
        ``full_reward`` (a WebShop success without a format penalty) gives stage 2 no successful trajectory to
        reinforce, however the loss weighs it. Compare it with π_ref's greedy success rate: when the two are close,
        sampling finds few successes that greedy decoding does not already make.

        Returns:
            ``goals``; ``samples_per_goal`` (N); ``v_star_mean``; ``reward_mean`` (over all G·N samples);
            ``full_reward_rate`` (share of samples with reward ≥ ``full_reward``); ``pass_at_n`` (share of goals
            with at least one such sample); ``all_zero_rate`` (share of goals :meth:`drop_all_zero` would drop).
        """
        samples = list(self.rewards.values())
        flat = [r for goal in samples for r in goal]
        return {
            "goals": float(len(samples)),
            "samples_per_goal": float(self.n_samples),
            "v_star_mean": sum(self.v_star.values()) / len(self.v_star),
            "reward_mean": sum(flat) / len(flat),
            "full_reward_rate": sum(r >= full_reward for r in flat) / len(flat),
            "pass_at_n": sum(max(goal) >= full_reward for goal in samples) / len(samples),
            "all_zero_rate": len(self.drop_all_zero()) / len(samples),
        }

    def lookup(self, goal_ids: Iterable[Any], device: torch.device | str | None = None) -> Tensor:
        """V* of each goal, in order, as a tensor.

        Args:
            goal_ids: B goal ids (compared as ``str``).
            device: where to put the result (default CPU).

        Returns:
            (B,) float32.

        Raises:
            KeyError: naming the first goal id that has no V* (and how many goals the table has).
        """
        values = []
        for goal in goal_ids:
            gid = str(goal)
            if gid not in self.v_star:
                raise KeyError(
                    f"goal id {goal!r} has no V* in table {self.key[:12]}… ({len(self.v_star)} goals); was it in the "
                    "goal list the table was computed for?"
                )
            values.append(self.v_star[gid])
        return torch.tensor(values, dtype=torch.float32, device=device)

    def to_payload(self) -> dict[str, Any]:
        """The JSON-ready dict :class:`VStarCache` stores."""
        return {
            "format_version": CACHE_FORMAT_VERSION,
            "key": self.key,
            "key_parts": self.key_parts,
            "beta1": self.beta1,
            "n_samples": self.n_samples,
            "v_star": dict(self.v_star),
            "rewards": {g: list(r) for g, r in self.rewards.items()},
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }


# ----------------------------------------------------------------------------------------------------------------
# the cache
# ----------------------------------------------------------------------------------------------------------------


class VStarCache:
    """V* tables on disk: one ``<key>.json`` per cache key under ``root`` (created on first save).

    Files are JSON (human-readable; floats round-trip exactly) holding ``{"key_parts", "beta1", "v_star": {goal:
    float}, "rewards": {goal: [floats]}, "created", ...}``. Writes are atomic (a temp file in the same directory, then
    ``os.replace``), so a crash or a concurrent writer (e.g. several DDP ranks) never leaves a half-written file under
    the final name. A file that cannot be used is reported with a :class:`VStarCacheWarning` naming it and is
    recomputed — never a crash.

    Args:
        root: the cache directory, e.g. ``data/vstar``.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path_for(self, key: str) -> Path:
        """The file for ``key``. Raises ValueError unless ``key`` is 64 lowercase hex chars (a :func:`cache_key`)."""
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"not a cache key (expected 64 lowercase hex characters from cache_key): {key!r}")
        return self.root / f"{key}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The stored payload for ``key``, or None if there is none or it is unusable (then with a warning).

        A file is unusable when it cannot be read or parsed, is not a JSON object with ``v_star`` (str -> number),
        ``rewards`` (str -> non-empty list of numbers) over the same goals and a ``key_parts`` object, or was stored
        under a different key.
        """
        path = self.path_for(key)
        if not path.exists():
            return None
        try:
            with open(path, encoding="utf-8") as f:
                payload = json.load(f)
            problem = _payload_problem(payload, key)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            problem = f"{type(err).__name__}: {err}"
        if problem is not None:
            warnings.warn(
                f"V* cache file {path} is unusable ({problem}); ignoring it and recomputing V*",
                VStarCacheWarning,
                stacklevel=2,
            )
            return None
        return payload

    def save(self, key: str, payload: Mapping[str, Any]) -> Path:
        """Write ``payload`` as ``<root>/<key>.json`` atomically; returns the path.

        Raises:
            ValueError: if ``key`` is not a cache key or ``payload`` is not JSON-serialisable.
            OSError: if the directory cannot be created or written.
        """
        path = self.path_for(key)
        try:
            text = json.dumps(payload, sort_keys=True, indent=1, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"V* payload for key {key} is not JSON-serialisable: {err}") from err
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
            raise
        return path

    def get_or_compute(
        self,
        key_parts: Mapping[str, Any],
        compute_fn: Callable[[], Mapping[Any, Iterable[float]]],
        beta1: float,
    ) -> VStarTable:
        """The V* table for ``key_parts``: from the cache if a usable file exists, else computed and saved.

        On a hit, ``compute_fn`` is not called and V* is recomputed from the stored rewards with ``beta1`` (cheap and
        exact, so a table is always consistent with the β1 asked for). On a miss — no file, an unusable file, or a
        changed key — ``compute_fn()`` runs the reference rollouts and returns ``{goal_id: [N rewards]}``.

        Args:
            key_parts: everything V* depends on (see :func:`cache_key`); include β1 and N.
            compute_fn: no-argument callable returning goal id -> ``N`` reward samples (same ``N`` for all goals).
            beta1: stage-1 temperature, finite and > 0.

        Returns:
            the :class:`VStarTable`.

        Raises:
            ValueError: if ``beta1`` is not > 0 or ``compute_fn``'s result is not a valid reward table (see
                :meth:`VStarTable.from_rewards`).
            TypeError: if ``key_parts`` cannot be hashed (see :func:`cache_key`).
        """
        if not (isinstance(beta1, (int, float)) and math.isfinite(beta1) and beta1 > 0):
            raise ValueError(f"beta1 must be a finite number > 0, got {beta1!r}")
        key = cache_key(key_parts)
        payload = self.load(key)
        if payload is not None:
            return VStarTable.from_rewards(key, payload["rewards"], beta1, payload.get("key_parts") or {})
        rewards = compute_fn()
        if not isinstance(rewards, Mapping):
            raise ValueError(
                f"compute_fn must return a mapping goal_id -> list of rewards, got {type(rewards).__name__}"
            )
        table = VStarTable.from_rewards(key, rewards, beta1, _canonical(key_parts, "key_parts"))
        self.save(key, table.to_payload())
        return table


def _payload_problem(payload: Any, key: str) -> str | None:
    """Why ``payload`` is not a usable V* file for ``key``, or None if it is."""
    if not isinstance(payload, dict):
        return f"top level is a {type(payload).__name__}, not an object"
    for name in ("key_parts", "v_star", "rewards"):
        if name not in payload:
            return f"missing field {name!r}"
    if not isinstance(payload["key_parts"], dict):
        return "key_parts is not an object"
    if payload.get("key", key) != key:
        return f"it was written for key {payload.get('key')!r}"
    v_star, rewards = payload["v_star"], payload["rewards"]
    if not isinstance(v_star, dict) or not isinstance(rewards, dict):
        return "v_star or rewards is not an object"
    if not rewards:
        return "rewards is empty"
    if set(v_star) != set(rewards):
        return "v_star and rewards do not cover the same goals"

    def is_number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    if not all(is_number(v) for v in v_star.values()):
        return "a v_star value is not a finite number"
    sizes = set()
    for goal, samples in rewards.items():
        if not isinstance(samples, list) or not samples or not all(is_number(r) for r in samples):
            return f"rewards of goal {goal!r} are not a non-empty list of finite numbers"
        sizes.add(len(samples))
    if len(sizes) != 1:
        return f"goals have different numbers of samples {sorted(sizes)}"
    return None
