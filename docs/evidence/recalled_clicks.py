"""Does a policy read its first two actions from what it is shown, or recall them? Counts, over the greedy episodes
of a results directory: first searches whose query holds the goal's product type (the catalog's ``query`` word for
the product) and every option value the goal asks for; clicks on the second turn (the first results page) that are
not page buttons, the ones the env refused, and of those, how many name an ASIN of the catalog the episodes ran on,
of another catalog, or of none.

    python docs/evidence/recalled_clicks.py --catalog data/synthetic/seed0 results/quickstart-ref
    python docs/evidence/recalled_clicks.py --catalog data/synthetic/seed1 --other data/synthetic/seed0 \
        results/ref_seed1_test

(``data/synthetic/seed1``: ``python -m apo_lightning.webshop.synthetic --out data/synthetic/seed1 --seed 1
--num-products 600``; the results: ``python -m apo_lightning.eval evaluate --model <policy> --data-dir <catalog>
--split test --limit 200 --max-steps 10 --max-new-tokens 64 --processes 2 --results-dir <dir>``.)
"""

import argparse
import json
import re
from pathlib import Path


#: The results page's buttons that are not products.
PAGE_BUTTONS = {"back to search", "next >", "< prev"}


def catalog_asins(folder: str) -> set[str]:
    return {product["asin"].upper() for product in json.loads(Path(folder, "items_shuffle_1000.json").read_text())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--catalog", required=True, help="the catalog folder the episodes ran on")
    parser.add_argument("--other", help="another catalog folder (the one the policy was trained on)")
    args = parser.parse_args()
    own = catalog_asins(args.catalog)
    other = catalog_asins(args.other) if args.other else set()
    for results in args.results:
        counts = dict(episodes=0, query_has_type=0, with_options=0, query_has_all_options=0, product_clicks=0,
                      refused=0, refused_own_catalog=0, refused_other_catalog=0, refused_no_product=0)
        for line in Path(results, "episodes.jsonl").read_text().splitlines():
            episode = json.loads(line)
            goal, turns = episode["goal"], episode["turns"]
            counts["episodes"] += 1
            query = (turns[0]["action"] or "").lower()
            counts["query_has_type"] += goal["query"].lower() in query
            values = [v.lower() for v in (goal["goal_options"] or {}).values()]
            if values:
                counts["with_options"] += 1
                counts["query_has_all_options"] += all(v in query for v in values)
            click = re.fullmatch(r"click\[(.+)\]", (turns[1]["action"] or "") if len(turns) > 1 else "")
            if click is None or click.group(1).lower() in PAGE_BUTTONS:
                continue
            counts["product_clicks"] += 1
            if turns[1]["valid_action"]:
                continue
            asin = click.group(1).upper()
            counts["refused"] += 1
            counts["refused_own_catalog"] += asin in own
            counts["refused_other_catalog"] += asin in other
            counts["refused_no_product"] += asin not in own and asin not in other
        print(results, json.dumps(counts))


if __name__ == "__main__":
    main()
