"""How many of a policy's wrong option clicks on the test goals are options that a training goal of the same product
asked for (the reference remembering its SFT demonstrations instead of reading the instruction).

    python docs/evidence/memorized_options.py results/quickstart-ref [results/<run> ...]

For each results directory (``episodes.jsonl`` of ``cli.py test`` or ``eval evaluate`` on the synthetic catalog):
the episodes that bought the goal's own product with wrong options, and each option click of theirs whose value is
not one of the goal's options, split by whether some training goal of the same ASIN asked for that value.
"""

import collections
import json
import sys
from pathlib import Path

from apo_lightning.lit.settings import EnvConfig


def option_values(goal: dict) -> set[str]:
    options = goal["goal_options"]
    return set(options.values()) if isinstance(options, dict) else set(options)


def main(directories: list[str]) -> None:
    env = EnvConfig(data_dir="synthetic", max_steps=10)
    shop = env.shop()
    trained = collections.defaultdict(set)  # ASIN -> option values its training goals ask for
    for g in env.split("train"):
        trained[shop.goals[g]["asin"]] |= option_values(shop.goals[g])
    for directory in directories:
        episodes = [json.loads(line) for line in open(Path(directory) / "episodes.jsonl")]
        counts = collections.Counter()
        for e in episodes:
            if e["failure_class"] != "right_product_wrong_options":
                continue
            counts["episodes"] += 1
            wanted = option_values(e["goal"])
            for turn in e["turns"]:
                action = turn["action"] or ""
                if not action.startswith("click[") or action == "click[buy now]" or action[6:-1] == e["goal"]["asin"]:
                    continue
                value = action[6:-1]
                if value not in wanted and turn["valid_action"]:
                    counts["remembered" if value in trained[e["goal"]["asin"]] else "other"] += 1
        success = sum(e["success"] for e in episodes) / len(episodes)
        print(json.dumps({"results": directory, "goals": len(episodes), "success": success,
                          "right_product_wrong_options": counts["episodes"],
                          "wrong_clicks_a_training_goal_asked_for": counts["remembered"],
                          "other_wrong_clicks": counts["other"]}))


if __name__ == "__main__":
    main(sys.argv[1:])
