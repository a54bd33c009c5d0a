"""Metrics of finished episodes, one name per quantity, and their confidence intervals.

The quantities (used under these names in logs, JSON lines and ``summary.csv``):

* ``success_rate``: share of episodes whose WebShop score is exactly 1.0;
* ``score``: 100 × the mean WebShop score (0 for an episode without a purchase);
* ``reward``: the mean RL reward (score or success, plus the format penalty per reply without an action);
* ``avg_turns``: turns per episode (a turn is one reply and the env step it caused);
* ``invalid_reply_rate``: share of turns whose reply had no parseable action (a no-op step, penalised);
* ``invalid_action_rate``: share of parsed actions the env refused;
* ``generated_tokens``: tokens the policy sampled per episode;
* ``episodes``.

Intervals: Wilson 95 % for a proportion (``scipy.stats.binomtest``), a t interval for a mean, a percentile bootstrap
over goals for anything else (pass@k, paired differences). pass@k is the unbiased estimator of Chen et al. 2021
("Evaluating Large Language Models Trained on Code", Eq. 1).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import stats

from ..rollout.trajectory import Trajectory

#: The per-episode quantities :func:`trajectory_metrics` returns, in report order.
QUANTITIES = ("success_rate", "score", "reward", "avg_turns", "invalid_reply_rate", "invalid_action_rate",
              "generated_tokens", "episodes")


def trajectory_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The quantities of the module docstring over ``trajectories`` (all 0 for none)."""
    n = len(trajectories)
    turns = [t for tr in trajectories for t in tr.turns]
    parsed = [t for t in turns if t.action is not None]
    return {
        "success_rate": sum(t.success for t in trajectories) / n if n else 0.0,
        "score": 100.0 * sum(t.score for t in trajectories) / n if n else 0.0,
        "reward": sum(t.reward for t in trajectories) / n if n else 0.0,
        "avg_turns": len(turns) / n if n else 0.0,
        "invalid_reply_rate": sum(t.action is None for t in turns) / len(turns) if turns else 0.0,
        "invalid_action_rate": sum(tr.invalid_actions for tr in trajectories) / len(parsed) if parsed else 0.0,
        "generated_tokens": sum(tr.generated_tokens for tr in trajectories) / n if n else 0.0,
        "episodes": n,
    }


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``successes / n`` (``(0, 1)`` for n = 0)."""
    if n == 0:
        return 0.0, 1.0
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Student-t interval of a mean (the mean twice for fewer than two values or zero spread)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2 or float(x.std()) == 0.0:
        m = float(x.mean()) if x.size else 0.0
        return m, m
    half = stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


def bootstrap_interval(statistic: Callable[..., float], *columns: Sequence[float], confidence: float = 0.95,
                       resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(*columns)``, resampling rows (goals) jointly, so paired columns
    stay paired. Deterministic for a given ``seed``.

    Args:
        statistic: ``(*columns as 1-D arrays) -> float``.
        columns: equal-length sequences, one value per goal.
    """
    arrays = [np.asarray(c, dtype=np.float64) for c in columns]
    n = len(arrays[0])
    if n == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    index = rng.integers(0, n, size=(resamples, n))  # (R, n) resampled rows
    values = np.array([statistic(*(a[row] for a in arrays)) for row in index])
    alpha = (1 - confidence) / 2
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased estimate of the probability that at least one of ``k`` samples is correct, from ``num_samples``
    samples of which ``num_correct`` were (Chen et al. 2021, Eq. 1: ``1 − C(n−c, k) / C(n, k)``).

    Raises:
        ValueError: ``k`` outside ``1 … num_samples`` or ``num_correct`` outside ``0 … num_samples``.
    """
    if not 1 <= k <= num_samples:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={num_samples}")
    if not 0 <= num_correct <= num_samples:
        raise ValueError(f"num_correct must be in [0, {num_samples}], got {num_correct}")
    if num_samples - num_correct < k:
        return 1.0
    return 1.0 - math.comb(num_samples - num_correct, k) / math.comb(num_samples, k)


def sample_statistics(rewards: Mapping[str, Sequence[float]], full_reward: float = 1.0) -> dict[str, float]:
    """What N reward samples per goal say about a policy's exploration (stage 1, or ``evaluate --samples``).

    A sample is *full* when its reward reaches ``full_reward`` (a success without format penalty). pass@N bounds
    what on-policy exploration finds: a goal none of whose samples is full gives A*-PO no successful trajectory to
    reinforce. Goals whose N rewards are all equal carry no signal for a baseline-subtracting update.

    Args:
        rewards: goal id -> its N reward samples (the same N for every goal).

    Returns:
        ``goals``, ``samples_per_goal`` (N), ``reward_mean`` (over all samples), ``full_reward_rate`` (share of full
        samples), ``pass_at_<k>`` for k = 1 … N (mean over goals of :func:`pass_at_k`), ``all_equal_rate`` (goals
        whose N rewards are all equal), ``all_zero_rate`` (goals with no sample above 0), ``all_full_rate`` (goals
        whose samples are all full).

    Raises:
        ValueError: no goals, or goals with different N.
    """
    samples = [list(map(float, r)) for r in rewards.values()]
    if not samples:
        raise ValueError("sample_statistics: no goals")
    sizes = {len(s) for s in samples}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"sample_statistics: every goal needs the same N >= 1 of samples, got N in {sorted(sizes)}")
    n = sizes.pop()
    full = [sum(r >= full_reward for r in s) for s in samples]
    out = {
        "goals": float(len(samples)),
        "samples_per_goal": float(n),
        "reward_mean": sum(map(sum, samples)) / (n * len(samples)),
        "full_reward_rate": sum(full) / (n * len(samples)),
    }
    for k in range(1, n + 1):
        out[f"pass_at_{k}"] = sum(pass_at_k(n, c, k) for c in full) / len(samples)
    out["all_equal_rate"] = sum(len(set(s)) == 1 for s in samples) / len(samples)
    out["all_zero_rate"] = sum(max(s) <= 0.0 for s in samples) / len(samples)
    out["all_full_rate"] = sum(c == n for c in full) / len(samples)
    return out
