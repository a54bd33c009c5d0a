"""Oracle demonstrations as training examples, built once and cached: the SFT course reads its demonstrations from
here.

The examples are rendered and tokenized by the rollout engine that RL samples with (so the token layout is
identical) and stored as plain tensors (loaded with ``weights_only=True``) under a key over everything they depend on:
the data, the env and prompt settings, the goals, the reply token limit, the tokenizer files, the DART noise and,
with the env's ``vary_wording``, which draw of the instructions they show.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoTokenizer

from ..baselines.demonstrations import oracle_demonstrations, recorded_demonstrations
from ..models.hub import TOKENIZER_FILES
from ..rollout.chat import ChatFormat
from ..rollout.engine import RolloutEngine
from ..utils.files import atomic_write
from ..utils.hashing import cache_key, hash_files
from ..utils.seeds import derive_seed
from ..utils.settings import check_settings
from ..webshop.sessions import read_sessions
from .settings import EnvConfig

log = logging.getLogger(__name__)

#: The one format version of demonstration cache files, mixed into every key: bump it when the demonstrations (the
#: oracle, the rendering), the file layout or the key parts change, so that files of other code are never found.
DEMOS_FORMAT_VERSION = 7


@dataclass
class DemoNoise:
    """DART demonstration noise (Laskey et al. 2017, "DART: Noise Injection for Robust Imitation Learning";
    ``baselines.demonstrations``): the oracle sometimes clicks wrong, then undoes the mistake; the mistake stays in
    the context and out of the loss, so the policy learns to leave states off the oracle's path.

    Args:
        probability: chance of a wrong click at each decision (another product, another option value), in [0, 1];
            0 = the plain oracle.
        copies: demonstrations per goal (each with its own mistakes), >= 1.

    Raises:
        ValueError: a setting out of its range.
    """

    probability: float = 0.0
    copies: int = 1

    def __post_init__(self) -> None:
        check_settings("demo_noise.", [("probability", self.probability, 0.0 <= self.probability <= 1.0, "in [0, 1]"),
                                       ("copies", self.copies, self.copies >= 1, ">= 1")])


class _NoModel:
    """Stands in for the model when the engine only renders demonstrations (it is never called)."""

    training = False
    generation_config = None

    def eval(self) -> None:
        pass


def demonstration_cache(cache_dir: str | Path, env: EnvConfig, chat: ChatFormat, tokenizer_dir: str,
                        goal_sets: dict[str, Sequence[int]], max_new_tokens: int, noise: DemoNoise = DemoNoise(),
                        seed: int = 0, recorded: str | None = None, draw: int = 0) -> Path:
    """Build (once) and return the cache file of successful oracle demonstrations on each named goal set.

    Args:
        cache_dir: where the file goes.
        env, chat: the env and prompt settings the demonstrations are rendered with.
        tokenizer_dir: the policy directory whose tokenizer encodes them.
        goal_sets: name -> goal indices, e.g. ``{"train": [...], "val": [...]}``.
        max_new_tokens: the reply token limit (a longer reply would be cut there, as in a rollout).
        noise: mistakes in the demonstrations (:class:`DemoNoise`); the default makes none.
        seed: seeds the mistakes, and with ``env.vary_wording`` the instructions.
        recorded: a sessions file (``python -m apo_lightning.webshop serve --record FILE``): its sessions, on
            training goals, become one more set, ``"recorded"`` (``baselines.demonstrations.recorded_demonstrations``),
            in the words they were recorded under (their searches were typed for them).
        draw: with ``env.vary_wording``, which draw of the instructions (the SFT course's pass): every
            demonstration shows its goal's instruction drawn afresh (``EnvConfig.training_envs``), seeded by
            ``(seed, draw)``, its goal set's name and its position; ignored without it.

    Returns:
        The file; :func:`load_demonstrations` reads it.

    Raises:
        FileNotFoundError, ValueError: ``recorded`` is missing, malformed, or holds a session that does not replay
            here (``recorded_demonstrations``).
    """
    parts = {"data": str(env.shop().data_dir.resolve()), "env": env.key_parts(), "chat": chat.key_parts(),
             "goals": {k: list(v) for k, v in goal_sets.items()}, "max_new_tokens": max_new_tokens,
             "tokenizer": hash_files(tokenizer_dir, TOKENIZER_FILES), "noise": asdict(noise),
             "seed": seed if noise.probability else 0}
    if env.vary_wording:
        parts["wording_draw"] = [seed, draw]
    episodes = read_sessions(recorded) if recorded is not None else None
    if episodes is not None:
        parts["recorded"] = [[e.goal_index, e.actions, e.score] for e in episodes]
    key = cache_key(parts, DEMOS_FORMAT_VERSION)
    path = Path(cache_dir) / f"demos-{key[:16]}.pt"
    if path.exists():
        return path
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    engine = RolloutEngine(_NoModel(), tokenizer, chat, max_new_tokens=max_new_tokens)
    envs = env.envs(64)
    data = {}
    for name, goals in goal_sets.items():
        make_envs = (partial(env.training_envs, seed=derive_seed(seed, "wording", draw, name))
                     if env.vary_wording else None)
        demos = oracle_demonstrations(engine, envs, list(goals), noise=noise.probability, seed=seed,
                                      copies=noise.copies, make_envs=make_envs)
        data[name] = _tensors(demos)
        log.info("%d %s demonstrations from %d goals", len(demos), name, len(goals))
    if episodes is not None:
        data["recorded"] = _tensors(recorded_demonstrations(engine, envs, episodes, env.split("train")))
        log.info("%d recorded demonstrations from %s", len(episodes), recorded)
    with atomic_write(path, "wb") as f:
        torch.save(data, f)
    return path


def _tensors(demos: list) -> dict[str, list]:
    """The segments of demonstration trajectories as the cache stores them: token ids, gen masks, goal indices."""
    segments = [(t.goal_index, s) for t in demos for s in t.segments]
    return {"input_ids": [torch.tensor(s.token_ids, dtype=torch.int32) for _, s in segments],
            "gen_mask": [torch.tensor(s.gen_mask, dtype=torch.uint8) for _, s in segments],
            "goal_index": [g for g, _ in segments]}


def load_demonstrations(path: str | Path) -> dict[str, list[dict]]:
    """The examples of a :func:`demonstration_cache` file: per goal set, dicts of ``input_ids``, ``gen_mask`` (lists)
    and ``goal_index``, as ``rollout.collate.pad_batch`` takes them."""
    data = torch.load(path, weights_only=True)
    return {name: [{"input_ids": ids.tolist(), "gen_mask": mask.tolist(), "goal_index": g}
                   for ids, mask, g in zip(part["input_ids"], part["gen_mask"], part["goal_index"])]
            for name, part in data.items()}
