"""The loss's passes over real trajectories: one segment at a time (cut to length) against one padded batch.

    python benchmarks/loss_passes.py --model models/webshop-1k-ref
    python benchmarks/loss_passes.py --model models/webshop-1k-ref --trajectories 32 --threads 1

The policy plays ``--trajectories`` real training goals once (temperature 1.0, full history), then the same
collated batch goes through the two ways of computing the generated tokens' log π, each timed as a reference
forward (no grad) plus a policy forward and backward, ``--repeats`` times (best time kept):

- baseline, ``generated_logprobs(..., per_segment=False)``: the decoder over the whole right-padded ``(S, T)``
  batch;
- ``generated_logprobs`` (default ``per_segment=True``): each segment cut to its own length, no compute on padding.

Prints the batch shape and padding share, both timings, the speed-up (baseline / per-segment) and the largest
log-prob difference between the two (they compute the same thing), then one JSON object with every number.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download

import torch

from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.rollout.engine import rollout_goals
from apo_lightning.models.loading import load_policy
from apo_lightning.rollout.collate import collate_trajectories
from apo_lightning.rollout.engine import RolloutEngine
from apo_lightning.apo.logprobs import generated_logprobs
from apo_lightning.webshop import WebShop
from apo_lightning.webshop.datadir import resolve_data_dir


def time_passes(per_segment: bool, policy, reference, batch: dict, repeats: int) -> tuple[float, torch.Tensor]:
    """Best wall seconds of reference forward + policy forward + backward; the policy's log-probs of the last."""
    args = (batch["input_ids"], batch["attention_mask"], batch["gen_mask"], per_segment)
    best, logp = float("inf"), None
    for _ in range(repeats):
        policy.zero_grad(set_to_none=True)
        start = time.perf_counter()
        with torch.no_grad():
            generated_logprobs(reference, *args)
        logp = generated_logprobs(policy, *args)
        logp.sum().backward()
        best = min(best, time.perf_counter() - start)
    return best, logp.detach()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="models/webshop-1k-ref")
    parser.add_argument("--data-dir", default=None, help="WebShop data folder (default: the data rule)")
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    args.data_dir, description = resolve_data_dir(args.data_dir)
    print(description)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    policy, tokenizer = load_policy(args.model)
    reference = copy.deepcopy(policy).eval()
    shop = WebShop.load(args.data_dir)
    goals = list(shop.split("train"))[:args.trajectories]
    engine = RolloutEngine(policy, tokenizer, ChatFormat(), max_new_tokens=64, temperature=1.0)
    trajectories = rollout_goals(engine, shop, goals, batch_size=len(goals), seed=args.seed)
    batch = collate_trajectories(trajectories, tokenizer.pad_token_id)
    policy.train()

    segments, length = batch["input_ids"].shape
    real = int(batch["attention_mask"].sum())
    padded_s, padded_logp = time_passes(False, policy, reference, batch, args.repeats)
    segment_s, segment_logp = time_passes(True, policy, reference, batch, args.repeats)
    result = {
        "model": args.model, "trajectories": len(trajectories), "segments": segments, "padded_length": length,
        "real_tokens": real, "padding_share": 1 - real / (segments * length),
        "generated_tokens": int(batch["gen_mask"].sum()), "threads": args.threads,
        "padded_batch_s": padded_s, "per_segment_s": segment_s, "speedup": padded_s / segment_s,
        "max_abs_logp_diff": float((padded_logp - segment_logp).abs().max()),
    }
    print(f"batch ({segments}, {length}): {real} real tokens, {result['padding_share']:.0%} padding, "
          f"{result['generated_tokens']} generated")
    print(f"reference forward + policy forward + backward: padded batch {padded_s:.2f} s (baseline), "
          f"per segment {segment_s:.2f} s -> {result['speedup']:.2f}x; max |Δ log π| "
          f"{result['max_abs_logp_diff']:.2e}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
