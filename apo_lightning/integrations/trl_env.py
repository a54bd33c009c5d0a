"""WebShop as a TRL multi-turn environment: ``search`` and ``click`` are the tools, the WebShop score the reward.

    from functools import partial
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from apo_lightning.integrations.trl_env import WebShopToolEnv, goal_rows

    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=Dataset.from_list(goal_rows("train")),
                          environment_factory=partial(WebShopToolEnv, data_dir="synthetic", split="train"))

The contract of TRL's ``GRPOTrainer(environment_factory=...)`` (trl 1.16, ``pip install -e ".[trl]"``): the trainer
calls the factory for each rollout slot and reuses the instances; before a rollout it calls ``reset(**row)`` with the
fields of the dataset row and appends the string it returns to the row's last user message; every public method
other than ``reset`` and ``get_reward`` is a tool, described to the model from its signature and Google-style
docstring (transformers' ``get_json_schema``); what a tool returns is the tool message, and an exception it raises
reaches the model as ``{"error": message}``; ``get_reward()`` scores the finished rollout (weight 1, logged under the
class name). This module imports nothing of TRL: the contract is a plain class.

Every rollout of a GRPO group must play the same goal, so the goal comes from the dataset row (``goal_index``,
which :func:`goal_rows` writes), never from a draw.
"""

from __future__ import annotations

import os
from typing import Any

from ..webshop.gym_env import WebShopGymEnv

#: The user message before the first page (``reset`` appends the page: the instruction and the search box).
TASK_PROMPT = (
    "You are shopping in WebShop for the instruction on the page below. Call search(query) to search the shop and "
    "click(element) to open a product (its ASIN), choose its options and press 'Buy Now'. Your reward is the score "
    "of what you buy (1.0 when it matches the instruction).\n\n"
)


class WebShopToolEnv:
    """One WebShop episode per rollout, for TRL's ``environment_factory``: ``search`` and ``click`` are its tools.

    Args:
        data_dir: WebShop data folder, "synthetic" or None, as for ``WebShopGymEnv``.
        split: the goals rows may name: "train" | "val" | "test", or None for every goal.
        observation_mode: "text" or "text_rich": how the pages (the tools' results) are written.
        goals: "synthetic" or "human" goals.
        catalog_seed: the catalog seed (233 reproduces WebShop).
        max_steps: tool calls per episode; the call that reaches it without a purchase ends the episode with reward
            0. None = no limit.

    Attributes:
        env: the wrapped ``WebShopGymEnv``.
        actions: the actions of the current episode that reached the env, in order (``"search[...]"``,
            ``"click[...]"``), invalid ones included.
        info: the env's ``info`` after the last reset or step (``goal_index``, ``score``, ``won``, ...).
        ended: whether the episode has ended (a purchase or the step limit).

    Raises:
        ValueError: a setting ``WebShopGymEnv`` refuses (the message names it).
        WebShopDataError: a missing or malformed data file.
    """

    def __init__(self, data_dir: str | os.PathLike | None = "synthetic", split: str | None = "train",
                 observation_mode: str = "text", goals: str = "synthetic", catalog_seed: int = 233,
                 max_steps: int | None = 15):
        self.env = WebShopGymEnv(data_dir=data_dir, split=split, observation_mode=observation_mode, goals=goals,
                                 catalog_seed=catalog_seed, max_steps=max_steps)
        self.actions: list[str] = []
        self.info: dict[str, Any] = {}
        self.ended = True

    def reset(self, goal_index: int | None = None, **row: Any) -> str:
        """Start the episode of a dataset row (called by the trainer, not a tool).

        Args:
            goal_index: the goal to play, an index into the catalog's goals inside the split.
            row: the row's other fields (``prompt``, ...), unused.

        Returns:
            The search page, which shows the instruction.

        Raises:
            ValueError: the row has no ``goal_index`` (every rollout of a group must play the same goal, so it is not
                drawn here; :func:`goal_rows` writes it), or it lies outside the split.
        """
        if goal_index is None:
            raise ValueError(f"the dataset row must hold a 'goal_index' (see goal_rows()); got fields {sorted(row)}")
        observation, self.info = self.env.reset(options={"goal_index": goal_index})
        self.actions, self.ended = [], False
        return observation

    def search(self, query: str) -> str:
        """Search the shop, as typing the query into the search box and pressing Search.

        Args:
            query: the search keywords, e.g. "red running shoes for men".

        Returns:
            The first results page: up to ten products, each as its ASIN, title and price, and the page's buttons.
        """
        return self._act(f"search[{query}]")

    def click(self, element: str) -> str:
        """Click an element of the current page: a product's ASIN on a results page, an option value on a product
        page, or a button ("Buy Now", "Next >", "< Prev", "Back to Search", "Description", "Features", "Reviews").

        Args:
            element: the element's text as the page shows it, e.g. "B07XYZ1234", "large", "Buy Now".

        Returns:
            The page the click leads to; after "Buy Now", the last page, with the score of the purchase.
        """
        return self._act(f"click[{element}]")

    def get_reward(self) -> float:
        """The episode's WebShop score (0…1): the score of the purchase, 0 without one (called by the trainer)."""
        return float(self.info.get("score", 0.0))

    def _act(self, action: str) -> str:
        """Step the env; an action it refuses raises ValueError naming what the page offers (TRL passes the message
        to the model), and so does any call once the episode has ended."""
        if self.ended:
            raise ValueError("the episode has ended (a purchase or the step limit); no more actions are possible")
        observation, _, terminated, truncated, self.info = self.env.step(action)
        self.actions.append(action)
        self.ended = terminated or truncated
        limit = " The step limit has ended the episode without a purchase." if truncated else ""
        if not self.info["valid"]:
            available = self.info["available_actions"]
            offered = ["search" if available["has_search_bar"] else None] + [
                f"click {c!r}" for c in available["clickables"] if c != "search"]
            raise ValueError(f"{action} is not possible on this page; it offers: "
                             f"{', '.join(o for o in offered if o)}.{limit}")
        return observation + ("\n\n" + limit.strip() if limit else "")


def goal_rows(split: str = "train", data_dir: str | os.PathLike | None = "synthetic", goals: str = "synthetic",
              catalog_seed: int = 233, limit: int | None = None, prompt: str = TASK_PROMPT) -> list[dict[str, Any]]:
    """A training set for ``GRPOTrainer`` (``datasets.Dataset.from_list(goal_rows(...))``): one row per goal of the
    split, ``{"prompt": [{"role": "user", "content": prompt}], "goal_index": i}``.

    Args:
        split: "train" | "val" | "test".
        data_dir, goals, catalog_seed: the catalog, as for :class:`WebShopToolEnv` (use the same values there).
        limit: the first ``limit`` goals of the split only; None = all.
        prompt: the user message the first page is appended to.

    Raises:
        ValueError: an unknown split, or ``limit`` < 1.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1 or None, got {limit}")
    indices = WebShopGymEnv(data_dir=data_dir, split=split, goals=goals, catalog_seed=catalog_seed).goal_indices
    return [{"prompt": [{"role": "user", "content": prompt}], "goal_index": i} for i in indices[:limit]]
