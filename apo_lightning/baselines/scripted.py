"""Scripted WebShop policies: random, the WebShop paper's rule baseline, and a goal-aware oracle.

Each policy sees what an agent sees (observation and available actions) plus, for the oracle only, the goal dict.
:func:`scripted_steps` is the one loop that plays a scripted policy through an episode (the tokenizer corpus, the
turn drills and :func:`play_episode` all walk it); :func:`play_episode` records the episode as a ``Trajectory``, so
scripted baselines go through the same metrics and reports as language-model policies.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

from ..rollout.trajectory import Trajectory, Turn
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


def said_words(instruction: str, phrases: list[str]) -> str:
    """The parts of ``instruction`` that say ``phrases`` (each found as whole words, any case), in the order the
    instruction says them, as it writes them, joined by spaces; overlapping parts are joined into one. A phrase the
    instruction does not say is left out.

    ``said_words("I need decorative pillows. It should be double sided. Keep it under $50.", ["decorative pillows",
    "double sided"])`` is ``"decorative pillows double sided"``.
    """
    spans = sorted(span for span in (_whole_words(instruction, p) for p in phrases if p) if span is not None)
    parts, end = [], -1
    for start, stop in spans:
        if stop <= end:
            continue
        parts.append(instruction[max(start, end):stop].strip())
        end = stop
    return " ".join(p for p in parts if p)


def _whole_words(text: str, phrase: str) -> tuple[int, int] | None:
    """Where ``phrase`` first occurs in ``text`` as whole words, any case (None: nowhere)."""
    match = re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text, re.IGNORECASE)
    return match.span() if match else None


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

    It searches with queries made of the instruction's own words (:meth:`queries_for`), pages through the results
    until the target ASIN is listed, opens it, clicks the goal's option values (the closest clickable value for
    human goals' free-text options) and buys. When no query lists the target it buys the first result of the
    first query with the same options.
    """

    def reset(self, goal: dict) -> None:
        self.goal = goal
        self.target = goal["asin"].lower()
        self.queries = self.queries_for(goal)
        self.query_index = 0
        self.fallback = False
        self.pending_options: list[str] | None = None

    @staticmethod
    def queries_for(goal: dict) -> list[str]:
        """The oracle's search queries for ``goal``, in the order it tries them.

        For the generator's instruction: the instruction without its price clause, then also without its option
        clause. For an instruction in other words (``webshop.wording``: the goal keeps the generator's text as
        ``original_instruction_text``), whose price and options may stand anywhere: the goal's query, attribute and
        option words as that instruction says them, in its order (:func:`said_words`), then the same without the
        option values; a policy imitating it learns to search with the words it reads, whatever the phrasing.
        """
        text = goal["instruction_text"]
        if goal.get("original_instruction_text", text) != text:
            options = goal["goal_options"]
            values = list(options.values()) if isinstance(options, dict) else list(options)
            facts = [goal["query"], *goal["attributes"]]
            queries = [said_words(text, facts + values), said_words(text, facts)]
            return [q for i, q in enumerate(queries) if q and q not in queries[:i]] or [text]
        text = strip_price(text)
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
    """A scripted policy by name: "random" | "rule" | "oracle" (``seed`` seeds the random policy).

    Raises:
        ValueError: unknown name.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown scripted policy {name!r}; expected one of {sorted(POLICIES)}")
    return RandomPolicy(seed) if name == "random" else POLICIES[name]()


@dataclass
class ScriptedStep:
    """One step of a scripted episode: the page and the action, then (once the env stepped) what it returned."""

    observation: str
    available_actions: dict
    action: str
    score: float = 0.0
    done: bool = False
    info: dict = field(default_factory=dict)


def scripted_steps(env: WebShopEnv, policy: ScriptedPolicy, goal_index: int) -> Iterator[ScriptedStep]:
    """Play ``policy`` on goal ``goal_index`` until the episode ends: the one scripted-episode loop.

    Each step is yielded while ``env`` still shows the page its action is taken on (a caller may read
    ``env.page``, ``env.num_steps``); when the caller asks for the next one, the env steps and the yielded
    :class:`ScriptedStep` is completed with the score, ``done`` and ``info`` the env returned.

    Raises:
        RuntimeError: the env has no step limit and the policy did not finish in 1,000 steps.
    """
    observation = env.reset(goal_index)
    policy.reset(env.goal)
    done = False
    while not done:
        available = env.available_actions()
        step = ScriptedStep(observation, available, policy.act(observation, available))
        yield step
        observation, step.score, done, step.info = env.step(step.action)
        step.done = done
        if env.max_steps is None and env.num_steps >= 1000 and not done:
            raise RuntimeError(f"policy did not finish goal {goal_index} in 1000 steps; set max_steps")


def play_episode(env: WebShopEnv, policy: ScriptedPolicy, goal_index: int) -> Trajectory:
    """One episode of a scripted policy as a ``Trajectory``: each action is a turn with ``reply = action`` and no
    thought; the reward is the score (a scripted policy makes no format errors)."""
    steps = list(scripted_steps(env, policy, goal_index))
    trajectory = Trajectory(goal_index, env.shop.goals[goal_index]["instruction_text"])
    trajectory.turns = [Turn(observation=s.observation, reply=s.action, thought="", action=s.action, format_error=None,
                             num_actions=1, score=s.score, done=s.done, valid_action=s.info["valid"],
                             generated_tokens=0, stop="answer") for s in steps]
    trajectory.finish(steps[-1].score, steps[-1].info, reward=steps[-1].score)
    return trajectory
