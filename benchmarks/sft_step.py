"""One SFT training step of the tiny policy, through the full logits against the generated positions only.

    python benchmarks/sft_step.py
    python benchmarks/sft_step.py --threads 2 --batches 5

The turn drills (``baselines/drills.py``) and the SFT module (``lit/sft_module.py``) learn only the reply tokens, a few
percent of each sequence. Each batch below is timed (forward + backward, wall seconds) both ways on the same model:

- baseline, ``apo.logprobs.sft_loss`` on ``model(input_ids, attention_mask).logits``: the output head and the
  log-softmax over every position of the padded ``(B, T)`` batch, with the padding mask;
- ``apo.logprobs.generated_nll`` (what the SFT module trains with): the decoder one sequence at a time, cut to its
  length, and the head only where a reply token is predicted.

Two workloads, as configured in ``configs/sft_tiny_cpu.yaml``: ``--drill-batch`` (32) turn drills from the real
training goals, and ``--demo-batch`` (8) oracle demonstrations on synthetic goals, grouped by length as the SFT
sampler groups them. The model is the tiny policy's architecture (``TinyPolicySpec``) freshly initialised, without
drills (the timings do not depend on the weights), unless ``--model`` names a policy directory. Prints each
workload's batch shapes, both mean step times, the speed-up (baseline / generated positions only) and the largest
loss difference (they compute the same loss), then one JSON object with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download

import torch
from transformers.trainer_pt_utils import LengthGroupedSampler

from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.baselines.drills import TurnDrills
from apo_lightning.baselines.demonstrations import oracle_demonstrations
from apo_lightning.apo.logprobs import generated_nll
from apo_lightning.models.loading import load_policy
from apo_lightning.baselines.corpus import ensure_tiny_policy
from apo_lightning.models.tiny import TinyPolicySpec
from apo_lightning.rollout.collate import pad_batch
from apo_lightning.rollout.engine import RolloutEngine
from apo_lightning.apo.logprobs import sft_loss
from apo_lightning.webshop import WebShop, WebShopEnv
from apo_lightning.webshop.datadir import resolve_data_dir


def full_logits_loss(model, batch: dict) -> torch.Tensor:
    """The baseline: the head over every position of the padded batch."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return sft_loss(logits, batch["input_ids"], batch["gen_mask"])


def generated_only_loss(model, batch: dict) -> torch.Tensor:
    return generated_nll(model, batch["input_ids"], batch["attention_mask"], batch["gen_mask"])


def time_steps(loss_fn, model, batches: list[dict]) -> tuple[list[float], list[float]]:
    """Wall seconds of forward + backward, and the loss, of each batch."""
    seconds, losses = [], []
    for batch in batches:
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = loss_fn(model, batch)
        loss.backward()
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    return seconds, losses


def compare(name: str, model, batches: list[dict]) -> dict:
    """Both ways on the same batches (one warm-up batch first); prints a line, returns the numbers."""
    time_steps(generated_only_loss, model, batches[:1])  # warm-up (allocator, kernels); not timed
    batches = batches[1:]
    baseline_s, baseline_loss = time_steps(full_logits_loss, model, batches)
    new_s, new_loss = time_steps(generated_only_loss, model, batches)
    shapes = [tuple(b["input_ids"].shape) for b in batches]
    padding = [1 - float(b["attention_mask"].float().mean()) for b in batches]
    generated = [int(b["gen_mask"][:, 1:].sum()) for b in batches]
    result = {"batches": len(batches), "shapes": shapes, "padding_share": sum(padding) / len(padding),
              "generated_tokens_per_batch": sum(generated) / len(generated),
              "full_logits_s": sum(baseline_s) / len(baseline_s), "generated_only_s": sum(new_s) / len(new_s),
              "max_abs_loss_diff": max(abs(a - b) for a, b in zip(baseline_loss, new_loss))}
    result["speedup"] = result["full_logits_s"] / result["generated_only_s"]
    print(f"{name}: batches {shapes}, {result['padding_share']:.0%} padding, "
          f"{result['generated_tokens_per_batch']:.0f} reply tokens per batch")
    print(f"  forward + backward: full logits {result['full_logits_s']:.2f} s (baseline), generated positions only "
          f"{result['generated_only_s']:.2f} s -> {result['speedup']:.2f}x; max |Δ loss| "
          f"{result['max_abs_loss_diff']:.1e}")
    return result


def demonstration_batches(shop: WebShop, chat: ChatFormat, model, tokenizer, count: int, batch_size: int,
                          seed: int) -> list[dict]:
    """``count`` batches of oracle demonstrations on synthetic training goals, grouped by length (SFT's sampler);
    ``model`` only sets up the engine, which renders the oracle's replies without calling it."""
    engine = RolloutEngine(model, tokenizer, chat)
    goals = list(shop.split("train"))[: 2 * count * batch_size]  # twice what is needed: the sampler picks among them
    envs = [WebShopEnv(shop, max_steps=15) for _ in range(len(goals))]
    examples = [{"input_ids": s.token_ids, "gen_mask": s.gen_mask}
                for t in oracle_demonstrations(engine, envs, goals) for s in t.segments]
    if len(examples) < count * batch_size:
        raise ValueError(f"{len(examples)} demonstrations from {len(goals)} training goals, fewer than the "
                         f"{count} x {batch_size} asked for")
    sampler = LengthGroupedSampler(batch_size, lengths=[len(e["input_ids"]) for e in examples],
                                   generator=torch.Generator().manual_seed(seed))
    order = list(sampler)
    return [pad_batch([examples[i] for i in order[k * batch_size:(k + 1) * batch_size]], tokenizer.pad_token_id)
            for k in range(count)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=None, help="WebShop data folder (default: the data rule)")
    parser.add_argument("--model", default=None, help="a policy directory (default: a fresh tiny policy)")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--drill-batch", type=int, default=32)
    parser.add_argument("--demo-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.data_dir, description = resolve_data_dir(args.data_dir)
    print(description)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    chat = ChatFormat()

    real = WebShop.load(args.data_dir)
    train_goals = list(real.split("train"))
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or ensure_tiny_policy(os.path.join(tmp, "tiny"), TinyPolicySpec(), real,
                                                chat, train_goals)
        model, tokenizer = load_policy(str(path))
    model.train()

    rng = random.Random(args.seed)
    drills = TurnDrills(real, chat, tokenizer, train_goals)
    drill_batches = [pad_batch([drills.draw(rng) for _ in range(args.drill_batch)], tokenizer.pad_token_id)
                     for _ in range(args.batches + 1)]
    synthetic = WebShop.load(args.data_dir, goals="synthetic", seed=args.seed)
    demo_batches = demonstration_batches(synthetic, chat, model, tokenizer, args.batches + 1, args.demo_batch,
                                         args.seed)

    result = {"model": str(args.model or "fresh tiny policy"), "threads": args.threads,
              "turn_drills": compare(f"turn drills ({args.drill_batch} per batch)", model, drill_batches),
              "demonstrations": compare(f"demonstrations ({args.demo_batch} per batch)", model, demo_batches)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
