"""Command line: ``python -m apo_lightning.webshop play``, the environment by hand.

    python -m apo_lightning.webshop play --data-dir ../shared/webshop_data --goal-index 3

Without ``--data-dir`` it uses the synthetic catalog (generated under data/synthetic/seed0 on first use). Policies
(scripted or models) are evaluated with ``python -m apo_lightning.eval evaluate``.
"""

from __future__ import annotations

import argparse
import json

from .env import WebShopEnv
from .shop import WebShop


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None, help="WebShop data folder (default: the synthetic catalog)")
    parser.add_argument("--goals", choices=("synthetic", "human"), default="synthetic")
    parser.add_argument("--seed", type=int, default=233, help="price/goal seed; 233 reproduces the original")
    parser.add_argument("--observation-mode", choices=("text", "text_rich"), default="text")
    parser.add_argument("--max-steps", type=int, default=15, help="step limit per episode (0 = none)")


def play(args: argparse.Namespace) -> None:
    """Interactive session: type actions such as search[red shoes] or click[buy now]; 'quit' ends."""
    shop = WebShop.load(args.data_dir, goals=args.goals, seed=args.seed)
    env = WebShopEnv(shop, args.observation_mode, max_steps=args.max_steps or None)
    observation = env.reset(args.goal_index)
    print(f"{shop}\ngoal {args.goal_index}: {env.instruction_text}\n")
    while True:
        print(observation)
        available = env.available_actions()
        print(f"\nactions: {'search[...]  ' if available['has_search_bar'] else ''}"
              + "  ".join(f"click[{c}]" for c in available["clickables"]))
        try:
            action = input("> ").strip()
        except EOFError:
            break
        if action in ("quit", "exit"):
            break
        observation, reward, done, info = env.step(action)
        print(f"reward={reward} done={done} valid={info['valid']}")
        if done:
            print(observation)
            print(json.dumps({k: v for k, v in info.items()}, default=str))
            break


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m apo_lightning.webshop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_play = sub.add_parser("play", help="type actions and see observations and rewards")
    _common(p_play)
    p_play.add_argument("--goal-index", type=int, default=0)
    args = parser.parse_args(argv)
    play(args)


if __name__ == "__main__":
    main()
