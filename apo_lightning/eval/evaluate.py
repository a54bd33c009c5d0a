"""Evaluating a policy on goals: greedy episodes, and optionally K sampled episodes per goal (exploration).

Scripted policies (random, rule, oracle) and language-model policies go through the same metrics, reports and
comparison: both produce ``Trajectory`` objects.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import torch
from tqdm import tqdm

from ..baselines.scripted import POLICIES, make_policy, play_episode
from ..rollout.chat import ChatFormat
from ..rollout.engine import rollout_goals
from ..rollout.settings import RolloutSettings
from ..rollout.trajectory import Trajectory
from ..rollout.vllm_backend import VLLMBackend
from ..utils.seeds import derive_seed
from ..webshop import WebShop, WebShopEnv
from ..webshop.settings import EnvConfig, RewardSettings
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

    Args:
        model: the policy: a model directory, a hub id or a name ``models.loading.load_policy`` knows.
        env: the catalog and how episodes run; its ``data_dir`` is resolved again in every process, so give the
            folder itself (or "synthetic").
        rollout: how replies are sampled (``temperature``, ``top_p``, ``backend``), their token limit and
            ``valid_clicks``.
        chat: the prompt format.
        batch_size: episodes per rollout batch.
        seed: the run seed; chunk seeds derive from it and ``purpose``.
        purpose: names this job in the seeds (e.g. "evaluate", "evaluate-samples").
        greedy: decode greedily; otherwise each goal is repeated ``samples`` times and sampled.
        samples: sampled episodes per goal (without ``greedy``).
        gguf_file: a GGUF file in ``model`` to load instead of safetensors.
        dtype, device: how the weights are loaded and where they run.
        threads: torch intra-op threads per process.
        reward: what a finished episode earns, r(x, y) (the ``reward`` column of the results).
    """

    model: str
    env: EnvConfig
    rollout: RolloutSettings
    chat: ChatFormat
    batch_size: int
    seed: int
    purpose: str
    greedy: bool = True
    samples: int = 1
    gguf_file: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    threads: int = 1
    reward: RewardSettings = RewardSettings()


def _rollout_part(job: PolicyRollouts, goals: list[int], offset: int, progress: bool,
                  part: int = 0) -> list[Trajectory]:
    """One process's share (``part``): ``goals`` (already repeated for samples), seeded as positions ``offset``…;
    with ``rollout.backend`` "vllm" sampled by a vLLM server of its own."""
    from ..models.loading import load_policy

    torch.set_num_threads(job.threads)
    shop = job.env.shop(announce=False)  # the command said where the data comes from
    model, tokenizer = load_policy(job.model, gguf_file=job.gguf_file, dtype=job.dtype, device=job.device)
    backend = None
    if job.rollout.backend == "vllm":  # a server of this process's own, sampling the policy as loaded
        backend = VLLMBackend(job.rollout.vllm, job.model, rank=part, device=job.device.split(":")[0])
        backend.use_reference()
    engine = job.rollout.engine(model, tokenizer, job.chat, job.reward, greedy=job.greedy, backend=backend)
    try:
        return rollout_goals(engine, shop, goals, job.batch_size, derive_seed(job.seed, job.purpose),
                             observation_mode=job.env.observation_mode, max_steps=job.env.max_steps,
                             progress=progress, seed_offset=offset,
                             description="greedy episodes" if job.greedy else "sampled episodes")
    finally:
        if backend is not None:
            backend.close()


def _rollout_part_star(args) -> list[Trajectory]:
    return _rollout_part(*args)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends


def _end_with_parent(parent: int) -> None:
    """Pool initializer: the worker gets SIGTERM when the process that started it ends, killed or not (Linux's
    ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing), so a killed ``evaluate`` leaves no worker holding the cores."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent ended before the request was made
            os._exit(1)


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
    parts = [(job, repeated[i:i + per], i, i == 0, i // per) for i in range(0, len(repeated), per)]
    with multiprocessing.get_context("spawn").Pool(len(parts), _end_with_parent, (os.getpid(),)) as pool:
        return [t for part in pool.map(_rollout_part_star, parts) for t in part]
