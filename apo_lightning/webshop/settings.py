"""The WebShop settings of a run: which data and goals, which split, how an episode runs (``EnvConfig``), and what a
finished episode earns (``RewardSettings``)."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Literal, get_args

from ..utils.seeds import derive_seed
from ..utils.settings import check_settings
from .datadir import resolve_data_dir
from .env import WebShopEnv
from .shop import WebShop
from .wording import Wording, check_wording, drawn_goal, reworded_shop

ObservationMode = Literal["text", "text_rich"]
GoalKind = Literal["synthetic", "human"]
RewardKind = Literal["score", "success"]


@dataclass(frozen=True)
class RewardSettings:
    """The RL reward r(x, y) of a finished episode, from WebShop's score (``reward.get_reward``): what rollouts,
    stage 1, evaluation and every objective see.

    Args:
        kind: what a finished episode earns before the format penalty. ``"score"``: the WebShop score at Buy Now,
            0…1, 0 without a purchase (RAGEN). ``"success"``: 1 if that score is exactly 1.0, else 0 (verl-agent /
            GiGPO, Feng et al. 2025, reward WebShop episodes by task success, 10 × won). The score charges a purchase
            of the right product with a wrong option about 0.2; ``"success"`` charges it the full 1.
        format_penalty: reward added per turn whose reply has no parseable action (RAGEN: −0.1).

    Raises:
        ValueError: ``kind`` is not "score" or "success".
    """

    kind: RewardKind = "score"
    format_penalty: float = -0.1

    def __post_init__(self) -> None:
        check_settings("reward.", [("kind", self.kind, self.kind in get_args(RewardKind),
                                    f"one of {get_args(RewardKind)}")])

    def __call__(self, score: float, format_errors: int) -> float:
        """r(x, y): the episode's score or success (``kind``) plus ``format_penalty`` per reply without an action.

        Args:
            score: the WebShop score at Buy Now, 0…1 (0 without a purchase).
            format_errors: replies with no parseable action.
        """
        earned = float(score == 1.0) if self.kind == "success" else score
        return earned + self.format_penalty * format_errors

    def key_parts(self) -> dict:
        """Every setting, for the key of a cache made under them (V* tables)."""
        return asdict(self)


@dataclass
class EnvConfig:
    """Which WebShop data and how episodes run.

    Args:
        data_dir: WebShop data folder; "synthetic" = the generated synthetic catalog (data/synthetic/seed0); None =
            the data-location rule of every command (``$APO_WEBSHOP_DATA``, else ``data/webshop_1k`` if present, else
            the synthetic catalog; printed at start).
        goals: "synthetic" (attribute-based, as the paper's IL/RL) or "human" goals.
        seed: the catalog seed: prices, goals and their order (233 reproduces WebShop). Not the run seed.
        observation_mode: "text" or "text_rich".
        max_steps: env steps (turns) per episode before it ends with reward 0.
        wording: the words of the instructions: "original" (the goal generator's), or each goal's instruction
            rewritten from its own fields in the "train" or "heldout" family of phrasings (``webshop.wording``;
            evaluate with "heldout"). The goals' fields and the reward are unchanged.
        wording_seed: seeds the rewording; with the goal index it fixes each goal's text.
        vary_wording: training that reads: every training episode (SFT demonstrations and turn drills, stage-1
            samples, stage-2 rollouts, V* refreshes) shows its goal's instruction drawn afresh for it
            (``wording.drawn_goal``: the "train" family, never "heldout"; seeded by the run seed, so a run
            reproduces and no two passes or samples need read alike). Evaluation episodes (validation, test,
            ``evaluate``) still show ``wording``.
        original_share: with ``vary_wording``, the share of training episodes that keep the generator's words, in
            [0, 1]. Why a quarter: the generator's one template stays learned from far fewer examples than the
            training family's many phrasings need, so a quarter of every pass keeps it in nearly every batch while
            three quarters teach the policy to read other words.

    Raises:
        ValueError: ``original_share`` outside [0, 1].
    """

    data_dir: str | None = None
    goals: GoalKind = "synthetic"
    seed: int = 233
    observation_mode: ObservationMode = "text"
    max_steps: int = 15
    wording: Wording = "original"
    wording_seed: int = 0
    vary_wording: bool = False
    original_share: float = 0.25

    def __post_init__(self) -> None:
        check_settings("env.", [("original_share", self.original_share, 0.0 <= self.original_share <= 1.0,
                                  "in [0, 1] (the share of training episodes in the generator's words)")])

    def resolved_data_dir(self, announce: bool = True) -> str | None:
        """The data folder the rule chooses (None: the synthetic catalog); with ``announce``, says where it came from
        once per process (on stderr, local rank 0 only)."""
        path, description = resolve_data_dir(self.data_dir)
        if announce and description not in _ANNOUNCED:
            _ANNOUNCED.add(description)
            if os.environ.get("LOCAL_RANK", "0") == "0":
                print(description, file=sys.stderr)
        return str(path) if path is not None else None

    def shop(self, announce: bool = True) -> WebShop:
        """The loaded catalog (cached per process), its goals in ``wording``; ``announce`` as for
        :meth:`resolved_data_dir`.

        Raises:
            ValueError: ``wording`` is not one of "original", "train", "heldout".
        """
        check_wording(self.wording)
        data_dir = self.resolved_data_dir(announce)
        if self.wording == "original":
            return _load_shop(data_dir, self.goals, self.seed)
        return _reworded_shop(data_dir, self.goals, self.seed, self.wording, self.wording_seed)

    def key_parts(self) -> dict:
        """Every setting, for the key of a cache made under them (V* tables, demonstrations)."""
        return asdict(self)

    def envs(self, n: int) -> list[WebShopEnv]:
        """``n`` fresh envs over the shared catalog."""
        shop = self.shop()
        return [WebShopEnv(shop, self.observation_mode, max_steps=self.max_steps) for _ in range(n)]

    def training_envs(self, goal_indices: Sequence[int], offset: int = 0, *, seed: int) -> list[WebShopEnv]:
        """One env per goal of ``goal_indices``, for training episodes: with ``vary_wording`` each over the catalog
        with its goal's instruction drawn afresh (``wording.drawn_goal``; episode ``i`` draws with
        ``derive_seed(seed, offset + i)``, so a list played in parts at their positions draws the same
        instructions); without it, :meth:`envs`.

        Args:
            goal_indices: the goals, one per episode (a goal repeated gets a draw per episode).
            offset: the position of ``goal_indices[0]`` in the whole list.
            seed: the draws' seed (derive it from the run seed, rank and purpose: ``utils.seeds.derive_seed``).
        """
        if not self.vary_wording:
            return self.envs(len(goal_indices))
        shop = self.shop()
        envs = []
        for i, goal_index in enumerate(goal_indices):
            goal = drawn_goal(shop.goals[goal_index], random.Random(derive_seed(seed, offset + i)), self.original_share)
            goals = _GoalsWithOne(shop.goals, goal_index, goal)  # the catalog and the search engine are shared
            envs.append(WebShopEnv(shop.with_goals(goals), self.observation_mode, max_steps=self.max_steps))
        return envs

    def split(self, name: str) -> list[int]:
        """Goal indices of a split: test [0, 500), val [500, 1500), train [1500, N)."""
        return list(self.shop().split(name))


_ANNOUNCED: set[str] = set()


class _GoalsWithOne(Sequence):
    """A read-only goal list: ``goals`` with goal ``index`` replaced by ``goal``, without copying the list (a
    catalog's goals may be many, and every training episode gets its own)."""

    def __init__(self, goals: Sequence[dict], index: int, goal: dict) -> None:
        self.goals, self.index, self.goal = goals, index, goal

    def __len__(self) -> int:
        return len(self.goals)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.goal if range(len(self))[i] == self.index else self.goals[i]


@lru_cache(maxsize=4)
def _load_shop(data_dir: str | None, goals: str, seed: int) -> WebShop:
    return WebShop.load(data_dir, goals=goals, seed=seed)


@lru_cache(maxsize=4)
def _reworded_shop(data_dir: str | None, goals: str, seed: int, wording: str, wording_seed: int) -> WebShop:
    return reworded_shop(_load_shop(data_dir, goals, seed), wording, wording_seed)
