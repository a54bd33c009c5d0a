"""Catalog scale: load time, resident memory, search latency and env throughput against the number of products.

    python benchmarks/catalog_scale.py --sizes 10000 100000 1000000

For each size a synthetic catalog (``webshop.synthetic``, seed 0) is generated once under ``--catalog-root`` and
stored once on disk (``webshop.store``: products, goals and the search index, keyed by the files' SHA-256, under
``--cache-dir``); both are reused by later runs. A fresh process per size, pinned to one core, then measures:

* **load**: ``WebShop.load(..., cache=True)`` from the cache, in seconds (it hashes the raw files and maps the store;
  the seed's goal table is drawn while building, so this is the load every later run pays);
* **memory**: resident set size (psutil, else ``/proc/self/statm``) after loading minus before, per product; and
  again after the searches and episodes below, since memory-mapped pages that they read count as resident;
* **search**: latency p50 / p95 of the pruned search (``SearchEngine.search``, k = 50, no result cache) over a fixed
  query set, the same at every size (from the synthetic word tables: each product type's query, the query with
  attributes, a brand and the query, and a full instruction with options and a price ceiling, as the rule
  baseline searches), after one pass that is reported as "cold"; the exhaustive reference
  (``SearchEngine.search_exhaustive``, O(N) per query) over the same queries is the baseline of the same run;
* **env**: steps per second of two scripted policies over the first ``--episodes`` goals, the shop's search cache
  emptied first: "rule" (the WebShop paper's rule baseline: search the instruction, open the first hit, buy) and
  "oracle" (search the goal's query, open the goal product if it is listed, else the first hit, click the goal's
  options, buy); "env" is both together.

It prints one line per size, a table of each metric against size with the growth factor between consecutive sizes
(and the exponent e of N^e that factor amounts to), the targets at 1 M products (load <= 60 s from the cache,
<= 4 GB resident, search p95 <= 20 ms, env >= 2,000 steps/s), and last one JSON object with every figure.
Generating a 1 M catalog holds it in memory (about 7 KB per product) and storing it about 5 KB per product, once,
each in its own process; the measurement holds only what it maps and reads.

How a synthetic catalog of this size differs from the real one, which changes what the figures say:

* **Vocabulary.** Products are composed from fixed word tables (84 product types in 9 categories), so the vocabulary
  stays near 1,200 terms whatever the size (the real 1k set alone has 12,074, 60 % of them in a single product, and
  the full catalog's brands, model numbers and misspellings add hundreds of thousands). Every synthetic term is
  common: the largest posting list holds about two thirds of the products, and a query's terms match a few percent
  of the catalog each, so pruning has less to skip and the index is smaller than a real one of the same size.
* **Lengths.** Search documents average about 40 tokens (real: 108) and titles 9 words (real: 18); a stored product
  record is about 2.5 KB of JSON (real: 4.8 KB, long descriptions and image lists). Real stores are about twice as
  large on disk per product and decode more slowly.
* **Duplicates.** With 84 types, a million products contain many near-identical documents, so thousands of products
  tie at the same score and the ASIN tie-break decides most ranks; real catalogs tie far less.
* **Attributes and options.** Attributes (about 2.8 per product) and option values come from small per-type pools
  (about 490 distinct attributes in all; real: open-ended), with option counts drawn to match the real 1k set.
* **Goals.** Half of the products carry an instruction, which gives about 4.2 synthetic goals per product (the real
  1k set: 6.9); goals are built on access, so their number changes load time and memory little.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGETS_AT = 1_000_000
TARGET_LOAD_S = 60.0
TARGET_RESIDENT_BYTES = 4e9
TARGET_SEARCH_P95_MS = 20.0
TARGET_STEPS_PER_S = 2000.0
#: The rows of the table: (key in a size's figures, label, format).
METRICS = (
    ("load_s", "load from cache (s)", "{:.2f}"),
    ("resident_bytes_per_product_loaded", "resident / product, loaded (B)", "{:.0f}"),
    ("resident_bytes_per_product_used", "resident / product, after use (B)", "{:.0f}"),
    ("resident_mb_used", "resident, after use (MB)", "{:.0f}"),
    ("search_p50_ms", "search p50 (ms)", "{:.3f}"),
    ("search_p95_ms", "search p95 (ms)", "{:.3f}"),
    ("search_cold_p95_ms", "search p95, first pass (ms)", "{:.3f}"),
    ("exhaustive_p95_ms", "exhaustive p95, baseline (ms)", "{:.3f}"),
    ("steps_per_s", "env steps/s (rule + oracle)", "{:.0f}"),
    ("store_mb", "store on disk (MB)", "{:.0f}"),
)


# ------------------------------------------------------------------------------------------------ measuring
def resident_bytes() -> int:
    """This process's resident set size in bytes (psutil when installed, else /proc/self/statm)."""
    try:
        import psutil
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return psutil.Process().memory_info().rss


def fixed_queries(seed: int = 0) -> list[str]:
    """The query set: five queries per product type of the synthetic word tables, the same for every catalog."""
    from apo_lightning.webshop.synthetic import vocabulary

    vocab = vocabulary()
    rng = random.Random(seed)
    queries = []
    for category in vocab.categories:
        for ptype in category.types:
            attributes = list(ptype.pre + ptype.with_ + ptype.for_) or [""]
            queries.append(ptype.query)
            queries.append(f"{rng.choice(attributes)} {ptype.query}".strip())
            queries.append(f"{ptype.query} {rng.choice(attributes)} {rng.choice(attributes)}".strip())
            queries.append(f"{rng.choice(category.brands)} {ptype.query}".lower())
            options = ", and ".join(f"{name.lower()}: {rng.choice(vocab.option_values[pool]).lower()}"
                                    for name, pool in ptype.options[:2])
            instruction = f"find me {rng.choice(attributes)} {ptype.query} for {rng.choice(attributes)}"
            instruction += f" with {options}" if options else ""
            queries.append(f"{instruction}, and price lower than {rng.choice((30, 50, 100))}.00 dollars")
    return queries


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank on the sorted values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * (len(ordered) - 1) + 0.5))]


def product_links(env) -> list[str]:
    """The product links of the current results page, in page order."""
    from apo_lightning.webshop.pages import LINK

    return [key for key, target in env.page.clickables.items() if target.kind == LINK]


def rule_episode(env, goal_index: int) -> int:
    """The rule baseline: search the instruction, open the first hit, buy. Returns the steps taken."""
    env.reset(goal_index)
    steps = 1
    env.step(f"search[{env.instruction_text.lower()}]")
    links = product_links(env)
    if links:
        env.step(f"click[{links[0]}]")
        env.step("click[buy now]")
        steps += 2
    return steps


def oracle_episode(env, goal_index: int) -> int:
    """Search the goal's query, open the goal product if listed (else the first hit), click its options, buy."""
    goal = env.shop.goals[goal_index]
    env.reset(goal_index)
    steps = 1
    env.step(f"search[{goal['query']}]")
    links = product_links(env)
    if not links:
        return steps
    asin = goal["asin"].lower()
    env.step(f"click[{asin if asin in links else links[0]}]")
    steps += 1
    options = goal["goal_options"].values() if isinstance(goal["goal_options"], dict) else goal["goal_options"]
    for value in options:
        if value in env.page.clickables:
            env.step(f"click[{value}]")
            steps += 1
    env.step("click[buy now]")
    return steps + 1


def measure(catalog: Path, cache_dir: Path, episodes: int) -> dict:
    """Every figure for one stored catalog, in this (fresh) process."""
    from apo_lightning.webshop import WebShop, WebShopEnv

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    queries = fixed_queries()
    before = resident_bytes()
    start = time.perf_counter()
    shop = WebShop.load(catalog, goals="synthetic", seed=233, cache=True, cache_dir=cache_dir)
    load_s = time.perf_counter() - start
    loaded = resident_bytes()
    n = len(shop.products)

    engine = shop.search_engine
    cold = []
    for query in queries:
        t = time.perf_counter()
        engine.search(query, 50)
        cold.append((time.perf_counter() - t) * 1e3)
    warm, exhaustive = [], []
    for query in queries:
        t = time.perf_counter()
        engine.search(query, 50)
        warm.append((time.perf_counter() - t) * 1e3)
    for query in queries:
        t = time.perf_counter()
        engine.search_exhaustive(query, 50)
        exhaustive.append((time.perf_counter() - t) * 1e3)

    goals = range(min(episodes, len(shop.goals)))
    rates, total_steps, total_s = {}, 0, 0.0
    for name, episode in (("rule", rule_episode), ("oracle", oracle_episode)):
        shop._cached_search.cache_clear()
        env = WebShopEnv(shop, observation_mode="text", max_steps=15)
        t = time.perf_counter()
        steps = sum(episode(env, i) for i in goals)
        seconds = time.perf_counter() - t
        rates[name] = steps / seconds
        total_steps, total_s = total_steps + steps, total_s + seconds
    used = resident_bytes()
    store_bytes = sum(f.stat().st_size for f in shop.products.folder.rglob("*") if f.is_file())
    return {
        "products": n, "goals": len(shop.goals), "vocabulary": engine.vocabulary_size,
        "postings": int(len(engine._posting_doc)), "load_s": load_s,
        "resident_mb_before": before / 1e6, "resident_mb_loaded": loaded / 1e6, "resident_mb_used": used / 1e6,
        "resident_bytes_per_product_loaded": (loaded - before) / n,
        "resident_bytes_per_product_used": (used - before) / n,
        "queries": len(queries), "search_p50_ms": percentile(warm, 50), "search_p95_ms": percentile(warm, 95),
        "search_mean_ms": statistics.fmean(warm), "search_cold_p95_ms": percentile(cold, 95),
        "exhaustive_p50_ms": percentile(exhaustive, 50), "exhaustive_p95_ms": percentile(exhaustive, 95),
        "episodes": len(goals), "rule_steps_per_s": rates["rule"], "oracle_steps_per_s": rates["oracle"],
        "steps_per_s": total_steps / total_s, "store_mb": store_bytes / 1e6,
        "build_s": shop.products.manifest.get("build_seconds"),
    }


def prepare(catalog: Path, cache_dir: Path, size: int, seed: int) -> dict:
    """Generate the catalog and build its store (each only when missing); seconds spent on each."""
    from apo_lightning.webshop import WebShop
    from apo_lightning.webshop.synthetic import ensure_catalog

    t = time.perf_counter()
    ensure_catalog(catalog, seed=seed, num_products=size)
    generated = time.perf_counter() - t
    t = time.perf_counter()
    WebShop.load(catalog, goals="synthetic", seed=233, cache=True, cache_dir=cache_dir)  # builds store and goal table
    return {"generate_s": generated, "store_s": time.perf_counter() - t}


def worker(args: argparse.Namespace) -> None:
    catalog, cache_dir = Path(args.catalog), Path(args.cache_dir)
    if args.worker == "prepare":
        result = prepare(catalog, cache_dir, args.size, args.seed)
    else:
        result = measure(catalog, cache_dir, args.episodes)
    print(json.dumps(result))


def run_worker(kind: str, size: int, catalog: Path, args: argparse.Namespace) -> dict:
    """Run ``--worker kind`` in a fresh process; its last stdout line is its JSON result."""
    command = [sys.executable, __file__, "--worker", kind, "--size", str(size), "--catalog", str(catalog),
               "--cache-dir", str(args.cache_dir), "--episodes", str(args.episodes), "--seed", str(args.seed)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"catalog_scale: the {kind} step for {size:,} products failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ reporting
def growth(a: float, b: float, size_a: int, size_b: int) -> str:
    """``b / a`` and the exponent e with (size_b / size_a) ** e == b / a."""
    if a <= 0 or b <= 0:
        return "n/a"
    factor = b / a
    return f"x{factor:.2f} (N^{math.log(factor) / math.log(size_b / size_a):.2f})"


def report(results: dict[int, dict]) -> None:
    sizes = sorted(results)
    print(f"\n{'metric':36s}" + "".join(f"{size:>14,}" for size in sizes) +
          "".join(f"{f'{a:,}->{b:,}':>26s}" for a, b in zip(sizes, sizes[1:])))
    for key, label, fmt in METRICS:
        row = f"{label:36s}" + "".join(f"{fmt.format(results[s][key]):>14s}" for s in sizes)
        row += "".join(f"{growth(results[a][key], results[b][key], a, b):>26s}" for a, b in zip(sizes, sizes[1:]))
        print(row)
    largest = sizes[-1]
    r = results[largest]
    print(f"\ntargets at {TARGETS_AT:,} products" + ("" if largest == TARGETS_AT else
          f" (not measured here: the largest size is {largest:,}; these lines read its figures)"))
    resident = r["resident_mb_used"] * 1e6
    for met, line in (
        (r["load_s"] <= TARGET_LOAD_S, f"load {r['load_s']:.1f} s <= {TARGET_LOAD_S:.0f} s"),
        (resident <= TARGET_RESIDENT_BYTES, f"resident {resident / 1e9:.2f} GB <= {TARGET_RESIDENT_BYTES / 1e9:.0f} GB"),
        (r["search_p95_ms"] <= TARGET_SEARCH_P95_MS,
         f"search p95 {r['search_p95_ms']:.2f} ms <= {TARGET_SEARCH_P95_MS:.0f} ms"),
        (r["steps_per_s"] >= TARGET_STEPS_PER_S,
         f"env {r['steps_per_s']:.0f} steps/s >= {TARGET_STEPS_PER_S:.0f} steps/s"),
    ):
        print(f"  {'met ' if met else 'MISSED'} {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                        help="catalog sizes in products (default: 10000 100000 1000000)")
    parser.add_argument("--catalog-root", type=Path, default=Path("data") / "scale",
                        help="where the synthetic catalogs are generated (default data/scale)")
    parser.add_argument("--cache-dir", type=Path, default=Path("data") / "webshop_cache",
                        help="the on-disk catalog cache (default data/webshop_cache)")
    parser.add_argument("--episodes", type=int, default=500, help="goals per scripted policy (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic catalog seed (default 0)")
    parser.add_argument("--worker", choices=("prepare", "measure"), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--catalog", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if any(size < 1 for size in args.sizes):
        parser.error(f"--sizes must be positive numbers of products, got {args.sizes}")
    print(f"cores {os.cpu_count()}, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          "(timings need idle cores)")
    results = {}
    for size in sorted(set(args.sizes)):
        catalog = args.catalog_root / f"synthetic-n{size}-seed{args.seed}"
        prepared = run_worker("prepare", size, catalog, args)
        results[size] = {**run_worker("measure", size, catalog, args), **prepared}
        r = results[size]
        print(f"{size:>9,} products: load {r['load_s']:.2f} s, resident {r['resident_mb_used']:.0f} MB "
              f"({r['resident_bytes_per_product_used']:.0f} B/product), search p50 {r['search_p50_ms']:.2f} ms "
              f"p95 {r['search_p95_ms']:.2f} ms (exhaustive p95 {r['exhaustive_p95_ms']:.2f} ms), env "
              f"{r['steps_per_s']:.0f} steps/s (rule {r['rule_steps_per_s']:.0f}, oracle "
              f"{r['oracle_steps_per_s']:.0f}); generated in {r['generate_s']:.0f} s, stored in {r['store_s']:.0f} s",
              flush=True)
    report(results)
    print(json.dumps({"results": {str(k): v for k, v in results.items()}}))


if __name__ == "__main__":
    main()
