"""The peer: TRL's ``GRPOTrainer`` on this env against this project's GRPO, same model, goals and step shape.

    python benchmarks/trl_peer.py            # the data rule (README); needs pip install -e ".[trl]"

Both sides train ``models/smollm2-webshop-1k-reads`` (SmolLM2-135M-Instruct and its LoRA adapter, the adapter
trainable) on the first ``--goals`` training goals, ``--group`` trajectories per goal, under ``bf16-mixed``, one torch
thread, gradient checkpointing, GRPO with its KL term (β 0.04) at learning rate 1e-5, each in a fresh process:

- **TRL** (``trl``): ``GRPOTrainer(environment_factory=WebShopToolEnv)`` in its transformers mode (``use_vllm``
  off: TRL's vLLM mode needs vLLM in TRL's environment, which ``transformers>=5.24`` excludes), the tools in TRL's
  Qwen2.5 template (SmolLM2 shares its ChatML tokens), ``max_tool_calling_iterations`` 15 and
  ``max_completion_length`` ``--max-completion`` (default 1,920, this project's bound: 15 turns of at most 128
  tokens; TRL's counts a trajectory's tool messages too), ``--steps`` optimizer steps, each timed from ``on_step_begin`` to ``on_step_end`` (its
  generation and its update);
- **this project** (``project``): one ``cli.py fit`` step of ``configs/smollm2.yaml`` + ``configs/machine/cpu.yaml``
  + ``configs/objective/grpo.yaml`` on one process (``benchmarks/rl_step.py``'s runner and step timer).

The policy was fine-tuned on this project's prompt format, not on TRL's tool calls, so what its TRL episodes do (turns,
tool calls, tokens) is printed beside the seconds: trajectories per second compare two trainers, not two equal
workloads. Last line: one JSON object with both sides' figures and ``ratio`` (this project's trajectories per second ÷
TRL's) and ``ratio_per_generated_token`` (the same per sampled token).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rl_step

REPO = Path(__file__).resolve().parents[1]
POLICY = "models/smollm2-webshop-1k-reads"
LEARNING_RATE, BETA_KL = 1e-5, 0.04


def trl_worker(args: argparse.Namespace) -> None:
    """TRL's side, in this process: trains, then writes its figures to ``args.out`` (JSON)."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import add_response_schema

    from apo_lightning.integrations.trl_env import WebShopToolEnv, goal_rows
    from apo_lightning.models.loading import load_policy

    torch.set_num_threads(1)
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    model, tokenizer = load_policy(POLICY)  # run from the repository: its data/models conversion
    for name, parameter in model.named_parameters():
        parameter.requires_grad_("lora_" in name)  # the adapter trains, as in this project's LoRA policy
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    add_response_schema(tokenizer)
    made: list[WebShopToolEnv] = []

    def factory() -> WebShopToolEnv:
        made.append(WebShopToolEnv(data_dir=args.data_dir, split="train", max_steps=15))
        return made[-1]

    steps: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            steps.append(time.perf_counter())

        def on_step_end(self, *_, **__):
            steps[-1] = time.perf_counter() - steps[-1]

    config = GRPOConfig(output_dir=args.workdir, per_device_train_batch_size=args.goals * args.group,
                        num_generations=args.group, max_steps=args.steps, max_completion_length=args.max_completion,
                        max_tool_calling_iterations=15, temperature=1.0, beta=BETA_KL, learning_rate=LEARNING_RATE,
                        bf16=True, gradient_checkpointing=True, logging_steps=1, report_to="none", use_cpu=True,
                        save_strategy="no", seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config,
                          train_dataset=Dataset.from_list(goal_rows("train", data_dir=args.data_dir, limit=args.goals)),
                          environment_factory=factory, callbacks=[StepClock()])
    trainer.train()
    logged = [h for h in trainer.state.log_history if "reward" in h]
    trajectories = args.goals * args.group
    figures = {
        "step_s": [round(s, 2) for s in steps],
        "trajectories_per_step": trajectories,
        "generated_tokens_per_step": [round(h["completions/mean_length"] * trajectories) for h in logged],
        "tool_calls_per_trajectory": [h["tools/call_frequency"] for h in logged],
        "reward_mean": [h["reward"] for h in logged],
        "env_actions_last_step": [len(env.actions) for env in made[:trajectories]],
    }
    Path(args.out).write_text(json.dumps(figures))


def trl_side(args: argparse.Namespace, workdir: Path) -> dict:
    """TRL's figures from a fresh process (:func:`trl_worker`); the last step is the one timed."""
    out = workdir / "trl.json"
    subprocess.run([sys.executable, __file__, "--worker", "--out", str(out), "--workdir", str(workdir / "trl"),
                    "--goals", str(args.goals), "--group", str(args.group), "--steps", str(args.steps),
                    "--max-completion", str(args.max_completion),
                    "--data-dir", args.data_dir], check=True, cwd=REPO, stdout=subprocess.DEVNULL,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    figures = json.loads(out.read_text())
    figures["timed_step_s"] = figures["step_s"][-1]
    figures["timed_generated_tokens"] = figures["generated_tokens_per_step"][-1]
    return figures


def project_side(args: argparse.Namespace, workdir: Path) -> dict:
    """This project's figures: one GRPO step through ``rl_step``'s runner."""
    configs = ["configs/smollm2.yaml", "configs/machine/cpu.yaml", "configs/objective/grpo.yaml"]
    overrides = [
        "--trainer.precision=bf16-mixed", "--data.rollout.backend=hf", f"--model.model_name_or_path={POLICY}",
        f"--model.objective.group_size={args.group}", f"--model.objective.beta_kl={BETA_KL}",
        f"--model.learning_rate={LEARNING_RATE}", "--model.warmup_steps=0", f"--data.batch_size={args.goals}",
        "--data.vstar.reuse=0"]
    runner = argparse.Namespace(goals=args.goals, samples=1, data_dir=args.data_dir, vllm_python=None)
    figures = rl_step.run("grpo", runner, workdir, configs=configs, overrides=overrides)
    figures["timed_step_s"] = figures["step_s"]
    figures["timed_generated_tokens"] = figures["fresh_generated_tokens"]
    figures["trajectories_per_step"] = figures["fresh_trajectories"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("APO_WEBSHOP_DATA", "data/webshop_1k"))
    parser.add_argument("--goals", type=int, default=2, help="training goals, every one in each step")
    parser.add_argument("--group", type=int, default=4, help="trajectories per goal (GRPO's group)")
    parser.add_argument("--steps", type=int, default=1, help="TRL's optimizer steps; the last one is timed")
    parser.add_argument("--max-completion", type=int, default=15 * 128,
                        help="TRL's max_completion_length (default: 15 turns x 128 tokens, this project's bound)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.data_dir = str(Path(args.data_dir).resolve())
    if args.worker:
        trl_worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="trl_peer-") as tmp:
        workdir = Path(tmp)
        (workdir / "data").mkdir()
        (workdir / "models").symlink_to(REPO / "models")
        (workdir / "data" / "models").symlink_to(REPO / "data" / "models")
        results = {}
        for side, measure in (("trl", trl_side), ("project", project_side)):
            r = results[side] = measure(args, workdir)
            r["trajectories_per_s"] = round(r["trajectories_per_step"] / r["timed_step_s"], 4)
            r["generated_tokens_per_s"] = round(r["timed_generated_tokens"] / r["timed_step_s"], 1)
            print(side, json.dumps(r), flush=True)
    print(f"CPU flags: {rl_step.cpu_flags()}")
    print(f"{'side':8} {'step s':>8} {'traj':>5} {'traj/s':>7} {'gen tok':>8} {'gen tok/s':>9}")
    for side, r in results.items():
        print(f"{side:8} {r['timed_step_s']:8.1f} {r['trajectories_per_step']:5d} {r['trajectories_per_s']:7.3f} "
              f"{r['timed_generated_tokens']:8d} {r['generated_tokens_per_s']:9.1f}")
    trl, ours = results["trl"], results["project"]
    summary = {"cpu_flags": rl_step.cpu_flags(), "sides": results,
               "ratio": round(ours["trajectories_per_s"] / trl["trajectories_per_s"], 2),
               "ratio_per_generated_token": round(ours["generated_tokens_per_s"] / trl["generated_tokens_per_s"], 2)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
