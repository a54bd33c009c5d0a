"""Find training goals whose outcome hinges on the option clicks: the reference always opens the goal's product,
and succeeds only sometimes.

    python docs/evidence/option_goals_scan.py 96        # the first 96 training goals, 8 samples each (about 2 min)
    python docs/evidence/option_goals_scan.py 1313 1    # every training goal with exactly one goal option
    python docs/evidence/option_goals_scan.py 400 0 data/models/quickstart-swap   # another policy (0: any options)

Samples ``models/quickstart-ref`` (or the policy named third) 8 times per goal at temperature 1 on the synthetic
catalog (the quick start's settings: 10 turns, 64 new tokens, the success reward) in 2 processes, and prints one line
per goal with 2 to 6 successes of 8: goal index, successes, samples that bought the goal's own ASIN, the goal's
number of options, mean turns, the goal's ASIN. The six goals of ``tests/test_learning.py`` are those with every
sample on the goal's ASIN (docs/experiments.md, "Learning sanity setting").
"""

import sys

from apo_lightning.eval.evaluate import PolicyRollouts, run_rollouts
from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.webshop import WebShop

if __name__ == "__main__":
    shop = WebShop.load(None, goals="synthetic", seed=233)
    train = list(shop.split("train"))[: int(sys.argv[1])]
    if len(sys.argv) > 2 and int(sys.argv[2]):  # only the goals with this many goal options
        train = [g for g in train if len(shop.goals[g].get("goal_options") or []) == int(sys.argv[2])]
    model = sys.argv[3] if len(sys.argv) > 3 else "models/quickstart-ref"
    job = PolicyRollouts(model=model, data_dir=None, goal_kind="synthetic", catalog_seed=233,
                         chat=ChatFormat(reward="success"), max_new_tokens=64, batch_size=32, max_steps=10, seed=0,
                         purpose="scan", greedy=False, samples=8, temperature=1.0)
    samples = run_rollouts(job, train, processes=2)
    for goal in train:
        mine = [t for t in samples if t.goal_index == goal]
        asin = shop.goals[goal]["asin"].upper()
        successes = sum(t.success for t in mine)
        on_asin = sum(1 for t in mine if t.purchased and t.purchased["asin"].upper() == asin)
        if 2 <= successes <= 6:
            print(goal, successes, on_asin, len(shop.goals[goal].get("goal_options") or []),
                  round(sum(len(t.turns) for t in mine) / len(mine), 3), asin)
