"""Greedy success on test goals split by whether the goal's product has training goals (what a policy that recalls
products can have learned), with Wilson 95 % intervals.

    APO_WEBSHOP_DATA=../shared/webshop_data python docs/evidence/seen_products.py results/webshop-1k-ref
    python docs/evidence/seen_products.py --data-dir synthetic results/quickstart-ref
"""

import argparse
import json
from pathlib import Path

from apo_lightning.eval.metrics import wilson_interval
from apo_lightning.webshop import WebShop
from apo_lightning.webshop.datadir import resolve_data_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    data_dir, description = resolve_data_dir(args.data_dir)
    print(description)
    shop = WebShop.load(data_dir)
    trained = {shop.goals[i]["asin"] for i in shop.split("train")}
    for results in args.results:
        episodes = [json.loads(line) for line in Path(results, "episodes.jsonl").read_text().splitlines()]
        for name, group in (("products with training goals", [e for e in episodes if e["goal"]["asin"] in trained]),
                            ("products without", [e for e in episodes if e["goal"]["asin"] not in trained])):
            won = sum(bool(e["success"]) for e in group)
            low, high = wilson_interval(won, len(group)) if group else (0.0, 0.0)
            print(f"{results}: {name}: {won}/{len(group)} = {won / max(1, len(group)):.1%} [{low:.1%}, {high:.1%}]")


if __name__ == "__main__":
    main()
