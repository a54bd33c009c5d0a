"""Training-goal indices of the synthetic catalog grouped by product: P products that have at least K training
goals, K of each product's goals, drawn with ``random.Random(seed)``; printed as a list for
``--data.train_goal_indices`` (docs/experiments.md, "More goals, fewer visits, longer runs").

    python docs/evidence/grouped_pool.py 16 4 0 > docs/evidence/pool16x4.txt
"""

import collections
import random
import sys

from apo_lightning.webshop import WebShop


def main() -> None:
    products_wanted, per_product = int(sys.argv[1]), int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    shop = WebShop.load(None)  # the synthetic catalog, synthetic goals, catalog seed 233
    by_asin = collections.defaultdict(list)
    for g in shop.split("train"):
        by_asin[shop.goals[g]["asin"]].append(g)
    rng = random.Random(seed)
    products = sorted(asin for asin, goals in by_asin.items() if len(goals) >= per_product)
    indices = [g for asin in rng.sample(products, products_wanted) for g in rng.sample(by_asin[asin], per_product)]
    rng.shuffle(indices)
    print("[" + ",".join(map(str, indices)) + "]")


if __name__ == "__main__":
    main()
