"""Evaluating a policy on goals: greedy episodes, and optionally K sampled episodes per goal (exploration).

Scripted policies (random, rule, oracle) and language-model policies go through the same metrics, reports and
comparison: both produce ``Trajectory`` objects.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal, Sequence

import torch
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


@dataclass
class PolicyRollouts:
    """Everything a process needs to roll out a model policy on goals (a picklable job for :func:`run_rollouts`).

    ``greedy`` decodes greedily; otherwise each goal is repeated ``samples`` times and sampled at ``temperature``
    and ``top_p``, each turn with probability ``sampled_turn_prob`` (greedily otherwise). ``valid_clicks`` constrains
    click arguments to the page's clickables (``rollout.constrained``), greedy and sampled, choosing the clickable
    as ``click_choice`` says (``RolloutEngine``). Chunk seeds derive from
    ``seed`` and ``purpose``.
    """

    model: str
    data_dir: str | None
    goal_kind: str
    catalog_seed: int
    chat: ChatFormat
    max_new_tokens: int
    batch_size: int
    max_steps: int
    seed: int
    purpose: str
    greedy: bool = True
    samples: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    sampled_turn_prob: float = 1.0
    valid_clicks: bool = False
    click_choice: Literal["token", "sequence"] = "token"
    gguf_file: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    threads: int = 1


def _rollout_part(job: PolicyRollouts, goals: list[int], offset: int, progress: bool) -> list[Trajectory]:
    """One process's share: ``goals`` (already repeated for samples), seeded as positions ``offset``…"""
    from ..models.loading import load_policy

    torch.set_num_threads(job.threads)
    shop = WebShop.load(job.data_dir, goals=job.goal_kind, seed=job.catalog_seed)
    model, tokenizer = load_policy(job.model, gguf_file=job.gguf_file, dtype=job.dtype, device=job.device)
    engine = RolloutEngine(model, tokenizer, job.chat, max_new_tokens=job.max_new_tokens, greedy=job.greedy,
                           temperature=job.temperature, top_p=job.top_p, sampled_turn_prob=job.sampled_turn_prob,
                           valid_clicks=job.valid_clicks, click_choice=job.click_choice)
    return rollout_goals(engine, shop, goals, job.batch_size, derive_seed(job.seed, job.purpose),
                         max_steps=job.max_steps, progress=progress, seed_offset=offset,
                         description="greedy episodes" if job.greedy else "sampled episodes")


def _rollout_part_star(args) -> list[Trajectory]:
    return _rollout_part(*args)


def run_rollouts(job: PolicyRollouts, goals: Sequence[int], processes: int = 1) -> list[Trajectory]:
    """Roll out ``job`` on ``goals`` in ``processes`` processes, in goal order (samples of a goal together).

    The goal list (repeated for samples) is cut at multiples of ``batch_size`` into one contiguous part per process,
    each seeded by its positions (``rollout_goals``' ``seed_offset``), so the trajectories do not depend on
    ``processes``.
    """
    repeated = [g for g in goals for _ in range(1 if job.greedy else job.samples)]
    if processes <= 1:
        return _rollout_part(job, repeated, 0, True)
    batches = (len(repeated) + job.batch_size - 1) // job.batch_size
    per = (batches + processes - 1) // processes * job.batch_size
    parts = [(job, repeated[i:i + per], i, i == 0) for i in range(0, len(repeated), per)]
    with multiprocessing.get_context("spawn").Pool(len(parts)) as pool:
        return [t for part in pool.map(_rollout_part_star, parts) for t in part]
