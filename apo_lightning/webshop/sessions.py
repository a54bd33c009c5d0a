"""Recorded episodes: the sessions file ``serve --record`` writes, and the episodes a replay shows.

A **sessions file** is JSON lines, one finished shopping session per line::

    {"format": "apo_lightning.webshop.session/1", "goal_index": 1503, "instruction": "Find me ...",
     "actions": ["search[red shoes]", "click[b09abc1234]", "click[large]", "click[buy now]"], "score": 1.0,
     "goals": "synthetic", "seed": 233, "data_dir": "/path/to/webshop_1k", "max_steps": 15}

``actions`` are the env actions in order, exactly as ``WebShopEnv.step`` took them: from ``reset(goal_index)``
they replay the session in a ``WebShopEnv`` over the same catalog (``data_dir``, ``goals``, ``seed``) to the same
``score``. ``instruction`` identifies the goal, so a file is never replayed on another catalog by mistake. SFT reads
such a file as demonstrations (``baselines.demonstrations.recorded_demonstrations``).

:func:`read_episodes` also reads an evaluation ``episodes.jsonl`` (written by ``cli.py test`` and
``python -m apo_lightning.eval evaluate --results-dir``): each record's ``turns`` hold the actions, and a turn
without an action stepped the env with ``""`` (a no-op that still counts as a step), so it replays as ``""``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..utils.files import atomic_write
from .env import WebShopEnv
from .shop import WebShop

#: The ``format`` value of a sessions-file record.
SESSION_FORMAT = "apo_lightning.webshop.session/1"
RECORD_HINT = "record sessions with `python -m apo_lightning.webshop serve --record FILE`"
EPISODES_HINT = ("`python -m apo_lightning.eval evaluate --results-dir DIR` (or `cli.py test`) writes "
                 "DIR/episodes.jsonl")


@dataclass
class RecordedEpisode:
    """One recorded episode, from a sessions file or an ``episodes.jsonl``.

    Attributes:
        goal_index: the goal (an index into ``WebShop.goals``).
        instruction: the goal's instruction as recorded.
        actions: the env actions in order (``""`` for an episodes.jsonl turn without an action).
        score: the recorded WebShop score (0…1), or None when the record has none.
        source: ``"<file>:<line>"``, for messages.
        label: what played it: ``"session"`` for a sessions file, ``"<method> / <split>"`` for episodes.jsonl.
        turns: per action, what the record says about it beyond the action (``thought``, ``reply``,
            ``valid_action``; empty dicts for a sessions file).
        truncated: the step limit ended the episode (episodes.jsonl), else False.
    """

    goal_index: int
    instruction: str
    actions: list[str]
    score: float | None
    source: str
    label: str = "session"
    turns: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False


def session_record(env: WebShopEnv, actions: list[str]) -> dict[str, Any]:
    """The sessions-file record of ``env``'s episode, whose actions were ``actions`` (module docstring).

    Raises:
        RuntimeError: ``env`` has no episode (``reset`` was never called).
    """
    if env.goal is None:
        raise RuntimeError("session_record needs an env with an episode; call reset(goal_index) first")
    return {"format": SESSION_FORMAT, "goal_index": env.goal_index, "instruction": env.instruction_text,
            "actions": list(actions), "score": env.reward, "goals": env.shop.goal_kind, "seed": env.shop.seed,
            "data_dir": str(Path(env.shop.data_dir).resolve()), "max_steps": env.max_steps}


def append_session(path: str | os.PathLike, record: dict[str, Any]) -> int:
    """Add ``record`` as the last line of the sessions file ``path`` (created with its folder if missing).

    The file is rewritten atomically (old lines, then the new one), so a crash leaves the old file or the new one,
    never half a line.

    Returns:
        How many sessions the file holds now.

    Raises:
        ValueError: ``path`` exists and is not a sessions file (see :func:`read_sessions`).
        OSError: it cannot be written.
    """
    path = Path(path)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    count = len(read_sessions(path)) if old.strip() else 0
    if old and not old.endswith("\n"):
        old += "\n"
    with atomic_write(path) as f:
        f.write(old + json.dumps(record, ensure_ascii=False) + "\n")
    return count + 1


def _json_lines(path: Path, hint: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` per non-blank line of a JSON-lines file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; {hint}")
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not a JSON record ({e}); fix or remove the line") from e


def _session(value: Any, where: str) -> RecordedEpisode:
    """A sessions-file record as a :class:`RecordedEpisode`, checked."""
    if not isinstance(value, dict) or value.get("format") != SESSION_FORMAT:
        found = value.get("format") if isinstance(value, dict) else type(value).__name__
        raise ValueError(f"{where}: format must be {SESSION_FORMAT!r}, got {found!r}; is this a sessions file "
                         f"({RECORD_HINT})?")
    goal, actions, score = value.get("goal_index"), value.get("actions"), value.get("score")
    if not isinstance(goal, int) or isinstance(goal, bool) or goal < 0:
        raise ValueError(f"{where}: goal_index must be an integer >= 0, got {goal!r}")
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise ValueError(f"{where}: actions must be a list of strings, got {actions!r}")
    if not isinstance(score, (int, float)) or isinstance(score, bool):
        raise ValueError(f"{where}: score must be a number, got {score!r}")
    if not isinstance(value.get("instruction"), str):
        raise ValueError(f"{where}: instruction must be a string, got {value.get('instruction')!r}")
    return RecordedEpisode(goal, value["instruction"], actions, float(score), where,
                           turns=[{} for _ in actions])


def read_sessions(path: str | os.PathLike) -> list[RecordedEpisode]:
    """The sessions of a sessions file, in file order.

    Raises:
        FileNotFoundError: no such file (the message says how to record one).
        ValueError: a line that is not JSON or not a session record (``format``, ``goal_index``, ``actions``,
            ``score``, ``instruction``); the message names the file and line.
    """
    path = Path(path)
    return [_session(value, f"{path}:{number}") for number, value in _json_lines(path, RECORD_HINT)]


def _evaluated(value: Any, where: str) -> RecordedEpisode:
    """An ``episodes.jsonl`` record as a :class:`RecordedEpisode`, checked."""
    if not isinstance(value, dict) or not isinstance(value.get("turns"), list):
        raise ValueError(f"{where}: an episodes.jsonl record needs a 'turns' list; is this {EPISODES_HINT}?")
    goal = value.get("goal_index")
    if not isinstance(goal, int) or isinstance(goal, bool) or goal < 0:
        raise ValueError(f"{where}: goal_index must be an integer >= 0, got {goal!r}")
    instruction = value.get("instruction") or (value.get("goal") or {}).get("instruction_text")
    if not isinstance(instruction, str):
        raise ValueError(f"{where}: the record has no instruction (neither 'instruction' nor "
                         "'goal.instruction_text')")
    turns = value["turns"]
    if not all(isinstance(t, dict) and isinstance(t.get("action"), (str, type(None))) for t in turns):
        raise ValueError(f"{where}: every turn must be an object whose 'action' is a string or null")
    score = value.get("score")
    label = " / ".join(str(value[k]) for k in ("method", "split") if value.get(k) is not None) or "episode"
    return RecordedEpisode(goal, instruction, [t["action"] or "" for t in turns],
                           float(score) if isinstance(score, (int, float)) else None, where, label,
                           [{k: t.get(k) for k in ("thought", "reply", "valid_action", "format_error")} for t in turns],
                           bool(value.get("truncated", False)))


def read_episodes(path: str | os.PathLike) -> list[RecordedEpisode]:
    """The episodes of a sessions file or an evaluation ``episodes.jsonl`` (told apart per line by ``format``).

    Raises:
        FileNotFoundError: no such file (the message says which commands write one).
        ValueError: a line that is neither kind of record; the message names the file and line.
    """
    path = Path(path)
    hint = f"{EPISODES_HINT}, or {RECORD_HINT}"
    return [(_session if isinstance(value, dict) and "format" in value else _evaluated)(value, f"{path}:{number}")
            for number, value in _json_lines(path, hint)]


def check_episode(shop: WebShop, episode: RecordedEpisode) -> None:
    """Check that ``episode`` was recorded on ``shop``'s goals: its goal exists and has the recorded instruction.

    Raises:
        ValueError: the goal index is out of range or its instruction differs (another catalog, goal kind or
            seed); the message names the record and what to pass instead.
    """
    settings = "serve it with the catalog it was recorded on (--data-dir, --goals, --seed)"
    if episode.goal_index >= len(shop.goals):
        raise ValueError(f"{episode.source}: goal_index {episode.goal_index} is out of range: this catalog has "
                         f"{len(shop.goals)} goals ({shop!r}); {settings}")
    instruction = shop.goals[episode.goal_index]["instruction_text"]
    if instruction != episode.instruction:
        raise ValueError(f"{episode.source}: goal {episode.goal_index} of this catalog is {instruction!r}, but the "
                         f"record's is {episode.instruction!r}; {settings}")


def replay(env: WebShopEnv, episode: RecordedEpisode, steps: int | None = None) -> float:
    """Reset ``env`` to the episode's goal and take its first ``steps`` actions (all when None).

    Returns:
        The WebShop score of the last step taken (the score at Buy Now when that was a purchase, else 0).

    Raises:
        IndexError: the goal index is out of range for ``env.shop``.
        ValueError: ``steps`` is outside [0, len(actions)].
    """
    steps = len(episode.actions) if steps is None else steps
    if not 0 <= steps <= len(episode.actions):
        raise ValueError(f"steps must be in [0, {len(episode.actions)}] for {episode.source}, got {steps}")
    env.reset(episode.goal_index)
    score = 0.0
    for action in episode.actions[:steps]:
        _, score, _, _ = env.step(action)
    return score
