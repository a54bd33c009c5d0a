"""How many of a policy's wrong option clicks on the test goals are options that a training goal of the same product
asked for (the policy remembering demonstrations or trained goals instead of reading the instruction).

    python docs/evidence/memorized_options.py results/quickstart-ref [results/<run> ...]
    python docs/evidence/memorized_options.py --pool 64 results/quickstart-ref results/<run>
    python docs/evidence/memorized_options.py --pool 1500,1604,... results/quickstart-ref results/<run>

Without ``--pool``: in the episodes that bought the goal's own product with wrong options, each executed option
click whose value is not one of the goal's options, split by whether some training goal of the same ASIN (all 1,313,
what the SFT demonstrations covered) asked for it. With ``--pool`` (the first N training goals, or a comma-separated
list of goal indices: an RL run's goals): only the test goals of the pool's products, their success, and their
wrong option clicks whose value a pool goal of the same product asked for.
"""

import argparse
import collections
import json
from pathlib import Path

from apo_lightning.webshop import WebShop


def option_values(goal: dict) -> set[str]:
    options = goal["goal_options"]
    return set(options.values()) if isinstance(options, dict) else set(options)


def wrong_clicks(episode: dict) -> list[str]:
    """The executed option clicks of ``episode`` whose value the goal did not ask for."""
    wanted, asin = option_values(episode["goal"]), episode["goal"]["asin"].lower()
    clicks = []
    for turn in episode["turns"]:
        action = turn["action"] or ""
        if (action.startswith("click[") and action.lower() not in ("click[buy now]", f"click[{asin}]")
                and turn["valid_action"]):
            if action[6:-1] not in wanted:
                clicks.append(action[6:-1])
    return clicks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results directories with an episodes.jsonl")
    parser.add_argument("--pool", help="an RL run's goals: N (the first N training goals) or a list g1,g2,...")
    args = parser.parse_args()
    shop = WebShop.load(None)  # the synthetic catalog, synthetic goals, catalog seed 233
    train = list(shop.split("train"))
    if args.pool is None:
        goals = train
    else:
        goals = train[: int(args.pool)] if args.pool.isdigit() else [int(g) for g in args.pool.split(",")]
    asked = collections.defaultdict(set)  # ASIN -> option values its goals (all training goals, or the pool) ask for
    for g in goals:
        asked[shop.goals[g]["asin"]] |= option_values(shop.goals[g])
    for directory in args.results:
        episodes = [json.loads(line) for line in open(Path(directory) / "episodes.jsonl")]
        if args.pool is not None:
            episodes = [e for e in episodes if e["goal"]["asin"] in asked]
        counts = collections.Counter()
        for e in episodes:
            if args.pool is None and e["failure_class"] != "right_product_wrong_options":
                continue
            counts["episodes"] += 1
            for value in wrong_clicks(e):
                counts["asked" if value in asked[e["goal"]["asin"]] else "other"] += 1
        report = {"results": directory, "goals": len(episodes),
                  "success": round(sum(e["success"] for e in episodes) / max(1, len(episodes)), 4)}
        if args.pool is None:
            report.update(right_product_wrong_options=counts["episodes"],
                          wrong_clicks_a_training_goal_asked_for=counts["asked"], other_wrong_clicks=counts["other"])
        else:
            report.update(wrong_clicks_a_pool_goal_asked_for=counts["asked"], other_wrong_clicks=counts["other"])
        print(json.dumps(report))


if __name__ == "__main__":
    main()
