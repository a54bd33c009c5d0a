"""Paired comparison of two policies on the same goals, from their results directories' ``episodes.jsonl``.

For the success rate: each policy's rate with its Wilson 95 % interval, the paired difference (B − A) with a 95 %
percentile-bootstrap interval over goals, McNemar's exact p-value (a two-sided binomial test on the goals where
exactly one policy succeeds) and the count of goals won and lost. For the score (0…100): each mean with a t
interval, the paired difference with its bootstrap interval, and the goals where B scores higher and lower.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import stats

from .metrics import bootstrap_interval, mean_interval, wilson_interval
from .schema import EPISODES_FILE, read_jsonl


def load_episodes(path: str | Path, method: str | None = None, split: str | None = None) -> tuple[str, dict[int, dict]]:
    """The episodes of one (method, split) in a results directory (or an ``episodes.jsonl`` file), by goal index.

    Args:
        path: a results directory or its ``episodes.jsonl``.
        method, split: which records to take when the file holds several (method, split) pairs.

    Returns:
        ``("method/split", {goal_index: record})``.

    Raises:
        FileNotFoundError: no ``episodes.jsonl`` there.
        ValueError: a line is not JSON (file and line named), no records match, several (method, split) pairs
            match and none was chosen, or a goal repeats.
    """
    path = Path(path)
    file = path if path.suffix == ".jsonl" else path / EPISODES_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file} does not exist: give a results directory written by `cli.py test` or "
                                "`python -m apo_lightning.eval evaluate --results-dir`")
    records = list(read_jsonl(file))
    pairs = sorted({(r["method"], r["split"]) for r in records
                    if (method is None or r["method"] == method) and (split is None or r["split"] == split)})
    if len(pairs) != 1:
        found = sorted({(r["method"], r["split"]) for r in records})
        raise ValueError(f"{file}: {'no' if not pairs else 'several'} (method, split) pairs match "
                         f"method={method!r}, split={split!r}; the file holds {found}: choose one with "
                         "--method/--split")
    chosen = pairs[0]
    episodes: dict[int, dict] = {}
    for r in records:
        if (r["method"], r["split"]) == chosen:
            if r["goal_index"] in episodes:
                raise ValueError(f"{file}: goal {r['goal_index']} appears twice for {chosen}")
            episodes[r["goal_index"]] = r
    return f"{chosen[0]}/{chosen[1]}", episodes


def common_goals(a: dict[int, dict], b: dict[int, dict]) -> tuple[dict[int, dict], dict[int, dict]]:
    """The episodes of A and of B restricted to the goals both cover, for ``compare --common-goals``.

    Returns:
        ``(a, b)``: the two ``{goal_index: record}`` maps on the shared goals, in goal order.

    Raises:
        ValueError: the two share no goal.
    """
    shared = a.keys() & b.keys()
    if not shared:
        raise ValueError("the two results share no goal: evaluate both on the same split")
    return {g: a[g] for g in sorted(shared)}, {g: b[g] for g in sorted(shared)}


def differing_instructions(a: dict[int, dict], b: dict[int, dict]) -> int:
    """On how many of the goals both cover the two results' instructions differ (e.g. an original-wording result
    against a reworded one: the same goals, paired as any others)."""
    return sum(a[g].get("instruction") != b[g].get("instruction") for g in a.keys() & b.keys())


def compare_episodes(a: dict[int, dict], b: dict[int, dict], seed: int = 0) -> dict[str, float]:
    """Paired statistics of policy B against policy A on their common goals (see the module docstring).

    Raises:
        ValueError: the two share no goal, or their goal sets differ (a paired comparison needs the same goals).
    """
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise ValueError(f"the two results cover different goals ({len(only_a)} only in A, e.g. {only_a[:5]}; "
                         f"{len(only_b)} only in B, e.g. {only_b[:5]}): evaluate both on the same goals")
    if not a:
        raise ValueError("no episodes to compare")
    goals = sorted(a)
    sa = np.array([float(a[g]["success"]) for g in goals])  # (n,)
    sb = np.array([float(b[g]["success"]) for g in goals])
    xa = np.array([100.0 * a[g]["score"] for g in goals])
    xb = np.array([100.0 * b[g]["score"] for g in goals])
    n = len(goals)
    won, lost = int(((sb == 1) & (sa == 0)).sum()), int(((sb == 0) & (sa == 1)).sum())
    mcnemar = stats.binomtest(won, won + lost, 0.5).pvalue if won + lost else 1.0
    out = {"goals": n, "success_a": sa.mean(), "success_b": sb.mean()}
    out["success_a_low"], out["success_a_high"] = wilson_interval(int(sa.sum()), n)
    out["success_b_low"], out["success_b_high"] = wilson_interval(int(sb.sum()), n)
    out["success_diff"] = sb.mean() - sa.mean()
    out["success_diff_low"], out["success_diff_high"] = bootstrap_interval(lambda x, y: y.mean() - x.mean(), sa, sb,
                                                                           seed=seed)
    out.update(won=won, lost=lost, mcnemar_p=float(mcnemar))
    out["score_a"], out["score_b"] = xa.mean(), xb.mean()
    out["score_a_low"], out["score_a_high"] = mean_interval(xa)
    out["score_b_low"], out["score_b_high"] = mean_interval(xb)
    out["score_diff"] = xb.mean() - xa.mean()
    out["score_diff_low"], out["score_diff_high"] = bootstrap_interval(lambda x, y: y.mean() - x.mean(), xa, xb,
                                                                       seed=seed)
    out["score_higher"], out["score_lower"] = int((xb > xa).sum()), int((xb < xa).sum())
    return {k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in out.items()}


def format_comparison(name_a: str, name_b: str, c: dict[str, float]) -> str:
    """A markdown table of :func:`compare_episodes`'s result, B against A."""
    def pct(x: float) -> str:
        return f"{100 * x:.1f} %"

    return "\n".join([
        f"{c['goals']} goals, paired: A = {name_a}, B = {name_b}",
        "",
        "| | A | B | B − A (95 % CI) | test |",
        "| --- | --- | --- | --- | --- |",
        f"| success rate | {pct(c['success_a'])} [{pct(c['success_a_low'])}, {pct(c['success_a_high'])}] "
        f"| {pct(c['success_b'])} [{pct(c['success_b_low'])}, {pct(c['success_b_high'])}] "
        f"| {100 * c['success_diff']:+.1f} points [{100 * c['success_diff_low']:+.1f}, "
        f"{100 * c['success_diff_high']:+.1f}] | McNemar p = {c['mcnemar_p']:.3g} "
        f"({c['won']} won, {c['lost']} lost) |",
        f"| score | {c['score_a']:.2f} [{c['score_a_low']:.2f}, {c['score_a_high']:.2f}] "
        f"| {c['score_b']:.2f} [{c['score_b_low']:.2f}, {c['score_b_high']:.2f}] "
        f"| {c['score_diff']:+.2f} [{c['score_diff_low']:+.2f}, {c['score_diff_high']:+.2f}] "
        f"| higher on {c['score_higher']}, lower on {c['score_lower']} goals |",
    ])
