"""Which test goals several training runs win and lose against one reference: a goal that every run wins is learned,
one that a single run loses is that run's noise. Prints each run's paired comparison with the reference, how many
goals are won (lost) by exactly k of the n runs, the runs' mean gain, and the majority vote of the runs compared with
the reference like a run of its own: a goal's outcome is the one most runs reached, the reference's own outcome where
the runs split evenly, and its score the runs' median.

    python docs/evidence/runs_agreement.py results/webshop-1k-ref-vc results/webshop_1k_2h_s1_last \
        results/webshop_1k_2h_s2_last results/webshop_1k_2h_bf16_last results/webshop_1k_2h_anneal_last

The runs must be independent (one results directory per training run) and evaluated on the reference's goals.
"""

import argparse
import statistics
from collections import Counter

from apo_lightning.eval.compare import compare_episodes, format_comparison, load_episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", help="the reference policy's results directory")
    parser.add_argument("runs", nargs="+", help="one results directory per training run, on the same goals")
    args = parser.parse_args()
    ref_name, reference = load_episodes(args.reference)
    runs = {path: load_episodes(path)[1] for path in args.runs}
    comparisons = {path: compare_episodes(reference, episodes) for path, episodes in runs.items()}
    print(f"| run | success | Δ points [95 % CI] | won | lost | McNemar p |\n| --- | --- | --- | --- | --- | --- |")
    for path, c in comparisons.items():
        print(f"| {path} | {100 * c['success_b']:.1f} % | {100 * c['success_diff']:+.1f} "
              f"[{100 * c['success_diff_low']:+.1f}, {100 * c['success_diff_high']:+.1f}] | {c['won']} | {c['lost']} "
              f"| {c['mcnemar_p']:.3g} |")
    n = len(runs)
    won = Counter(g for episodes in runs.values() for g in reference
                  if episodes[g]["success"] and not reference[g]["success"])
    lost = Counter(g for episodes in runs.values() for g in reference
                   if reference[g]["success"] and not episodes[g]["success"])
    print(f"\ngoals won (lost) against {ref_name} by exactly k of the {n} runs:")
    print("| k | " + " | ".join(str(k) for k in range(1, n + 1)) + " |")
    print("| --- |" + " --- |" * n)
    for name, counts in (("won", won), ("lost", lost)):
        histogram = Counter(counts.values())
        print(f"| {name} | " + " | ".join(str(histogram[k]) for k in range(1, n + 1)) + " |")
    mean_gain = sum(c["success_diff"] for c in comparisons.values()) / n
    print(f"\nmean gain of the {n} runs: {100 * mean_gain:+.2f} points")
    majority = {}
    for g in reference:
        wins = sum(bool(e[g]["success"]) for e in runs.values())
        success = bool(reference[g]["success"]) if 2 * wins == n else 2 * wins > n
        majority[g] = dict(reference[g], success=success, score=statistics.median(e[g]["score"] for e in runs.values()))
    print(f"\nthe majority vote of the {n} runs (an even split keeps the reference's outcome; "
          "score: the runs' median):\n")
    print(format_comparison(ref_name, f"majority of {n} runs", compare_episodes(reference, majority)))


if __name__ == "__main__":
    main()
