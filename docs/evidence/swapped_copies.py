"""Does a policy copy what it cannot have remembered? ``baselines.drills.copy_accuracy`` on turn drills of the last
64 training goals (which SFT's drills hold out), plain and swapped: results-page drills with the clicked ASIN
replaced by a new one, item-page drills with the clicked option value replaced by another product's.

    PYTHONPATH=. python docs/evidence/swapped_copies.py models/quickstart-ref [data/models/<ref> ...]

Prints, per model and page kind, the drills copied exactly (greedy) out of 32, plain and swapped.
"""

import argparse

from apo_lightning.baselines.drills import DRILL_PAGES, TurnDrills, copy_accuracy
from apo_lightning.models.loading import load_policy
from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.webshop import WebShop

PER_KIND = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    shop = WebShop.load(None)
    held_out = list(shop.split("train"))[-64:]
    for path in args.models:
        model, tokenizer = load_policy(path)
        drills = TurnDrills(shop, ChatFormat(), tokenizer, held_out, max_steps=10)
        plain = copy_accuracy(model, drills, per_kind=PER_KIND)
        swapped = copy_accuracy(model, drills, per_kind=PER_KIND, swapped=True)
        print(path, ", ".join(f"{kind}: plain {round(plain[kind] * PER_KIND)}/{PER_KIND}, swapped "
                              f"{round(swapped[kind] * PER_KIND)}/{PER_KIND}" for kind in DRILL_PAGES))


if __name__ == "__main__":
    main()
