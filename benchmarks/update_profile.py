"""Where a bfloat16 A*-PO update's time goes: torch.profiler over one update of the SmolLM2 adapter, float32 weights
under bfloat16 autocast (what ``bf16-mixed`` runs) against the frozen base weights stored in bfloat16.

    python benchmarks/update_profile.py --tokens 2048

One sequence of ``--tokens`` random token ids (15 % marked generated) through the update as the RL module runs it:
π_ref's pass without gradients (the frozen reference adapter), the policy's pass with gradient checkpointing, the
backward pass (``apo.logprobs.generated_logprobs``), one thread; a warm-up update first, then one profiled. Prints per
setting the seconds, tokens per second and the top operators by self CPU time, then the ratio of the settings'
seconds and one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from apo_lightning.apo.logprobs import generated_logprobs
from apo_lightning.lit.settings import load_start
from apo_lightning.models.lora import POLICY_ADAPTER, REFERENCE_ADAPTER, LoraSettings

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def measure(model: str, tokens: int, bf16_base: bool) -> dict:
    """One setting: the profiled update's seconds and its top operators."""
    lora = LoraSettings(rank=8, alpha=16, target_modules=TARGETS)
    policy = load_start(model, lora, "float32", keep_reference=True, gradient_checkpointing=True).policy.train()
    if bf16_base:
        for name, parameter in policy.named_parameters():
            if "lora_" not in name:
                parameter.data = parameter.data.to(torch.bfloat16)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 40_000, (1, tokens), generator=generator)
    attention = torch.ones_like(ids)
    generated = (torch.rand(1, tokens, generator=generator) < 0.15).float()

    def update() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            policy.set_adapter(REFERENCE_ADAPTER)
            with torch.no_grad():
                reference = generated_logprobs(policy, ids, attention, generated)
            policy.set_adapter(POLICY_ADAPTER)
            for name, parameter in policy.named_parameters():
                parameter.requires_grad_("lora" in name and f".{POLICY_ADAPTER}." in name)
            logp = generated_logprobs(policy, ids, attention, generated)
        ((logp - reference) * generated).sum().backward()

    update()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        update()
    seconds = time.perf_counter() - start
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    top = {e.key: round(100 * e.self_cpu_time_total / total, 1) for e in events[:10]}
    return {"seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1), "self_cpu_percent": top}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/smollm2-webshop-1k-reads")
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    for name, bf16_base in (("autocast", False), ("bf16_base", True)):
        results[name] = r = measure(args.model, args.tokens, bf16_base)
        print(f"{name}: {r['seconds']} s, {r['tokens_per_s']} tokens/s; self CPU %: {r['self_cpu_percent']}",
              flush=True)
    ratio = results["autocast"]["seconds"] / results["bf16_base"]["seconds"]
    print(f"bf16_base / autocast: {ratio:.2f}x faster", file=sys.stdout)
    print(json.dumps({"tokens": args.tokens, "results": results, "ratio": round(ratio, 2)}))


if __name__ == "__main__":
    main()
