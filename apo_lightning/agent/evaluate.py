"""Evaluate any policy on a WebShop split with the batched rollout engine.

    python -m apo_lightning.agent.evaluate --model data/models/tiny-sft --data-dir ../shared/webshop_data --split test
    python -m apo_lightning.agent.evaluate --model smollm2-135m-instruct --split test --limit 50
    python -m apo_lightning.agent.evaluate --model oracle --split test      # scripted: random | rule | oracle

Prints a progress bar and, as its last line, one JSON object: success_rate, score (100 × mean WebShop score),
avg_turns, invalid_reply_rate (turns whose reply had no parseable action), invalid_action_rate (parsed actions the
env refused), episodes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import torch
from tqdm import tqdm

from ..webshop import WebShop, WebShopEnv
from .chat import ChatFormat
from .rollout import RolloutEngine, Trajectory, derive_seed


def trajectory_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success rate (score == 1), score (100 × mean), mean reward, avg turns, invalid-reply and -action rates."""
    n = len(trajectories)
    turns = [t for tr in trajectories for t in tr.turns]
    parsed = [t for t in turns if t.action is not None]
    return {
        "success_rate": sum(t.success for t in trajectories) / n if n else 0.0,
        "score": 100.0 * sum(t.score for t in trajectories) / n if n else 0.0,
        "reward": sum(t.reward for t in trajectories) / n if n else 0.0,
        "avg_turns": len(turns) / n if n else 0.0,
        "invalid_reply_rate": sum(t.action is None for t in turns) / len(turns) if turns else 0.0,
        "invalid_action_rate": sum(not t.valid_action for t in parsed) / len(parsed) if parsed else 0.0,
        "generated_tokens": sum(tr.generated_tokens for tr in trajectories) / n if n else 0.0,
        "episodes": n,
    }


def rollout_goals(engine: RolloutEngine, shop: WebShop, goal_indices: Sequence[int], batch_size: int,
                  seed: int = 0, observation_mode: str = "text", max_steps: int = 15,
                  progress: bool = False) -> list[Trajectory]:
    """Roll out ``engine``'s policy on every goal, ``batch_size`` episodes at a time (in goal order)."""
    envs = [WebShopEnv(shop, observation_mode, max_steps=max_steps) for _ in range(min(batch_size, len(goal_indices)))]
    trajectories: list[Trajectory] = []
    bar = tqdm(total=len(goal_indices), desc="episodes", file=sys.stderr, disable=not progress)
    for start in range(0, len(goal_indices), batch_size):
        chunk = list(goal_indices[start:start + batch_size])
        trajectories += engine.rollout(envs[: len(chunk)], chunk, seed=derive_seed(seed, start))
        bar.update(len(chunk))
    bar.close()
    return trajectories


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m apo_lightning.agent.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        help="model directory, hub id, 'smollm2-135m-instruct', or a scripted policy name")
    parser.add_argument("--gguf-file", default=None)
    parser.add_argument("--data-dir", default=None, help="WebShop data folder (default: the synthetic catalog)")
    parser.add_argument("--goals", choices=("synthetic", "human"), default="synthetic")
    parser.add_argument("--split", choices=("train", "val", "test"), default="test")
    parser.add_argument("--split-scheme", choices=("webshop", "verl"), default="webshop")
    parser.add_argument("--limit", type=int, default=0, help="only the first N goals of the split")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--sample", action="store_true", help="sample (temperature) instead of greedy decoding")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--history-turns", type=int, default=None, help="last k turns only (default: full)")
    parser.add_argument("--context-budget", type=int, default=4096)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    shop = WebShop.load(args.data_dir, goals=args.goals)
    goals = list(shop.split(args.split, args.split_scheme))[: args.limit or None]
    start = time.perf_counter()
    if args.model in ("random", "rule", "oracle"):
        from .scripted import make_policy, run_episode, summarize

        env = WebShopEnv(shop, max_steps=args.max_steps)
        policy = make_policy(args.model, seed=args.seed)
        results = [run_episode(env, policy, i) for i in tqdm(goals, desc="episodes", file=sys.stderr)]
        metrics = summarize(results)
        metrics["avg_turns"] = metrics.pop("avg_steps")
    else:
        from .policy import load_policy

        model, tokenizer = load_policy(args.model, gguf_file=args.gguf_file, dtype=args.dtype, device=args.device)
        chat = ChatFormat(history_turns=args.history_turns, context_budget=args.context_budget)
        engine = RolloutEngine(model, tokenizer, chat, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, greedy=not args.sample)
        trajectories = rollout_goals(engine, shop, goals, args.batch_size, args.seed, max_steps=args.max_steps,
                                     progress=True)
        metrics = trajectory_metrics(trajectories)
    metrics.update(model=args.model, split=args.split, seconds=round(time.perf_counter() - start, 2))
    print(json.dumps(metrics))
    return metrics


if __name__ == "__main__":
    main()
