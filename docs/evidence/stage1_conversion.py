"""How much of the reference's pass@N on the training goals a trained policy turns into greedy success: greedy
success on the goals where at least one of stage 1's N reference samples succeeded, and on the goals where all N
failed (where A*-PO with V* at the samples' mean gets a signal only from a fresh rollout that succeeds).

    python -m apo_lightning.eval evaluate --model models/webshop-1k-ref \
        --split train --limit 1024 --max-steps 15 --max-new-tokens 64 --valid-clicks --processes 2 \
        --results-dir results/train1024_webshop-1k-ref          # the same for each trained policy (data/models/<run>)
    python docs/evidence/stage1_conversion.py data/vstar/<key>.json results/train1024_webshop-1k-ref \
        results/train1024_webshop_1k_2h_anneal
    python docs/evidence/stage1_conversion.py --versus data/vstar/<N=4 key>.json data/vstar/<N=8 key>.json …

With ``--versus OTHER``, a last column counts the goals the table reaches (some sample succeeded) and OTHER, a
stage-1 table on the same goals, does not: what a run with this table had a signal on that a run with OTHER lacked.

The stage-1 table is the run's V* cache file (its ``key_parts`` name the run seed); the results directories hold
greedy episodes on (a superset of) its goals. A sample counts as a success when its reward is the full reward 1.
"""

import argparse
from pathlib import Path

from apo_lightning.apo.vstar import VStarCache
from apo_lightning.eval.compare import load_episodes
from apo_lightning.eval.metrics import sample_statistics, wilson_interval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vstar_table", help="a stage-1 V* cache file, data/vstar/<key>.json")
    parser.add_argument("results", nargs="+", help="results directories with greedy episodes on those goals")
    parser.add_argument("--versus", help="another stage-1 table on the same goals: add a column for the goals only "
                                         "the first table reaches")
    args = parser.parse_args()
    rewards = read_rewards(args.vstar_table)
    stats = sample_statistics(rewards)  # the stage-1 statistics the run logged (N, pass@N), its checks on N
    n = int(stats["samples_per_goal"])
    reached = [g for g, values in rewards.items() if reaches(values)]
    missed = [g for g, values in rewards.items() if not reaches(values)]
    print(f"{len(rewards)} goals, N = {n}: pass@{n} {stats[f'pass_at_{n}']:.1%} "
          f"({len(reached)} goals with a successful sample, {len(missed)} with none)\n")
    columns = [reached, missed]
    header = f"| results | greedy success | on the {len(reached)} goals with a successful sample | " \
             f"on the {len(missed)} goals without |"
    if args.versus:
        other = read_rewards(args.versus)
        if set(other) != set(rewards):
            raise ValueError(f"{args.versus} is a table on other goals than {args.vstar_table}")
        only = [g for g in reached if not reaches(other[g])]
        columns.append(only)
        header += f" on the {len(only)} goals only this table reaches |"
    print(header + "\n|" + " --- |" * (len(columns) + 2))
    for results in args.results:
        _, episodes = load_episodes(results)
        absent = sorted(set(rewards) - set(episodes))
        if absent:
            raise ValueError(f"{results} lacks {len(absent)} of the table's goals (e.g. {absent[:5]}): evaluate it "
                             "on the same training goals")

        def cell(goals: list[int]) -> str:
            if not goals:
                return "no goals"
            k = sum(bool(episodes[g]["success"]) for g in goals)
            low, high = wilson_interval(k, len(goals))
            return f"{k} ({k / len(goals):.1%} [{low:.1%}, {high:.1%}])"

        print(f"| {results} | {cell(list(rewards))} | " + " | ".join(cell(goals) for goals in columns) + " |")


def reaches(values: list[float]) -> bool:
    """Whether some stage-1 sample of a goal succeeded: its reward is the full reward 1."""
    return any(r >= 1.0 for r in values)


def read_rewards(file: str) -> dict[int, list[float]]:
    """The N stage-1 rewards per goal of a V* cache file, read with the cache's own reader and checks.

    Raises:
        FileNotFoundError: if ``file`` is not a usable V* table.
        ValueError: if its name is not a cache key.
    """
    path = Path(file)
    table = VStarCache(path.parent).load(path.stem)
    if table is None:
        raise FileNotFoundError(f"{path} is not a usable V* table (see the warning above, if any): give a "
                                "data/vstar/<key>.json written by stage 1")
    return {int(goal): values for goal, values in table["rewards"].items()}


if __name__ == "__main__":
    main()
