"""A*-PO stage 1: the V* estimator, the per-goal V* table and its on-disk cache.

Stage 1 samples ``N`` trajectories per training goal from the frozen reference policy and turns their rewards into
``V̂*(x) = β1 · (logsumexp_i(r_i/β1) − ln N)`` (:func:`v_star_from_rewards`). That is the most expensive thing the
project does once, so its result is cached on disk, keyed by ``utils.hashing.cache_key`` of *everything* it depends
on (reference weights, goals, N, sampling, run seed, env, reward and prompt settings), and reused across runs and
resumes.

This module holds no model code: the caller does the rollouts and hands them in through ``compute_fn``.

* :func:`v_star_from_rewards` — the estimator.
* :class:`VStarCache` — one JSON file per key under a directory (``data/vstar/<key>.json``), written atomically.
* :class:`VStarTable` — V* and raw reward samples per goal id, with ``lookup`` (goal ids -> (B,) tensor).

Goal ids are ``int`` goal indices, as everywhere in the project; a JSON file's object keys (strings) are read back as
ints.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..utils.files import atomic_write, atomic_write_text
from ..utils.hashing import cache_key, canonical
from .checks import require_ndim, require_positive_finite

__all__ = ["CACHE_FORMAT_VERSION", "VStarCache", "VStarCacheWarning", "VStarTable", "v_star_from_rewards"]

#: The one format version of V* cache files, mixed into every key and written into every file: bump it when the file
#: layout, the meaning of a payload or the key parts change. A file of another version is refused and rebuilt.
CACHE_FORMAT_VERSION = 2

_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


class VStarCacheWarning(UserWarning):
    """A cache file could not be used (unreadable, not JSON, wrong layout, wrong key); it is recomputed."""


# ----------------------------------------------------------------------------------------------------------------
# the estimator
# ----------------------------------------------------------------------------------------------------------------


def v_star_from_rewards(rewards: Tensor, beta1: float) -> Tensor:
    """Stage-1 estimate of the optimal value ``V*(x)`` from ``N`` reference-policy samples per goal.

    ``V̂*(x) = β1 · ln( (1/N) Σ_i exp(r_i / β1) ) = β1 · (logsumexp_i(r_i / β1) − ln N)``

    (Brantley et al. 2025, §3 "Stage 1", the Monte-Carlo estimate of ``V*(x) = β ln E_{y~π_ref} exp(r(x,y)/β)``;
    Eq. (3) of arXiv:2505.20686v1.) It is computed with ``torch.logsumexp`` in float64, so it is exact and finite
    for any finite rewards and ``β1 > 0`` — e.g. ``r = 1000, β1 = 0.01`` (``r/β1 = 1e5``) gives ``≈ max r − β1 ln N``.
    The estimate interpolates between ``mean(r)`` (``β1 → ∞``) and ``max(r)`` (``β1 → 0``); only ``β1 > 0`` is
    accepted (use ``max`` yourself if you want the limit).

    Args:
        rewards: (K, N) float (or int), ``N ≥ 1`` reward samples for each of ``K`` goals. ``N`` is the same for every
            goal (no mask, no ragged rows): group goals by ``N`` before calling if you have to.
        beta1: the stage-1 KL temperature, a finite float > 0.

    Returns:
        (K,) V* estimates, in ``rewards``' dtype if it is floating point, else float32. Non-finite rewards give
        non-finite estimates for their goal.

    Raises:
        ValueError: if ``rewards`` is not 2-D with ``N ≥ 1``, or ``beta1`` is not a finite number > 0.
    """
    rewards = require_ndim("rewards", rewards, 2, "(K, N)")
    if rewards.shape[1] < 1:
        raise ValueError(f"rewards must have at least one sample per goal (N >= 1), got shape {tuple(rewards.shape)}")
    beta1 = require_positive_finite("beta1", beta1)
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    r = rewards.detach().to(torch.float64)  # (K, N); float64 keeps β1·(lse − ln N) exact when r/β1 is huge
    n = r.shape[1]
    v = beta1 * (torch.logsumexp(r / beta1, dim=1) - math.log(n))  # (K,)
    return v.to(out_dtype)


# ----------------------------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class VStarTable:
    """V̂* per goal, with the raw reference-policy reward samples it came from.

    Attributes:
        key: the cache key (:func:`cache_key` of ``key_parts``).
        v_star: goal index -> V̂*(x), a float.
        rewards: goal index -> the ``N`` reward samples of that goal, in sampling order.
        beta1: the stage-1 temperature the V* values were computed with.
        key_parts: the parts the key was made from (for humans reading the file; not used for lookups).
    """

    key: str
    v_star: dict[int, float]
    rewards: dict[int, list[float]]
    beta1: float
    key_parts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_rewards(
        cls, key: str, rewards: Mapping[Any, Iterable[float]], beta1: float, key_parts: Mapping[str, Any] | None = None
    ) -> VStarTable:
        """Build the table from reward samples, computing V* with :func:`v_star_from_rewards`.

        Args:
            key: the cache key.
            rewards: goal index (an int, or its decimal string as a JSON file holds it) -> ``N`` finite reward samples;
                ``N ≥ 1`` and the same for every goal.
            beta1: stage-1 temperature, finite and > 0.
            key_parts: recorded in the table as is.

        Raises:
            ValueError: if there are no goals, a goal id is not an integer, two ids are the same integer, the ``N``
                differ between goals, a reward is not finite, or ``beta1`` is not > 0.
        """
        normalised: dict[int, list[float]] = {}
        for goal, samples in rewards.items():
            try:
                gid = int(goal)
            except ValueError:
                raise ValueError(f"goal id {goal!r} is not a goal index (an integer)") from None
            if gid in normalised:
                raise ValueError(f"goal ids {goal!r} and another id are both goal index {gid}")
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
        matrix = torch.tensor([normalised[g] for g in goals], dtype=torch.float64)  # (K, N)
        v = v_star_from_rewards(matrix, beta1)  # (K,)
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
        return goal_id in self.v_star

    @property
    def n_samples(self) -> int:
        """N, the number of reference samples per goal."""
        return len(next(iter(self.rewards.values()))) if self.rewards else 0

    def lookup(self, goal_ids: Iterable[Any], device: torch.device | str | None = None) -> Tensor:
        """V* of each goal, in order, as a tensor.

        Args:
            goal_ids: B goal indices (ints, or anything ``int()`` takes: a 0-d tensor).
            device: where to put the result (default CPU).

        Returns:
            (B,) float32.

        Raises:
            KeyError: naming the first goal id that has no V* (and how many goals the table has).
        """
        values = []
        for goal in goal_ids:
            gid = int(goal)
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

        A file is unusable when it cannot be read or parsed, was made by older code (its ``format_version`` is not
        :data:`CACHE_FORMAT_VERSION`), is not a JSON object with ``v_star`` (str -> number), ``rewards`` (str ->
        non-empty list of numbers) over the same goals and a ``key_parts`` object, or was stored under a different
        key.
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
                f"V* cache file {path} is unusable ({problem}); ignoring it: V* is recomputed and the file rebuilt",
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
        atomic_write_text(path, text)
        return path

    @staticmethod
    def key(key_parts: Mapping[str, Any]) -> str:
        """The cache key of ``key_parts`` (:func:`cache_key` at this cache's format version)."""
        return cache_key(key_parts, CACHE_FORMAT_VERSION)

    def samples_path(self, key: str) -> Path:
        """The file of the reference trajectories behind ``key``'s rewards (``<key>.samples.pt``)."""
        return self.path_for(key).with_suffix(".samples.pt")

    def save_samples(self, key: str, samples: Mapping[str, list[dict]]) -> Path:
        """Write the stage-1 trajectories (goal id -> plain records of lists and numbers) atomically; returns the
        path. Kept only when a run reuses them as regression rows (``VStarConfig.reuse``)."""
        path = self.samples_path(key)
        with atomic_write(path, "wb") as f:
            torch.save(dict(samples), f)
        return path

    def load_samples(self, key: str) -> dict[str, list[dict]] | None:
        """The stage-1 trajectories stored for ``key``, or None if there are none or the file is unusable (then
        with a :class:`VStarCacheWarning`; they are sampled again)."""
        path = self.samples_path(key)
        if not path.exists():
            return None
        try:
            samples = torch.load(path, weights_only=True)
            if not isinstance(samples, dict):
                raise ValueError(f"top level is a {type(samples).__name__}, not a dict")
        except Exception as err:  # noqa: BLE001 - any unreadable file is re-sampled, never a crash
            warnings.warn(f"V* samples file {path} is unusable ({type(err).__name__}: {err}); sampling again",
                          VStarCacheWarning, stacklevel=2)
            return None
        return samples

    def get_or_compute(
        self,
        key_parts: Mapping[str, Any],
        compute_fn: Callable[[], Mapping[Any, Iterable[float]]],
        beta1: float,
        recompute: bool = False,
    ) -> VStarTable:
        """The V* table for ``key_parts``: from the cache if a usable file exists, else computed and saved.

        On a hit, ``compute_fn`` is not called and V* is recomputed from the stored rewards with ``beta1`` (cheap and
        exact, so a table is always consistent with the β1 asked for). On a miss — no file, an unusable file, or a
        changed key — ``compute_fn()`` runs the reference rollouts and returns ``{goal_id: [N rewards]}``.

        Args:
            key_parts: everything V* depends on (see :func:`cache_key`); include β1 and N.
            compute_fn: no-argument callable returning goal id -> ``N`` reward samples (same ``N`` for all goals).
            beta1: stage-1 temperature, finite and > 0.
            recompute: call ``compute_fn`` and overwrite the file even if it is usable (when the caller needs what
                the file does not keep, e.g. the trajectories themselves).

        Returns:
            the :class:`VStarTable`.

        Raises:
            ValueError: if ``beta1`` is not > 0 or ``compute_fn``'s result is not a valid reward table (see
                :meth:`VStarTable.from_rewards`).
            TypeError: if ``key_parts`` cannot be hashed (see :func:`cache_key`).
        """
        if not (isinstance(beta1, (int, float)) and math.isfinite(beta1) and beta1 > 0):
            raise ValueError(f"beta1 must be a finite number > 0, got {beta1!r}")
        key = self.key(key_parts)
        payload = None if recompute else self.load(key)
        if payload is not None:
            return VStarTable.from_rewards(key, payload["rewards"], beta1, payload.get("key_parts") or {})
        rewards = compute_fn()
        if not isinstance(rewards, Mapping):
            raise ValueError(
                f"compute_fn must return a mapping goal_id -> list of rewards, got {type(rewards).__name__}"
            )
        table = VStarTable.from_rewards(key, rewards, beta1, canonical(key_parts, "key_parts"))
        self.save(key, table.to_payload())
        return table


def _payload_problem(payload: Any, key: str) -> str | None:
    """Why ``payload`` is not a usable V* file for ``key``, or None if it is."""
    if not isinstance(payload, dict):
        return f"top level is a {type(payload).__name__}, not an object"
    if payload.get("format_version") != CACHE_FORMAT_VERSION:
        return (f"made by older code: format_version {payload.get('format_version')!r}, this code reads "
                f"{CACHE_FORMAT_VERSION}")
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
