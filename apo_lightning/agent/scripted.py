"""Scripted WebShop policies: random, the WebShop paper's rule baseline, and a goal-aware oracle.

Each policy sees what an agent sees (observation and available actions) plus, for the oracle only, the goal dict.
``run_episode`` plays one goal to the end; ``evaluate`` plays a list of goals and reports the paper's metrics.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from ..webshop import WebShopEnv
from ..webshop.reward import token_set_ratio

_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars\s*$")
NAV_BUTTONS = {"back to search", "< prev", "next >", "description", "features", "reviews", "attributes", "buy now",
               "search"}


class ScriptedPolicy(Protocol):
    """A policy that picks one action string per step."""

    def reset(self, goal: dict) -> None:
        """Start an episode for ``goal`` (only the oracle may read it)."""

    def act(self, observation: str, available_actions: dict[str, Any]) -> str:
        """Return the next action, ``search[...]`` or ``click[...]``."""


def instruction_of(observation: str) -> str:
    """The instruction shown on a page: the node after 'Instruction:' in ``text`` or ``text_rich`` mode.

    Raises:
        ValueError: the observation shows no instruction (the done page).
    """
    parts = observation.split(" [SEP] ") if " [SEP] " in observation else observation.split("\n")
    for i, part in enumerate(parts[:-1]):
        if part.strip() == "Instruction:":
            return parts[i + 1]
    raise ValueError("the observation shows no instruction")


def strip_price(instruction: str) -> str:
    """The instruction without its trailing ', and price lower than X dollars' clause."""
    return _PRICE_CLAUSE.sub("", instruction)


def product_links(available_actions: dict[str, Any]) -> list[str]:
    """The lower-cased ASINs listed on a results page, in rank order."""
    return [c for c in available_actions["clickables"] if c not in NAV_BUTTONS and re.fullmatch(r"[0-9a-z]{10}", c)]


class RandomPolicy:
    """Uniform over the available actions: ``search[<instruction>]`` when there is a search bar, else any click
    except the refused 'search'."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def reset(self, goal: dict) -> None:
        pass

    def act(self, observation: str, available_actions: dict[str, Any]) -> str:
        actions = [f"click[{c}]" for c in available_actions["clickables"] if c != "search"]
        if available_actions["has_search_bar"]:
            actions.append(f"search[{instruction_of(observation)}]")
        return self.rng.choice(actions)


class RulePolicy:
    """The WebShop paper's rule baseline: search the instruction, click the first result, buy (Yao et al. 2022, §5)."""

    def reset(self, goal: dict) -> None:
        self.clicked = False

    def act(self, observation: str, available_actions: dict[str, Any]) -> str:
        clickables = available_actions["clickables"]
        if available_actions["has_search_bar"]:
            return f"search[{instruction_of(observation)}]"
        if "buy now" in clickables:
            return "click[buy now]"
        links = product_links(available_actions)
        if links and not self.clicked:
            self.clicked = True
            return f"click[{links[0]}]"
        return "click[back to search]"


class OraclePolicy:
    """The goal-aware ceiling and SFT demonstrator.

    It searches with queries built from the instruction text only (first without the price clause, then also
    without the goal's option clause), pages through the results until the target ASIN is listed, opens it,
    clicks the goal's option values (the closest clickable value for human goals' free-text options) and buys.
    When no query lists the target it buys the first result of the first query with the same options.
    """

    def reset(self, goal: dict) -> None:
        self.goal = goal
        self.target = goal["asin"].lower()
        self.queries = self._queries(goal)
        self.query_index = 0
        self.fallback = False
        self.pending_options: list[str] | None = None

    @staticmethod
    def _queries(goal: dict) -> list[str]:
        text = strip_price(goal["instruction_text"])
        queries = [text]
        options = goal["goal_options"]
        if isinstance(options, dict) and options:
            option_text = " with " + ", and ".join(f"{k}: {v}" for k, v in options.items())
            if text.endswith(option_text):
                queries.append(text[: -len(option_text)])
        return queries

    def _option_clicks(self, clickables: list[str]) -> list[str]:
        options = self.goal["goal_options"]
        wanted = list(options.values()) if isinstance(options, dict) else list(options)
        values = [c for c in clickables if c not in NAV_BUTTONS]
        clicks = []
        for value in wanted:
            if value in values:
                clicks.append(value)
            elif values:  # human goals name options in free text: take the closest value if it is close
                best = max(values, key=lambda v: token_set_ratio(v, value))
                if token_set_ratio(best, value) > 85:
                    clicks.append(best)
        return clicks

    def act(self, observation: str, available_actions: dict[str, Any]) -> str:
        clickables = available_actions["clickables"]
        if available_actions["has_search_bar"]:
            return f"search[{self.queries[min(self.query_index, len(self.queries) - 1)]}]"
        if "buy now" in clickables:  # on the item page
            if self.pending_options is None:
                self.pending_options = self._option_clicks(clickables)
            if self.pending_options:
                return f"click[{self.pending_options.pop(0)}]"
            return "click[buy now]"
        links = product_links(available_actions)
        if self.target in links:
            return f"click[{self.target}]"
        if self.fallback and links:
            return f"click[{links[0]}]"
        if links and "next >" in clickables:  # page on while the page lists products
            return "click[next >]"
        self.query_index += 1
        if self.query_index >= len(self.queries):
            self.fallback, self.query_index = True, 0
        return "click[back to search]"


POLICIES = {"random": RandomPolicy, "rule": RulePolicy, "oracle": OraclePolicy}


def make_policy(name: str, seed: int = 0) -> ScriptedPolicy:
    """A scripted policy by name: "random" | "rule" | "oracle".

    Raises:
        ValueError: unknown name.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown scripted policy {name!r}; expected one of {sorted(POLICIES)}")
    return RandomPolicy(seed) if name == "random" else POLICIES[name]()


@dataclass
class EpisodeResult:
    """One finished episode: goal index, reward (0…1 WebShop score), steps, the actions and the final info."""

    goal_index: int
    reward: float
    steps: int
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @property
    def success(self) -> bool:
        """WebShop success: score exactly 1.0."""
        return self.reward == 1.0


def run_episode(env: WebShopEnv, policy: ScriptedPolicy, goal_index: int) -> EpisodeResult:
    """Play goal ``goal_index`` until the episode ends (Buy Now or the env's step limit)."""
    observation = env.reset(goal_index)
    policy.reset(env.goal)
    result = EpisodeResult(goal_index, 0.0, 0, observations=[observation])
    done = False
    while not done:
        action = policy.act(observation, env.available_actions())
        observation, reward, done, info = env.step(action)
        result.actions.append(action)
        result.observations.append(observation)
        result.reward, result.steps, result.info = reward, info["num_steps"], info
        if env.max_steps is None and result.steps >= 1000:
            raise RuntimeError(f"policy did not finish goal {goal_index} in 1000 steps; set max_steps")
    return result


def summarize(results: Iterable[EpisodeResult]) -> dict[str, float]:
    """The paper's metrics: success_rate (fraction with score 1.0), score (100 × mean reward), avg_steps, episodes."""
    results = list(results)
    n = len(results)
    return {
        "success_rate": sum(r.success for r in results) / n if n else 0.0,
        "score": 100.0 * sum(r.reward for r in results) / n if n else 0.0,
        "avg_steps": sum(r.steps for r in results) / n if n else 0.0,
        "episodes": n,
    }
