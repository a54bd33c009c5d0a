"""Rollout throughput: episodes/s and generated tokens/s of the batched engine, batch 1 against batch B.

    python benchmarks/rollout_throughput.py                  # tiny default policy, then SmolLM2-135M-Instruct
    python benchmarks/rollout_throughput.py --skip-smollm2 --threads 2

The tiny default policy (``TinyPolicySpec()``: 4 layers, width 192, 4k BPE vocabulary) is built
untrained into ``--tiny-dir`` (a temporary folder unless given) and plays the same ``--goals`` goals twice,
sampling at temperature 1.0: one episode at a time (batch 1, the baseline measured in the same run) and all of
them in one lockstep batch. SmolLM2-135M-Instruct (``load_policy("smollm2-135m-instruct")``) does the same on a
few goals with shorter episodes. An untrained model writes junk until ``max_new_tokens`` every turn, so no reply
parses, every step is a no-op on the search page and every episode runs to ``max_steps``: the worst case for
throughput (the longest replies and the most turns), and the same work in both batch modes.

Prints one line per run, the speed-up batch B / batch 1 (target: at least 8x for the tiny policy at batch 32) and,
last, one JSON object with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download

import torch

from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.models.loading import load_policy
from apo_lightning.baselines.corpus import ensure_tiny_policy
from apo_lightning.models.tiny import TinyPolicySpec
from apo_lightning.rollout.engine import RolloutEngine
from apo_lightning.utils.seeds import derive_seed
from apo_lightning.webshop import WebShop, WebShopEnv

TARGET_SPEEDUP = 8.0


class ForwardTimer:
    """Wraps ``model.forward`` to add up seconds spent encoding prompts (several tokens per row) and decoding."""

    def __init__(self, model):
        self.forward, self.seconds = model.forward, {"prefill": 0.0, "decode": 0.0}
        model.forward = self

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        out = self.forward(*args, **kwargs)
        self.seconds["prefill" if kwargs["input_ids"].shape[1] > 1 else "decode"] += time.perf_counter() - start
        return out


def measure(engine: RolloutEngine, shop: WebShop, goals: list[int], batch_size: int, max_steps: int,
            seed: int, timer: ForwardTimer) -> dict:
    """Roll out ``goals`` ``batch_size`` at a time; episodes/s and generated tokens/s over the whole run."""
    envs = [WebShopEnv(shop, max_steps=max_steps) for _ in range(batch_size)]
    episodes = tokens = turns = 0
    generate_s = 0.0
    timer.seconds = {"prefill": 0.0, "decode": 0.0}
    start = time.perf_counter()
    for first in range(0, len(goals), batch_size):
        chunk = goals[first:first + batch_size]
        trajectories = engine.rollout(envs[:len(chunk)], chunk, seed=derive_seed(seed, first))
        episodes += len(trajectories)
        turns += sum(len(t.turns) for t in trajectories)
        tokens += sum(t.generated_tokens for t in trajectories)
        generate_s += engine.stats["generate_seconds"]
    seconds = time.perf_counter() - start
    return {"batch_size": batch_size, "episodes": episodes, "turns": turns, "generated_tokens": tokens,
            "seconds": round(seconds, 3), "generate_seconds": round(generate_s, 3),
            "prefill_seconds": round(timer.seconds["prefill"], 3), "decode_seconds": round(timer.seconds["decode"], 3),
            "episodes_per_s": round(episodes / seconds, 4), "tokens_per_s": round(tokens / seconds, 2)}


def compare(name: str, engine: RolloutEngine, shop: WebShop, goals: list[int], batch_size: int, max_steps: int,
            seed: int) -> dict:
    """Batch 1 (the baseline) and batch ``batch_size`` on the same goals; prints both and the speed-up."""
    engine.rollout([WebShopEnv(shop, max_steps=1)], goals[:1], seed=seed)  # warm-up: first-call overheads
    timer = ForwardTimer(engine.model)
    runs = {}
    for size in (1, batch_size):
        result = measure(engine, shop, goals, size, max_steps, seed, timer)
        runs[f"batch{size}"] = result
        print(f"{name:8s} batch {size:3d}: {result['episodes']} episodes, {result['turns']} turns, "
              f"{result['generated_tokens']} tokens in {result['seconds']:.1f} s (forward: prefill "
              f"{result['prefill_seconds']:.1f} s, decode {result['decode_seconds']:.1f} s) -> "
              f"{result['episodes_per_s']:.3f} episodes/s, {result['tokens_per_s']:.1f} tokens/s", flush=True)
    base, batched = runs["batch1"], runs[f"batch{batch_size}"]
    speedup = batched["tokens_per_s"] / base["tokens_per_s"]
    episode_speedup = batched["episodes_per_s"] / base["episodes_per_s"]
    print(f"{name:8s} speed-up batch {batch_size} / batch 1: {speedup:.2f}x tokens/s, {episode_speedup:.2f}x "
          f"episodes/s", flush=True)
    return {**runs, "speedup_tokens_per_s": round(speedup, 3), "speedup_episodes_per_s": round(episode_speedup, 3)}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=None,
                        help="WebShop data folder (default: the synthetic catalog under data/synthetic/seed0)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny-dir", default=None,
                        help="where to build (or reuse) the tiny policy; default: a temporary folder")
    parser.add_argument("--goals", type=int, default=32, help="tiny policy: goals (the batch size of the batched run)")
    parser.add_argument("--max-steps", type=int, default=15, help="tiny policy: env step limit")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tiny policy: reply length limit")
    parser.add_argument("--no-reuse-cache", action="store_true",
                        help="re-encode the whole context every turn (RolloutEngine(reuse_cache=False))")
    parser.add_argument("--skip-smollm2", action="store_true", help="measure the tiny policy only")
    parser.add_argument("--smollm2-goals", type=int, default=4, help="SmolLM2: goals (the batched run's batch size)")
    parser.add_argument("--smollm2-max-steps", type=int, default=3)
    parser.add_argument("--smollm2-max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    start = time.perf_counter()
    shop = WebShop.load(args.data_dir)
    print(f"load: {time.perf_counter() - start:.1f} s ({shop}); torch threads: {torch.get_num_threads()}", flush=True)
    chat = ChatFormat()
    results: dict = {"threads": args.threads, "shop": str(shop), "reuse_cache": not args.no_reuse_cache}

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        tiny_dir = ensure_tiny_policy(args.tiny_dir or os.path.join(tmp, "tiny"), TinyPolicySpec(),
                                      shop, chat, list(shop.split("train")))
        model, tokenizer = load_policy(str(tiny_dir))
        print(f"tiny policy: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, vocabulary "
              f"{len(tokenizer)} (built/loaded in {time.perf_counter() - start:.1f} s)", flush=True)
        engine = RolloutEngine(model, tokenizer, chat, max_new_tokens=args.max_new_tokens, temperature=1.0,
                               reuse_cache=not args.no_reuse_cache)
        goals = list(range(args.goals))
        results["tiny"] = {"max_steps": args.max_steps, "max_new_tokens": args.max_new_tokens,
                           **compare("tiny", engine, shop, goals, args.goals, args.max_steps, args.seed)}
        ratio = results["tiny"]["speedup_tokens_per_s"]
        print(f"tiny     target: batch {args.goals} >= {TARGET_SPEEDUP:.0f}x batch 1 -> {ratio:.2f}x "
              f"({'met' if ratio >= TARGET_SPEEDUP else 'NOT met'})", flush=True)

    if not args.skip_smollm2:
        start = time.perf_counter()
        model, tokenizer = load_policy("smollm2-135m-instruct")
        print(f"smollm2 loaded in {time.perf_counter() - start:.1f} s", flush=True)
        engine = RolloutEngine(model, tokenizer, chat, max_new_tokens=args.smollm2_max_new_tokens, temperature=1.0,
                               reuse_cache=not args.no_reuse_cache)
        goals = list(range(args.smollm2_goals))
        results["smollm2"] = {"max_steps": args.smollm2_max_steps, "max_new_tokens": args.smollm2_max_new_tokens,
                              **compare("smollm2", engine, shop, goals, args.smollm2_goals, args.smollm2_max_steps,
                                        args.seed)}

    print(json.dumps(results))
    sys.stdout.flush()
    return results


if __name__ == "__main__":
    main()
