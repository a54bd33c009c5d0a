"""Settings shared by the Lightning data modules: which WebShop, how episodes run, how rollouts sample."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import torch
from lightning.pytorch import LightningDataModule

from ..baselines.corpus import ensure_tiny_policy
from ..models.loading import looks_local
from ..models.tiny import TinyPolicySpec
from ..rollout.chat import ChatFormat
from ..webshop import WebShop, WebShopEnv
from ..webshop.datadir import resolve_data_dir

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

    def resolved_data_dir(self) -> str | None:
        """The data folder the rule chooses (None: the synthetic catalog); says where it came from once per process."""
        path, description = resolve_data_dir(self.data_dir)
        if description not in _ANNOUNCED:
            _ANNOUNCED.add(description)
            if os.environ.get("LOCAL_RANK", "0") == "0":
                print(description, file=sys.stderr)
        return str(path) if path is not None else None

    def shop(self) -> WebShop:
        """The loaded catalog (cached per process)."""
        return _load_shop(self.resolved_data_dir(), self.goals, self.seed)

    def envs(self, n: int) -> list[WebShopEnv]:
        """``n`` fresh envs over the shared catalog."""
        shop = self.shop()
        return [WebShopEnv(shop, self.observation_mode, max_steps=self.max_steps) for _ in range(n)]

    def split(self, name: str) -> list[int]:
        """Goal indices of a split."""
        return list(self.shop().split(name, self.split_scheme))


@dataclass
class RolloutSettings:
    """How training rollouts sample replies.

    Args:
        temperature: sampling temperature (> 0). The losses always read the untempered log π and log π_ref, so a
            sharper sampler (T < 1, nearer the greedy policy that is evaluated) changes which trajectories are
            regressed on, not the regression target.
        top_p: nucleus sampling mass (1.0 = off).
        sampled_turn_prob: turn-level exploration (``RolloutEngine``): each turn is sampled with this probability
            and decoded greedily otherwise, so a trajectory departs from the greedy one that evaluation plays at a
            few turns (1.0 = every turn sampled).
        max_new_tokens: reply token limit per turn (training, validation and test rollouts alike).
        valid_clicks: constrain every click argument to the page's clickables (``rollout.constrained``) in all of
            the run's rollouts: stage 1, training, validation and test (off: the policy writes what it writes).
        click_choice: with ``valid_clicks``, "token" (the mask follows the policy token by token) or "sequence"
            (the whole clickable is chosen by the policy's probability of its text; ``RolloutEngine``).
        prefill: how the engine encodes a turn's new tokens: "batched" (one left-padded batch) or "per_row" (each
            episode on its own: no compute on padding; the same samples).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    sampled_turn_prob: float = 1.0
    max_new_tokens: int = 64
    valid_clicks: bool = False
    click_choice: Literal["token", "sequence"] = "token"
    prefill: Literal["batched", "per_row"] = "batched"


class WebShopDataModule(LightningDataModule):
    """What every data module of this project shares: its rank and world size, the catalog, and moving a batch dict
    to the device (trajectories and other Python objects stay as they are). Subclasses set ``self.env``."""

    env: EnvConfig

    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    @property
    def shop(self) -> WebShop:
        """The catalog (goals, products, prices) the episodes run in."""
        return self.env.shop()

    def transfer_batch_to_device(self, batch, device, dataloader_idx: int):
        if isinstance(batch, dict):
            return {k: self.transfer_batch_to_device(v, device, dataloader_idx) if isinstance(v, dict) else
                    (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
        return batch


_ANNOUNCED: set[str] = set()


@lru_cache(maxsize=4)
def _load_shop(data_dir: str | None, goals: str, seed: int) -> WebShop:
    return WebShop.load(data_dir, goals=goals, seed=seed)


def ensure_policy(model_name_or_path: str, tiny: TinyPolicySpec | None, env: EnvConfig, chat: ChatFormat) -> None:
    """Make sure the policy directory exists: build the (untrained) tiny policy there when ``tiny`` is set.

    Raises:
        FileNotFoundError: no such directory and no ``tiny`` spec to build one, saying how to make it.
    """
    path = Path(model_name_or_path)
    if tiny is not None:
        ensure_tiny_policy(path, tiny, env.shop(), chat, env.split("train"))
    elif looks_local(model_name_or_path) and not path.exists():
        raise FileNotFoundError(
            f"policy directory {path} does not exist; train it first (e.g. `python cli.py fit --config "
            "configs/sft_tiny.yaml` exports data/models/tiny-sft) or set model_name_or_path")
