"""Oracle demonstrations in the chat format, for supervised warm-starting (the WebShop paper's IL stage).

The goal-aware oracle (``scripted.OraclePolicy``) picks each action; a short templated thought explains it. The
rollout engine renders the episode exactly as it renders the policy's own rollouts, so SFT trains on the very
token layout that RL later samples from.

With ``noise`` > 0 the demonstrations are DART's (Laskey et al. 2017, "DART: Noise Injection for Robust Imitation
Learning"): at a decision the demonstrator sometimes takes a wrong click — another product on a results page,
another value of an option — and then recovers (back to the results, or the right value). The mistake stays in the
context but is masked out of the loss; the recovery is learned. A policy trained on them has seen, and knows how to
leave, states off the oracle's path.
"""

from __future__ import annotations

import random
from typing import Sequence

from ..rollout.engine import RolloutEngine
from ..rollout.trajectory import Trajectory
from ..utils.seeds import derive_seed
from ..webshop import WebShopEnv
from .scripted import OraclePolicy, product_links


def reply_for(action: str, env: WebShopEnv) -> str:
    """A reply with a short thought for ``action`` taken on the env's current page."""
    name, arg = action.split("[", 1)
    arg = arg[:-1]
    if name == "search":
        thought = "I search for the product in the instruction."
    elif arg == "buy now":
        thought = "The options match the instruction, so I buy it."
    elif arg == "next >":
        thought = "No product on this page matches, so I look at the next page."
    elif arg == "back to search":
        thought = "The results do not match, so I search again."
    elif env.page.kind == "search_results":
        # the env lower-cases the argument, so write the ASIN as the page shows it: a plain copy for the model
        arg = arg.upper()
        action = f"click[{arg}]"
        thought = f"{arg} matches the instruction."
    else:
        option = env.page.clickables.get(arg)
        thought = f"The instruction asks for {option.option}: {arg}." if option and option.option else "Next step."
    return f"<think>{thought}</think><answer>{action}</answer>"


#: Steps a demonstration must have left for a mistake: the mistake, its undo, and the oracle's own remaining steps.
MISTAKE_MARGIN = 6


class OracleDemonstrator:
    """Replies of the oracle for one episode (call it with the env before each turn).

    A call returns the reply text, or ``(reply, False)`` for a mistake: the rollout engine keeps that reply in the
    context and out of the loss. The next call returns the mistake's undo.

    Args:
        noise: probability of a wrong click at each decision (DART, module docstring); 0 = the plain oracle.
        seed: seeds the mistakes.
    """

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        self.policy = OraclePolicy()
        self.goal_index: int | None = None
        self.noise = noise
        self.rng = random.Random(seed)
        self.recovery: str | None = None  # the action that undoes the last mistake

    def __call__(self, env: WebShopEnv) -> str | tuple[str, bool]:
        if env.goal_index != self.goal_index or env.num_steps == 0:
            self.policy.reset(env.goal)
            self.goal_index = env.goal_index
            self.recovery = None
        if self.recovery is not None:
            action, self.recovery = self.recovery, None
            return reply_for(action, env)
        action = self.policy.act(env.observation, env.available_actions())
        if self.noise and self.rng.random() < self.noise:
            mistake = self._mistake(action, env)
            if mistake is not None:
                return reply_for(mistake, env), False
        return reply_for(action, env)

    def _mistake(self, action: str, env: WebShopEnv) -> str | None:
        """A wrong click in place of ``action`` with its undo remembered, or None when ``action`` is no choice."""
        clicked = action[len("click["):-1].lower() if action.startswith("click[") else None
        steps_left = env.max_steps - env.num_steps if env.max_steps is not None else 1000
        if clicked is None or steps_left < MISTAKE_MARGIN:  # a mistake costs two steps; keep room to finish
            return None
        links = product_links(env.available_actions())
        if env.page.kind == "search_results" and clicked in links:
            others = [c for c in links if c != clicked]
            if others:
                self.recovery = "click[< prev]"  # back to the results page, where the oracle clicks the target
                return f"click[{self.rng.choice(others).upper()}]"
        target = env.page.clickables.get(clicked) if env.page.kind == "item_page" else None
        if target is not None and target.kind == "option":
            values = [c for c, k in env.page.clickables.items()
                      if c != clicked and k.kind == "option" and k.option == target.option]
            if values:
                self.recovery = action  # the right value of the same option replaces the wrong one
                return f"click[{self.rng.choice(values)}]"
        return None


def oracle_demonstrations(engine: RolloutEngine, envs: Sequence[WebShopEnv], goal_indices: Sequence[int],
                          successful_only: bool = True, noise: float = 0.0, seed: int = 0,
                          copies: int = 1) -> list[Trajectory]:
    """Oracle trajectories for ``goal_indices``, rendered and tokenized by ``engine``.

    Args:
        successful_only: keep only demonstrations that reach score 1.0 (the oracle's rare misses would teach
            wrong purchases).
        noise: DART's mistake probability per decision (module docstring); 0 = the plain oracle.
        seed: seeds the mistakes (each demonstration gets its own seed, derived from ``seed``, the goal and the copy).
        copies: demonstrations per goal (with noise, each makes its own mistakes).
    """
    trajectories: list[Trajectory] = []
    episodes = [(g, copy) for g in goal_indices for copy in range(copies)]
    for start in range(0, len(episodes), len(envs)):
        chunk = episodes[start:start + len(envs)]
        demonstrators = [OracleDemonstrator(noise, derive_seed(seed, "dart", g, copy)) for g, copy in chunk]
        chunk = [g for g, _ in chunk]
        trajectories += engine.rollout(envs[: len(chunk)], chunk, seed=0, demonstrators=demonstrators)
    return [t for t in trajectories if t.success or not successful_only]
