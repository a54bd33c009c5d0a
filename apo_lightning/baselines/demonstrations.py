"""Oracle demonstrations in the chat format, for supervised warm-starting (the WebShop paper's IL stage).

The goal-aware oracle (``scripted.OraclePolicy``) picks each action; a short templated thought explains it. The
rollout engine renders the episode exactly as it renders the policy's own rollouts, so SFT trains on the very
token layout that RL later samples from.
"""

from __future__ import annotations

from typing import Sequence

from ..rollout.engine import RolloutEngine
from ..rollout.trajectory import Trajectory
from ..webshop import WebShopEnv
from .scripted import OraclePolicy


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


class OracleDemonstrator:
    """Replies of the oracle for one episode (call it with the env before each turn)."""

    def __init__(self) -> None:
        self.policy = OraclePolicy()
        self.goal_index: int | None = None

    def __call__(self, env: WebShopEnv) -> str:
        if env.goal_index != self.goal_index or env.num_steps == 0:
            self.policy.reset(env.goal)
            self.goal_index = env.goal_index
        action = self.policy.act(env.observation, env.available_actions())
        return reply_for(action, env)


def oracle_demonstrations(engine: RolloutEngine, envs: Sequence[WebShopEnv], goal_indices: Sequence[int],
                          successful_only: bool = True) -> list[Trajectory]:
    """Oracle trajectories for ``goal_indices``, rendered and tokenized by ``engine``.

    Args:
        successful_only: keep only demonstrations that reach score 1.0 (the oracle's rare misses would teach
            wrong purchases).
    """
    trajectories: list[Trajectory] = []
    for start in range(0, len(goal_indices), len(envs)):
        chunk = list(goal_indices[start:start + len(envs)])
        demonstrators = [OracleDemonstrator() for _ in chunk]
        trajectories += engine.rollout(envs[: len(chunk)], chunk, seed=0, demonstrators=demonstrators)
    return [t for t in trajectories if t.success or not successful_only]
