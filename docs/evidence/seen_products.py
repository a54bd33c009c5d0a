"""Greedy success on test goals split by whether the goal's product has training goals (what a policy that recalls
products can have learned), with Wilson 95 % intervals; with ``--pool N``, split instead by whether the product is
one of an RL run's pool (the first N training goals); with ``--reference DIR``, also the goals won and lost against
that reference's results on the same goals.

    python docs/evidence/seen_products.py results/webshop-1k-ref
    python docs/evidence/seen_products.py --pool 256 \
        --reference results/webshop-1k-ref results/real_succ_b100_reuse8_last
    python docs/evidence/seen_products.py --data-dir synthetic results/quickstart-ref
"""

import argparse
import json
from pathlib import Path

from apo_lightning.eval.metrics import wilson_interval
from apo_lightning.webshop import WebShop
from apo_lightning.webshop.datadir import resolve_data_dir


def episodes(results: str) -> list[dict]:
    return [json.loads(line) for line in Path(results, "episodes.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--pool", type=int, default=None, help="split by the products of the first N training goals")
    parser.add_argument("--reference", default=None, help="results directory to count goals won and lost against")
    args = parser.parse_args()
    data_dir, description = resolve_data_dir(args.data_dir)
    print(description)
    shop = WebShop.load(data_dir)
    train = list(shop.split("train"))[: args.pool]
    products = {shop.goals[i]["asin"] for i in train}
    label = f"products of the first {args.pool} training goals" if args.pool else "products with training goals"
    print(f"{len(products)} {label}")
    reference = {e["goal_index"]: bool(e["success"]) for e in episodes(args.reference)} if args.reference else None
    for results in args.results:
        run = episodes(results)
        for name, group in ((label, [e for e in run if e["goal"]["asin"] in products]),
                            ("the other products", [e for e in run if e["goal"]["asin"] not in products])):
            won = sum(bool(e["success"]) for e in group)
            low, high = wilson_interval(won, len(group)) if group else (0.0, 0.0)
            line = f"{results}: {name}: {won}/{len(group)} = {won / max(1, len(group)):.1%} [{low:.1%}, {high:.1%}]"
            if reference is not None:
                gained = sum(1 for e in group if e["success"] and not reference[e["goal_index"]])
                lost = sum(1 for e in group if not e["success"] and reference[e["goal_index"]])
                line += f"; against {args.reference}: {gained} won, {lost} lost"
            print(line)


if __name__ == "__main__":
    main()
