"""The WebShop settings of a run (``EnvConfig``): which data and goals, which split, how an episode runs."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from .datadir import resolve_data_dir
from .env import WebShopEnv
from .shop import WebShop

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
    """

    data_dir: str | None = None
    goals: GoalKind = "synthetic"
    seed: int = 233
    split_scheme: SplitScheme = "webshop"
    observation_mode: ObservationMode = "text"
    max_steps: int = 15

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
        """The loaded catalog (cached per process); ``announce`` as for :meth:`resolved_data_dir`."""
        return _load_shop(self.resolved_data_dir(announce), self.goals, self.seed)

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
