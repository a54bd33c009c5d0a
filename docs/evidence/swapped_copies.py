"""Does a policy copy what it cannot have remembered? Exact greedy copies of the oracle's reply on turn drills of
the last 64 training goals (which SFT's drills hold out), with and without a swap: a results-page drill with the
clicked ASIN replaced by a new one, an item-page drill with the clicked option value replaced by another product's
(``baselines.drills``).

    PYTHONPATH=. python docs/evidence/swapped_copies.py search_results models/quickstart-ref [data/models/<ref> ...]
    PYTHONPATH=. python docs/evidence/swapped_copies.py item_page models/quickstart-ref [data/models/<ref> ...]

Prints, per model, ``<copied>/32`` for the plain and the swapped drills (32 drills each, ``random.Random(1)``, as
``baselines.drills.copy_accuracy`` draws them).
"""

import argparse
import random

import torch

from apo_lightning.baselines.drills import TurnDrills
from apo_lightning.models.loading import load_policy
from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.webshop import WebShop


@torch.no_grad()
def copies(model, drills: TurnDrills, kind: str, swap: bool, count: int = 32) -> int:
    """How many of ``count`` drills of ``kind`` the model answers with exactly the drill's reply (greedy)."""
    rng = random.Random(1)
    swaps = {"asin_swap": swap} if kind == "search_results" else {"swap": swap}
    copied = 0
    for _ in range(count):
        drill = drills.draw(rng, kind=kind, splice=False, **swaps)
        first = drill["gen_mask"].index(1)
        prompt, target = torch.tensor([drill["input_ids"][:first]]), drill["input_ids"][first:]
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(target),
                             do_sample=False, pad_token_id=drills.tokenizer.pad_token_id)
        copied += out[0, first:].tolist() == target
    return copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("search_results", "item_page"))
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    shop = WebShop.load(None)
    held_out = list(shop.split("train"))[-64:]
    for path in args.models:
        model, tokenizer = load_policy(path)
        model.eval()
        drills = TurnDrills(shop, ChatFormat(), tokenizer, held_out, max_steps=10)
        print(path, args.kind, f"plain {copies(model, drills, args.kind, False)}/32",
              f"swapped {copies(model, drills, args.kind, True)}/32")


if __name__ == "__main__":
    main()
