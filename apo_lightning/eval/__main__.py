"""The evaluation command line: evaluate a policy on a split, or compare two results directories (paired).

    python -m apo_lightning.eval evaluate --model data/models/tiny-sft --data-dir data/webshop_1k --split test
    python -m apo_lightning.eval evaluate --model rule --data-dir data/webshop_1k             # random | rule | oracle
    python -m apo_lightning.eval evaluate --model X --split val --samples 8 --temperature 1.0  # exploration: pass@k
    python -m apo_lightning.eval compare results/reference results/apo                      # B against A, paired
    python -m apo_lightning.eval compare --common-goals results/train1024_x results/train2048_y  # on the shared goals
    python -m apo_lightning.eval evaluate --model X --wording heldout --results-dir results/x-heldout  # other words
    python -m apo_lightning.eval ask --model models/webshop-1k-ref "a grey throw pillow cover, under 30 dollars"

``evaluate`` shows progress bars and prints, as its last line, one JSON object: success_rate (with its Wilson 95 %
interval), score (100 × mean WebShop score), reward, avg_turns, invalid_reply_rate, invalid_action_rate,
generated_tokens, episodes; with ``--samples K`` also sampled_success_rate and pass_at_1 … pass_at_K with 95 %
bootstrap intervals. ``--results-dir`` also writes the greedy episodes as a results directory (summary.csv,
episodes.jsonl, failure_analysis.md), which ``compare`` reads. ``compare`` prints a markdown table and, last, a JSON
object of the same figures. ``--wording heldout`` (or ``train``) rewrites every goal's instruction from its own
fields (``webshop.wording``) with the same goals and reward, so ``compare`` pairs it with an original-wording result.
``ask`` plays a policy greedily on a typed instruction and prints each turn and what it bought (``eval.ask``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
import sys
import time

import torch

from ..rollout.chat import ChatFormat
from ..rollout.settings import RolloutSettings
from ..rollout.vllm_backend import VLLMSettings, VLLMSetupError, check_model
from ..utils.files import atomic_write_text
from ..webshop.datadir import SYNTHETIC, resolve_data_dir
from ..webshop.settings import EnvConfig
from ..webshop.wording import WORDINGS
from .ask import EXCERPT_CHARS, ask, check_instruction, print_answer
from .compare import common_goals, compare_episodes, differing_instructions, format_comparison, load_episodes
from .evaluate import SCRIPTED, PolicyRollouts, greedy_summary, play_scripted, run_rollouts, sampled_summary
from .report import write_results


def evaluate_command(args: argparse.Namespace) -> dict:
    """Run ``evaluate``; print and return its figures."""
    torch.set_num_threads(args.threads)
    data_dir, description = resolve_data_dir(args.data_dir)
    print(description, file=sys.stderr)
    env = EnvConfig(data_dir=str(data_dir) if data_dir else SYNTHETIC, goals=args.goals, seed=args.catalog_seed,
                    max_steps=args.max_steps, wording=args.wording, wording_seed=args.wording_seed)
    shop = env.shop(announce=False)  # said above; the rollouts below find it in the same per-process cache
    if args.skip < 0 or args.limit < 0:
        raise SystemExit(f"error: --skip {args.skip} --limit {args.limit}: both must be >= 0")
    goals = env.split(args.split)[args.skip: args.skip + args.limit if args.limit else None]
    if not goals:
        raise SystemExit(f"error: --skip {args.skip}: the {args.split} split has {len(env.split(args.split))} goals")
    start = time.perf_counter()
    if args.model in SCRIPTED:
        if args.samples:
            raise SystemExit("--samples applies to language-model policies, not to scripted ones")
        trajectories = play_scripted(args.model, shop, goals, args.max_steps, args.seed)
        metrics = greedy_summary(trajectories)
    else:
        vllm = VLLMSettings(python=args.vllm_python, dtype=args.dtype, eager=args.vllm_eager,
                            max_model_len=max(args.context_budget, VLLMSettings.max_model_len))
        rollout = RolloutSettings(max_new_tokens=args.max_new_tokens, valid_clicks=args.valid_clicks,
                                  pack_weights=args.pack_weights, backend=args.backend, vllm=vllm)
        chat = ChatFormat(context_budget=args.context_budget)
        if args.backend == "vllm":
            try:
                check_model(args.model, 0, vllm, on_cpu=args.device == "cpu", context_budget=args.context_budget)
            except VLLMSetupError as error:
                raise SystemExit(f"error: {error}") from None
        job = PolicyRollouts(args.model, env, rollout, chat, args.batch_size, args.seed, "evaluate",
                             gguf_file=args.gguf_file, dtype=args.dtype, device=args.device, threads=args.threads)
        trajectories = run_rollouts(job, goals, args.processes)
        metrics = greedy_summary(trajectories)
        if args.samples:
            sampled = replace(job, purpose="evaluate-samples", greedy=False, samples=args.samples,
                              rollout=replace(rollout, temperature=args.temperature, top_p=args.top_p))
            metrics.update(sampled_summary(run_rollouts(sampled, goals, args.processes), seed=args.seed))
            metrics["temperature"] = args.temperature
    if args.results_dir:
        method = args.method_name or args.model + ("" if args.wording == "original" else f" ({args.wording} wording)")
        write_results(args.results_dir, trajectories, shop, method=method, split=args.split)
    if args.save_outcomes:
        save_outcomes(args, trajectories)
    metrics.update(model=args.model, split=args.split, wording=args.wording, seed=args.seed,
                   seconds=round(time.perf_counter() - start, 2))
    print(json.dumps(metrics))
    return metrics


def save_outcomes(args: argparse.Namespace, trajectories) -> None:
    """Write the greedy outcome of every goal, with the settings that reproduce it, as JSON (a reference policy's
    card keeps one, and a test replays it)."""
    settings = {k: getattr(args, k) for k in ("data_dir", "goals", "catalog_seed", "split", "limit", "max_steps",
                                              "max_new_tokens", "context_budget")}
    if args.skip:
        settings.update(skip=args.skip)
    if args.wording != "original":
        settings.update(wording=args.wording, wording_seed=args.wording_seed)
    outcomes = {str(t.goal_index): {"success": t.success, "score": t.score, "turns": len(t.turns)}
                for t in trajectories}
    atomic_write_text(args.save_outcomes, json.dumps({"settings": settings, "outcomes": outcomes}, indent=1) + "\n")


def ask_command(args: argparse.Namespace) -> dict:
    """Run ``ask``; print each turn and the purchase, and return the purchase (asin, title, options, score)."""
    from ..models.loading import load_policy

    try:
        check_instruction(args.instruction)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    torch.set_num_threads(args.threads)
    data_dir, description = resolve_data_dir(args.data_dir)
    print(description, file=sys.stderr)
    env = EnvConfig(data_dir=str(data_dir) if data_dir else SYNTHETIC, goals=args.goals, seed=args.catalog_seed,
                    max_steps=args.max_steps)
    model, tokenizer = load_policy(args.model, gguf_file=args.gguf_file, dtype=args.dtype, device=args.device)
    answer = ask(model, tokenizer, env.shop(announce=False), args.instruction,
                 RolloutSettings(max_new_tokens=args.max_new_tokens, valid_clicks=args.valid_clicks,
                                 pack_weights=args.pack_weights),
                 ChatFormat(context_budget=args.context_budget),
                 max_steps=args.max_steps)
    print_answer(answer, args.excerpt_chars)
    return {"asin": answer.asin, "title": answer.title, "options": answer.options, "score": answer.score,
            "goal_index": answer.goal_index, "turns": len(answer.trajectory.turns)}


def compare_command(args: argparse.Namespace) -> dict:
    """Run ``compare``; print and return its figures."""
    name_a, a = load_episodes(args.a, args.method_a, args.split)
    name_b, b = load_episodes(args.b, args.method_b, args.split)
    if args.common_goals:
        a, b = common_goals(a, b)
        print(f"on the {len(a)} goals both cover")
    result = compare_episodes(a, b)
    reworded = differing_instructions(a, b)
    if reworded:
        print(f"the instructions differ on {reworded} of the {len(a)} goals (the same goals in other words)")
    print(format_comparison(name_a, name_b, result))
    result.update(a=name_a, b=name_b)
    print(json.dumps(result))
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m apo_lightning.eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", allow_abbrev=False, help="evaluate a policy on a split")
    ev.add_argument("--model", required=True,
                    help="model directory, hub id, 'smollm2-135m-instruct', or a scripted policy: "
                         f"{', '.join(SCRIPTED)}")
    ev.add_argument("--gguf-file", default=None)
    ev.add_argument("--data-dir", default=None,
                    help="WebShop data folder, or 'synthetic' (default: $APO_WEBSHOP_DATA, else data/webshop_1k if "
                         "present, else the synthetic catalog)")
    ev.add_argument("--goals", choices=("synthetic", "human"), default="synthetic")
    ev.add_argument("--catalog-seed", type=int, default=233, help="price/goal seed; 233 reproduces WebShop")
    ev.add_argument("--split", choices=("train", "val", "test"), default="test")
    ev.add_argument("--wording", choices=WORDINGS, default="original",
                    help="the instructions' words: the generator's (original), or each goal's rewritten from its own "
                         "fields in the held-out or the training family of phrasings; the same goals and reward")
    ev.add_argument("--wording-seed", type=int, default=0, help="seeds the rewording (with the goal index)")
    ev.add_argument("--limit", type=int, default=0, help="only the first N goals of the split (after --skip)")
    ev.add_argument("--skip", type=int, default=0,
                    help="leave out the first N goals of the split: evaluate it in parts (N a multiple of "
                         "--batch-size gives each goal the batch it has in one run)")
    ev.add_argument("--batch-size", type=int, default=32, help="episodes per rollout batch")
    ev.add_argument("--max-steps", type=int, default=15, help="env steps (turns) per episode")
    ev.add_argument("--max-new-tokens", type=int, default=64)
    ev.add_argument("--samples", type=int, default=0, help="also K sampled episodes per goal: sampled success, pass@k")
    ev.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of --samples")
    ev.add_argument("--top-p", type=float, default=1.0, help="nucleus mass of --samples")
    ev.add_argument("--valid-clicks", action="store_true",
                    help="constrain click arguments to the items on the page (greedy and sampled episodes)")
    ev.add_argument("--context-budget", type=int, default=4096)
    ev.add_argument("--pack-weights", action="store_true",
                    help="decode with oneDNN-packed linear weights on a CPU (RolloutSettings.pack_weights)")
    ev.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                    help="the weights' dtype (with --backend vllm: the engine's)")
    ev.add_argument("--backend", choices=("hf", "vllm"), default="hf",
                    help="what samples the replies: the project's decoder, or vLLM in its own environment (README)")
    ev.add_argument("--vllm-python", default=None,
                    help="vLLM's interpreter (default: $APO_VLLM_PYTHON, else .venv-vllm/bin/python)")
    ev.add_argument("--vllm-eager", action="store_true", help="vLLM without torch.compile: a faster start")
    ev.add_argument("--device", default="cpu")
    ev.add_argument("--threads", type=int, default=1, help="torch intra-op threads (per process)")
    ev.add_argument("--processes", type=int, default=1, help="roll out in this many processes (the same results)")
    ev.add_argument("--seed", type=int, default=0, help="run seed: sampling, and the random policy")
    ev.add_argument("--results-dir", default=None, help="also write summary.csv, episodes.jsonl, failure_analysis.md")
    ev.add_argument("--method-name", default=None, help="the method's name in the results (default: --model)")
    ev.add_argument("--save-outcomes", default=None, help="also write each goal's greedy success, score and turns, "
                                                          "with the settings that reproduce them, to this JSON file")
    cmp = sub.add_parser("compare", allow_abbrev=False,
                         help="compare two results directories on the same goals (B against A)")
    cmp.add_argument("a", help="results directory (or episodes.jsonl) of policy A, the baseline")
    cmp.add_argument("b", help="results directory (or episodes.jsonl) of policy B")
    cmp.add_argument("--method-a", default=None, help="which method of A's file (when it holds several)")
    cmp.add_argument("--method-b", default=None, help="which method of B's file (when it holds several)")
    cmp.add_argument("--split", default=None, help="which split (when a file holds several)")
    cmp.add_argument("--common-goals", action="store_true",
                     help="compare on the goals both cover (e.g. a 1,024-goal run against the first 1,024 of a "
                          "2,048-goal one) instead of refusing different goal sets")
    ask = sub.add_parser("ask", allow_abbrev=False,
                         help="play a policy greedily on an instruction you type; print each turn and the "
                              "purchase")
    ask.add_argument("instruction", help="what to buy, in your words (quote it)")
    ask.add_argument("--model", required=True, help="model directory, hub id or 'smollm2-135m-instruct'")
    ask.add_argument("--gguf-file", default=None)
    ask.add_argument("--data-dir", default=None,
                     help="WebShop data folder, or 'synthetic' (default: $APO_WEBSHOP_DATA, else data/webshop_1k if "
                          "present, else the synthetic catalog)")
    ask.add_argument("--goals", choices=("synthetic", "human"), default="synthetic",
                     help="the goals a typed instruction is looked up in (an exact match is scored)")
    ask.add_argument("--catalog-seed", type=int, default=233, help="price/goal seed; 233 reproduces WebShop")
    ask.add_argument("--max-steps", type=int, default=15, help="env steps (turns) in the episode")
    ask.add_argument("--max-new-tokens", type=int, default=64)
    ask.add_argument("--valid-clicks", action="store_true", help="constrain click arguments to the items on the page")
    ask.add_argument("--context-budget", type=int, default=4096)
    ask.add_argument("--excerpt-chars", type=int, default=EXCERPT_CHARS, help="characters of each page shown")
    ask.add_argument("--pack-weights", action="store_true",
                     help="decode with oneDNN-packed linear weights on a CPU (RolloutSettings.pack_weights)")
    ask.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    ask.add_argument("--device", default="cpu")
    ask.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    return {"evaluate": evaluate_command, "compare": compare_command, "ask": ask_command}[args.command](args)


if __name__ == "__main__":
    main()
