"""Evaluating a policy on goals: greedy episodes, and optionally K sampled episodes per goal (exploration).

Scripted policies (random, rule, oracle) and language-model policies go through the same metrics, reports and
comparison: both produce ``Trajectory`` objects.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Sequence

from tqdm import tqdm

from ..baselines.scripted import POLICIES, make_policy, play_episode
from ..rollout.chat import ChatFormat
from ..rollout.engine import RolloutEngine, rollout_goals
from ..rollout.trajectory import Trajectory
from ..utils.seeds import derive_seed
from ..webshop import WebShop, WebShopEnv
from .metrics import bootstrap_interval, pass_at_k, trajectory_metrics, wilson_interval

SCRIPTED = tuple(sorted(POLICIES))


def play_scripted(name: str, shop: WebShop, goals: Sequence[int], max_steps: int = 15, seed: int = 0,
                  observation_mode: str = "text", progress: bool = True) -> list[Trajectory]:
    """Episodes of the scripted policy ``name`` (random | rule | oracle) on ``goals``; ``seed`` seeds random."""
    env = WebShopEnv(shop, observation_mode, max_steps=max_steps)
    policy = make_policy(name, seed=seed)
    return [play_episode(env, policy, g) for g in tqdm(goals, desc=name, file=sys.stderr, disable=not progress)]


def greedy_summary(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """``eval.metrics.trajectory_metrics`` plus the Wilson 95 % interval of the success rate."""
    metrics = trajectory_metrics(trajectories)
    metrics["success_rate_low"], metrics["success_rate_high"] = wilson_interval(
        sum(t.success for t in trajectories), len(trajectories))
    return metrics


def sampled_summary(samples: Sequence[Trajectory], seed: int = 0) -> dict[str, float]:
    """Sampled success and pass@k (k = 1 … K) over K samples per goal, each with a 95 % bootstrap interval over goals.

    Raises:
        ValueError: goals have different numbers of samples.
    """
    by_goal: dict[int, list[bool]] = defaultdict(list)
    for t in samples:
        by_goal[t.goal_index].append(t.success)
    sizes = {len(v) for v in by_goal.values()}
    if len(sizes) != 1:
        raise ValueError(f"every goal needs the same number of samples, got {sorted(sizes)}")
    k_max = sizes.pop()
    correct = [sum(v) for v in by_goal.values()]
    out: dict[str, float] = {"samples_per_goal": k_max}
    rates = [c / k_max for c in correct]
    out["sampled_success_rate"] = sum(rates) / len(rates)
    out["sampled_success_rate_low"], out["sampled_success_rate_high"] = bootstrap_interval(
        lambda x: x.mean(), rates, seed=seed)
    for k in range(1, k_max + 1):
        values = [pass_at_k(k_max, c, k) for c in correct]
        out[f"pass_at_{k}"] = sum(values) / len(values)
        out[f"pass_at_{k}_low"], out[f"pass_at_{k}_high"] = bootstrap_interval(lambda x: x.mean(), values, seed=seed)
    return out


def sample_policy(model, tokenizer, shop: WebShop, goals: Sequence[int], chat: ChatFormat, samples: int,
                  temperature: float, top_p: float = 1.0, max_new_tokens: int = 64, batch_size: int = 32,
                  max_steps: int = 15, observation_mode: str = "text", seed: int = 0,
                  progress: bool = True) -> list[Trajectory]:
    """``samples`` sampled episodes per goal at ``temperature`` / ``top_p`` (seeded by ``seed``)."""
    engine = RolloutEngine(model, tokenizer, chat, max_new_tokens=max_new_tokens, temperature=temperature,
                           top_p=top_p)
    repeated = [g for g in goals for _ in range(samples)]
    return rollout_goals(engine, shop, repeated, batch_size, derive_seed(seed, "evaluate-samples"), observation_mode,
                         max_steps, progress=progress, description="sampled episodes")
