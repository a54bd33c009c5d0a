"""The WebShop settings of a run (``EnvConfig``): which data and goals, which split, how an episode runs."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Literal

from .datadir import resolve_data_dir
from .env import WebShopEnv
from .shop import WebShop
from .wording import Wording, check_wording, reworded_shop

SplitScheme = Literal["webshop", "verl"]
ObservationMode = Literal["text", "text_rich"]
GoalKind = Literal["synthetic", "human"]


@dataclass
class EnvConfig:
    """Which WebShop data and how episodes run.

    Args:
        data_dir: WebShop data folder; "synthetic" = the generated synthetic catalog (data/synthetic/seed0); None =
            the data-location rule of every command (``$APO_WEBSHOP_DATA``, else ``data/webshop_1k`` if present, else
            the synthetic catalog; printed at start).
        goals: "synthetic" (attribute-based, as the paper's IL/RL) or "human" goals.
        seed: the catalog seed: prices, goals and their order (233 reproduces WebShop). Not the run seed.
        split_scheme: "webshop" (test [0, 500), val [500, 1500), train [1500, N)) or "verl" (test [0, 500),
            train [500, N)).
        observation_mode: "text" or "text_rich".
        max_steps: env steps (turns) per episode before it ends with reward 0.
        wording: the words of the instructions: "original" (the goal generator's), or each goal's instruction
            rewritten from its own fields in the "train" or "heldout" family of phrasings (``webshop.wording``;
            evaluate with "heldout"). The goals' fields and the reward are unchanged.
        wording_seed: seeds the rewording; with the goal index it fixes each goal's text.
    """

    data_dir: str | None = None
    goals: GoalKind = "synthetic"
    seed: int = 233
    split_scheme: SplitScheme = "webshop"
    observation_mode: ObservationMode = "text"
    max_steps: int = 15
    wording: Wording = "original"
    wording_seed: int = 0

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
        """Every setting, for the key of a cache made under them (V* tables, demonstrations); the wording settings
        only when the wording is not "original", so that keys made before they existed stay the same."""
        parts = asdict(self)
        if self.wording == "original":
            del parts["wording"], parts["wording_seed"]
        return parts

    def envs(self, n: int) -> list[WebShopEnv]:
        """``n`` fresh envs over the shared catalog."""
        shop = self.shop()
        return [WebShopEnv(shop, self.observation_mode, max_steps=self.max_steps) for _ in range(n)]

    def split(self, name: str) -> list[int]:
        """Goal indices of a split."""
        return list(self.shop().split(name, self.split_scheme))


_ANNOUNCED: set[str] = set()


@lru_cache(maxsize=4)
def _load_shop(data_dir: str | None, goals: str, seed: int) -> WebShop:
    return WebShop.load(data_dir, goals=goals, seed=seed)


@lru_cache(maxsize=4)
def _reworded_shop(data_dir: str | None, goals: str, seed: int, wording: str, wording_seed: int) -> WebShop:
    return reworded_shop(_load_shop(data_dir, goals, seed), wording, wording_seed)
