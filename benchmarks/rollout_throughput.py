"""Rollout throughput: episodes/s and generated tokens/s of the batched engine, batch 1 against batch B; for
SmolLM2-135M-Instruct also decode speed against the memory-bandwidth bound and against Hugging Face ``generate``.

    python benchmarks/rollout_throughput.py                  # tiny default policy, then SmolLM2-135M-Instruct
    python benchmarks/rollout_throughput.py --skip-tiny --data-dir data/webshop_1k     # the real 1k set (the download folder)
    python benchmarks/rollout_throughput.py --skip-smollm2 --threads 2

The tiny default policy (``TinyPolicySpec()``: 4 layers, width 192, 4k BPE vocabulary) is built
untrained into ``--tiny-dir`` (a temporary folder unless given) and plays the same ``--goals`` goals twice,
sampling at temperature 1.0: one episode at a time (batch 1, the baseline measured in the same run) and all of
them in one lockstep batch. SmolLM2-135M-Instruct (``load_policy("smollm2-135m-instruct")``) does the same on a
few goals with shorter episodes. An untrained model writes junk until ``max_new_tokens`` every turn, so no reply
parses, every step is a no-op on the search page and every episode runs to ``max_steps``: the worst case for
throughput (the longest replies and the most turns), and the same work in both batch modes.

SmolLM2's decode speed, on the same prompts for every engine (each goal's second-turn prompt: the task, the search
page, a search reply and the results page it gets), exactly ``--smollm2-new-tokens`` greedy tokens per prompt:

- the bound: a batch-1 decode step reads every weight once, so it cannot beat bandwidth ÷ weight bytes, with the
  bandwidth of this machine measured in the same run (the best of 5 copies of a 1 GiB array, bytes read + written);
- Hugging Face ``generate`` (the baseline), the engine as configured, and the engine with ``pack_weights``
  (``rollout.packed``), each in float32 and in bfloat16 weights, at batch 1 and at ``--smollm2-batch`` (the training
  batch of ``configs/smollm2.yaml``): prefill tokens/s, decode tokens/s, decode as a share of the bound (batch 1) and
  the batched speed-up (targets: batch 1 at least 50 % of the bound, the training batch at least 6x batch 1).

Prints one line per run, the speed-up batch B / batch 1 (target: at least 8x for the tiny policy at batch 32) and,
last, one JSON object with every number.
"""

from __future__ import annotations

import argparse
import contextlib
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
from apo_lightning.rollout.packed import packed_linears
from apo_lightning.utils.seeds import derive_seed
from apo_lightning.webshop import WebShop, WebShopEnv

TARGET_SPEEDUP = 8.0
TARGET_SHARE_OF_BOUND = 0.5  # SmolLM2 batch-1 decode, of bandwidth / weight bytes
TARGET_BATCH_SPEEDUP = 6.0  # SmolLM2 decode at the training batch / batch 1, tokens/s


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

    def remove(self, model) -> None:
        model.forward = self.forward


def copy_bandwidth(gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes read plus bytes written per second (GB/s) of the best of ``repeats`` copies of a ``gib`` GiB array."""
    source = torch.ones(int(gib * 2**30) // 8, dtype=torch.float64)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.numel() * 8 / best / 1e9


class ForcedLength(RolloutEngine):
    """The engine decoding exactly ``max_new_tokens`` per reply (no stop on eos or ``</answer>``), as the HF
    baseline is run, so both do the same work."""

    def _ends_with_stop(self, ids: list[int]) -> bool:
        return False


def second_turn_prompts(shop: WebShop, tokenizer, chat: ChatFormat, goals: list[int]) -> list[list[int]]:
    """Per goal, the token ids of its second-turn prompt: the task and search page, the reply
    ``search[<instruction>]``, and the results page that search gives (as the engine renders them)."""
    prompts = []
    for goal in goals:
        env = WebShopEnv(shop, max_steps=15)
        first = chat.turn_message(1, 15, env.reset(goal), env.available_actions())
        reply = f"<think>I search for it.</think><answer>search[{env.instruction_text}]</answer>"
        observation = env.step(f"search[{env.instruction_text}]")[0]
        second = chat.turn_message(2, 14, observation, env.available_actions())
        messages = chat.messages(env.instruction_text, [(first, reply), (second, None)])
        prompts.append(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                     return_dict=True)["input_ids"])
    return prompts


def decode_run(model, tokenizer, prompts: list[list[int]], new_tokens: int, how: str) -> dict:
    """Greedy decoding of exactly ``new_tokens`` per prompt, all prompts in one batch, by ``how``: "hf" (``generate``
    on the left-padded batch), "engine" or "engine_packed" (``ForcedLength.generate``, plain or ``pack_weights``).
    Returns prefill and decode tokens/s (decode: the steps after the prefill's first token)."""
    timer = ForwardTimer(model)
    start = time.perf_counter()
    if how == "hf":
        batch = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
        model.generate(**batch, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    else:
        engine = ForcedLength(model, tokenizer, ChatFormat(), max_new_tokens=new_tokens, greedy=True)
        engine.eos_ids = set()
        with packed_linears(model, len(prompts)) if how == "engine_packed" else contextlib.nullcontext():
            engine.generate(prompts, torch.Generator().manual_seed(0))
    seconds = time.perf_counter() - start
    timer.remove(model)
    decoded = len(prompts) * (new_tokens - 1)
    return {"batch_size": len(prompts), "seconds": round(seconds, 3),
            "prefill_tokens_per_s": round(sum(map(len, prompts)) / timer.seconds["prefill"], 1),
            "decode_tokens_per_s": round(decoded / timer.seconds["decode"], 2)}


def decode_speed(model, tokenizer, prompts: list[list[int]], new_tokens: int, batch_size: int,
                 bandwidth: float) -> dict:
    """:func:`decode_run` by each engine at batch 1 (the first prompt) and at ``batch_size``; prints a line each."""
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bound = bandwidth * 1e9 / weight_bytes
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    results = {"weight_bytes": weight_bytes, "bound_tokens_per_s": round(bound, 2)}
    decode_run(model, tokenizer, prompts[:1], 4, "hf")  # warm-up
    for how in ("hf", "engine", "engine_packed"):
        single = decode_run(model, tokenizer, prompts[:1], new_tokens, how)
        batched = decode_run(model, tokenizer, prompts[:batch_size], new_tokens, how)
        share = single["decode_tokens_per_s"] / bound
        speedup = batched["decode_tokens_per_s"] / single["decode_tokens_per_s"]
        results[how] = {"batch1": single, f"batch{batch_size}": batched, "share_of_bound": round(share, 3),
                        "batch_speedup": round(speedup, 2)}
        print(f"smollm2  {dtype:8s} {how:13s} decode batch 1 {single['decode_tokens_per_s']:6.1f} tokens/s "
              f"({share:4.0%} of the bound {bound:.1f}), batch {batch_size} {batched['decode_tokens_per_s']:6.1f} "
              f"tokens/s ({speedup:.1f}x); prefill {single['prefill_tokens_per_s']:.0f} / "
              f"{batched['prefill_tokens_per_s']:.0f} tokens/s", flush=True)
    return results


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


def smollm2(shop: WebShop, chat: ChatFormat, args) -> dict:
    """SmolLM2-135M-Instruct: decode against the bound and HF ``generate`` in float32 and bfloat16 weights, then
    episodes (trajectories per minute) at batch 1 and the training batch with and without packed weights."""
    bandwidth = copy_bandwidth()
    results: dict = {"copy_bandwidth_gb_per_s": round(bandwidth, 2), "new_tokens": args.smollm2_new_tokens}
    print(f"memory bandwidth (copy, read + write): {bandwidth:.1f} GB/s", flush=True)
    goals = list(range(args.smollm2_batch))
    for dtype in ("float32", "bfloat16"):
        model, tokenizer = load_policy("smollm2-135m-instruct", dtype=dtype)
        prompts = second_turn_prompts(shop, tokenizer, chat, goals)
        results.setdefault("prompt_tokens", [len(p) for p in prompts])
        results[dtype] = decode_speed(model, tokenizer, prompts, args.smollm2_new_tokens, args.smollm2_batch,
                                      bandwidth)
        for how in ("engine", "engine_packed"):
            share, speedup = results[dtype][how]["share_of_bound"], results[dtype][how]["batch_speedup"]
            print(f"smollm2  {dtype:8s} {how:13s} targets: batch 1 >= {TARGET_SHARE_OF_BOUND:.0%} of the bound -> "
                  f"{share:.0%} ({'met' if share >= TARGET_SHARE_OF_BOUND else 'NOT met'}); batch "
                  f"{args.smollm2_batch} >= {TARGET_BATCH_SPEEDUP:.0f}x batch 1 -> {speedup:.1f}x "
                  f"({'met' if speedup >= TARGET_BATCH_SPEEDUP else 'NOT met'})", flush=True)
        if dtype == "float32":
            for pack in (False, True):
                engine = RolloutEngine(model, tokenizer, chat, max_new_tokens=args.smollm2_max_new_tokens,
                                       temperature=1.0, reuse_cache=not args.no_reuse_cache, pack_weights=pack)
                run = compare(f"smollm2{' packed' if pack else ''}", engine, shop, goals, args.smollm2_batch,
                              args.smollm2_max_steps, args.seed)
                for size in (1, args.smollm2_batch):
                    run[f"batch{size}"]["trajectories_per_minute"] = round(60 * run[f"batch{size}"]["episodes_per_s"],
                                                                           2)
                results["episodes_packed" if pack else "episodes"] = {"max_steps": args.smollm2_max_steps,
                                                                      "max_new_tokens": args.smollm2_max_new_tokens,
                                                                      **run}
    return results


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
    parser.add_argument("--pack-weights", action="store_true", help="tiny policy: RolloutEngine(pack_weights=True)")
    parser.add_argument("--skip-tiny", action="store_true", help="measure SmolLM2 only")
    parser.add_argument("--skip-smollm2", action="store_true", help="measure the tiny policy only")
    parser.add_argument("--smollm2-batch", type=int, default=8,
                        help="SmolLM2: the batched runs' batch size (configs/smollm2.yaml: 8 goals per process)")
    parser.add_argument("--smollm2-new-tokens", type=int, default=64, help="SmolLM2: tokens per prompt, decode runs")
    parser.add_argument("--smollm2-max-steps", type=int, default=3, help="SmolLM2: env step limit, episode runs")
    parser.add_argument("--smollm2-max-new-tokens", type=int, default=48, help="SmolLM2: reply limit, episode runs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    start = time.perf_counter()
    shop = WebShop.load(args.data_dir)
    print(f"load: {time.perf_counter() - start:.1f} s ({shop}); torch threads: {torch.get_num_threads()}", flush=True)
    chat = ChatFormat()
    results: dict = {"threads": args.threads, "shop": str(shop), "reuse_cache": not args.no_reuse_cache}

    if not args.skip_tiny:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            tiny_dir = ensure_tiny_policy(args.tiny_dir or os.path.join(tmp, "tiny"), TinyPolicySpec(),
                                          shop, chat, list(shop.split("train")))
            model, tokenizer = load_policy(str(tiny_dir))
            print(f"tiny policy: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, vocabulary "
                  f"{len(tokenizer)} (built/loaded in {time.perf_counter() - start:.1f} s)", flush=True)
            engine = RolloutEngine(model, tokenizer, chat, max_new_tokens=args.max_new_tokens, temperature=1.0,
                                   reuse_cache=not args.no_reuse_cache, pack_weights=args.pack_weights)
            goals = list(range(args.goals))
            results["tiny"] = {"max_steps": args.max_steps, "max_new_tokens": args.max_new_tokens,
                               "pack_weights": args.pack_weights,
                               **compare("tiny", engine, shop, goals, args.goals, args.max_steps, args.seed)}
            ratio = results["tiny"]["speedup_tokens_per_s"]
            print(f"tiny     target: batch {args.goals} >= {TARGET_SPEEDUP:.0f}x batch 1 -> {ratio:.2f}x "
                  f"({'met' if ratio >= TARGET_SPEEDUP else 'NOT met'})", flush=True)

    if not args.skip_smollm2:
        results["smollm2"] = smollm2(shop, chat, args)

    print(json.dumps(results))
    sys.stdout.flush()
    return results


if __name__ == "__main__":
    main()
