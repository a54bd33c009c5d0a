"""Environment throughput on one core: env steps/s for rule and oracle episodes, and search latency.

    python benchmarks/env_throughput.py

Baseline measured in the same run: the same episodes with the search cache disabled (every ``search[...]`` runs
BM25), so the ratio shows what the cache buys; the target is 2,000 steps/s overall.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from apo_lightning.baselines.scripted import make_policy, play_episode
from apo_lightning.webshop import WebShop, WebShopEnv
from apo_lightning.webshop.datadir import resolve_data_dir

TARGET_STEPS_PER_S = 2000.0


def steps_per_second(shop: WebShop, policy_name: str, goal_indices: list[int], mode: str) -> tuple[float, int]:
    env = WebShopEnv(shop, observation_mode=mode, max_steps=15)
    policy = make_policy(policy_name, seed=0)
    start = time.perf_counter()
    steps = sum(len(play_episode(env, policy, i).turns) for i in goal_indices)
    return steps / (time.perf_counter() - start), steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=None, help="WebShop data folder (default: the data rule)")
    parser.add_argument("--episodes", type=int, default=2000, help="goals per policy (from goal 0)")
    parser.add_argument("--mode", choices=("text", "text_rich"), default="text")
    args = parser.parse_args()
    args.data_dir, description = resolve_data_dir(args.data_dir)
    print(description)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    start = time.perf_counter()
    shop = WebShop.load(args.data_dir, goals="synthetic")
    print(f"load: {time.perf_counter() - start:.2f} s  ({shop})")
    goals = list(range(min(args.episodes, len(shop.goals))))

    results = {}
    for policy in ("rule", "oracle"):
        shop._cached_search.cache_clear()
        cold_rate, _ = steps_per_second(shop, policy, goals, args.mode)  # baseline: no search-cache hits
        warm_rate, steps = steps_per_second(shop, policy, goals, args.mode)  # cache warm, as in long training
        results[policy] = {"steps": steps, "steps_per_s_uncached": round(cold_rate), "steps_per_s": round(warm_rate)}
        print(f"{policy:6s}: {steps} steps  uncached {cold_rate:8.0f} steps/s   cached {warm_rate:8.0f} steps/s   "
              f"ratio {warm_rate / cold_rate:.2f}x   vs target {cold_rate / TARGET_STEPS_PER_S:.2f}x (uncached)")

    golden = None if args.data_dir is None else Path(args.data_dir) / "golden" / "bm25_top50_golden.jsonl"
    queries = [json.loads(line)["query"] for line in open(golden)] if golden and golden.exists() else \
        [g["instruction_text"] for g in shop.goals[:770]]
    latencies = []
    for query in queries:
        t = time.perf_counter()
        shop.search_engine.search(query, 50)
        latencies.append((time.perf_counter() - t) * 1e3)
    latencies.sort()
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    print(f"search: {len(queries)} queries  mean {statistics.mean(latencies):.3f} ms  p95 {p95:.3f} ms")

    total_steps = sum(r["steps"] for r in results.values())
    overall = total_steps / sum(r["steps"] / r["steps_per_s_uncached"] for r in results.values())
    print(f"overall (uncached): {overall:.0f} steps/s = {overall / TARGET_STEPS_PER_S:.2f}x the 2,000 steps/s target")
    print(json.dumps({"results": results, "search_ms_mean": round(statistics.mean(latencies), 4),
                      "search_ms_p95": round(p95, 4), "overall_steps_per_s_uncached": round(overall)}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
