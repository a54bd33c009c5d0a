"""Peak CPU memory of one A*-PO update, glibc's default allocator against large blocks mapped (``--low_cpu_memory``).

    python benchmarks/update_memory.py                               # SmolLM2 adapter, one segment of 4,096 tokens
    python benchmarks/update_memory.py --segments 2 --tokens 1024

The update as the RL module runs it, on random token ids: π_ref's pass without gradients (the frozen reference
adapter), then the policy's pass with gradient checkpointing and the backward pass, through ``generated_logprobs``,
with ``--generated`` of the tokens marked as generated. Each setting runs in a fresh process on one thread, pinned to
one core: the baseline measured in the same run is glibc as it starts; the other maps every block of 128 KiB or more
(``utils.memory.map_large_allocations``, what ``lit.callbacks.LowCPUMemory`` does during a training step). Prints,
per setting, the peak resident memory (``getrusage``) after each pass and the seconds of the policy's forward and
backward passes, then the ratios against the baseline and one JSON object with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download

SETTINGS = ("default", "mapped")


def peak_gb() -> float:
    """This process's peak resident memory so far, in GB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def measure(args: argparse.Namespace) -> dict:
    """One setting, in this (fresh) process."""
    import torch

    from apo_lightning.apo.logprobs import generated_logprobs
    from apo_lightning.lit.settings import load_start
    from apo_lightning.models.lora import POLICY_ADAPTER, REFERENCE_ADAPTER, LoraSettings
    from apo_lightning.utils.memory import map_large_allocations

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    torch.set_num_threads(1)
    if args.worker == "mapped" and not map_large_allocations():
        sys.exit("update_memory: the C library is not glibc; nothing to compare")
    lora = LoraSettings(rank=args.rank, alpha=2 * args.rank, target_modules=tuple(args.target_modules))
    policy = load_start(args.model, lora, "float32", keep_reference=True, gradient_checkpointing=True).policy
    policy.train()
    loaded = peak_gb()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(100, 40_000, (args.segments, args.tokens), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    gen_mask = (torch.rand(args.segments, args.tokens, generator=generator) < args.generated).float()

    policy.set_adapter(REFERENCE_ADAPTER)
    with torch.no_grad():
        reference = generated_logprobs(policy, input_ids, attention_mask, gen_mask)
    after_reference = peak_gb()
    policy.set_adapter(POLICY_ADAPTER)
    for name, parameter in policy.named_parameters():
        parameter.requires_grad_("lora" in name and f".{POLICY_ADAPTER}." in name)
    start = time.perf_counter()
    logp = generated_logprobs(policy, input_ids, attention_mask, gen_mask)
    after_forward = peak_gb()
    ((logp - reference) * gen_mask).sum().backward()
    return {"loaded_gb": loaded, "reference_gb": after_reference, "forward_gb": after_forward,
            "backward_gb": peak_gb(), "forward_backward_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/smollm2-webshop-1k-sft",
                        help="an adapter folder with rank --rank (default: the shipped SmolLM2 SFT adapter)")
    parser.add_argument("--rank", type=int, default=8, help="the adapter's LoRA rank (default 8)")
    parser.add_argument("--target-modules", nargs="+",
                        default=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    parser.add_argument("--segments", type=int, default=1, help="segments in the batch (default 1)")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per segment (default 4096)")
    parser.add_argument("--generated", type=float, default=0.1, help="share of tokens marked generated (default 0.1)")
    parser.add_argument("--worker", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args)))
        return
    results = {}
    for setting in SETTINGS:
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--worker", setting], stdout=subprocess.PIPE,
                              text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"update_memory: the {setting} run failed (exit {done.returncode})")
        results[setting] = r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{setting:8s} peak GB: loaded {r['loaded_gb']:.2f}, π_ref pass {r['reference_gb']:.2f}, policy forward "
              f"{r['forward_gb']:.2f}, backward {r['backward_gb']:.2f}; forward + backward {r['forward_backward_s']:.0f} s",
              flush=True)
    base, mapped = results["default"], results["mapped"]
    print(f"mapped / default: peak {mapped['backward_gb'] / base['backward_gb']:.2f}x, "
          f"time {mapped['forward_backward_s'] / base['forward_backward_s']:.2f}x")
    print(json.dumps({"segments": args.segments, "tokens": args.tokens, "results": results}))


if __name__ == "__main__":
    main()
