"""A*-PO training throughput: trajectories per second (rollout + loss + update) of several prompt and precision
settings against a baseline setting (``old``), in one run.

    python benchmarks/training_throughput.py                           # quick start: models/quickstart-ref
    python benchmarks/training_throughput.py --setting real --steps 12 # real 1k data: configs/webshop_1k_cpu.yaml

Each setting trains A*-PO with ``cli.py fit`` for ``--steps`` steps on ``--processes`` processes (DDP on the CPU, one
torch thread each), no validation, no checkpoints, from the same reference policy on the same goals with the same
run seed. The module logs ``time/trajectories_per_s`` every step from the second on (the wall time from the start of
one training step to the next, so it holds the rollout of the batch and the update of the previous one, summed over
the processes); the table gives its mean, the generated tokens per trajectory, the sampled success rate and the
invalid-reply rate (a context the policy was not trained on can change what it does, so throughput is read beside
them), and the ratio of each setting's trajectories per second to the first setting's, measured in the same run.

Settings (``SETTINGS``), each a list of ``cli.py`` overrides:

- ``old`` (the baseline): every page in full (``repeat_pages: full``);
- ``short_pages``: a page identical to the previous turn's shown as one line (the default, ``repeat_pages: short``);
- ``bf16_mixed``: ``short_pages`` (the defaults) under ``--trainer.precision=bf16-mixed``: bfloat16 autocast on
  the CPU around the rollouts and the loss's passes (float32 weights and optimizer); on a CPU without bfloat16
  instructions (no ``avx512_bf16`` or AMX) torch emulates bfloat16 (docs/experiments.md, "bfloat16 autocast on the
  CPU", has the figures);

Prints one line per setting, the table, and last one JSON object with every number.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from learning_speed import SETTINGS as DATA_SETTINGS, fit, run_folder

SETTINGS = {
    "old": ["--data.chat.repeat_pages=full"],
    "short_pages": ["--data.chat.repeat_pages=short"],
}
# the default settings with bfloat16 autocast (Lightning's precision plugin) around the loss's passes and the
# rollouts; the weights, the optimizer and the log-probabilities the loss reads stay float32
SETTINGS["bf16_mixed"] = [*SETTINGS["short_pages"], "--trainer.precision=bf16-mixed"]


def run(args: argparse.Namespace, name: str, workdir: Path) -> dict:
    """Train one setting; returns its figures."""
    overrides = ["--model.objective=APO", f"--data.batch_size={args.batch_size}", f"--trainer.max_steps={args.steps}",
                 f"--data.steps_per_epoch={args.steps}", f"--data.vstar.num_samples={args.vstar_samples}",
                 *SETTINGS[name], *args.extra]
    seconds, values = fit(args.setting, name, args.seed, workdir, args.processes, args.threads, args.train_goals,
                          overrides)
    rate = values["time/trajectories_per_s"]
    return {"setting": name, "steps": args.steps, "seconds": round(seconds, 1),
            "trajectories_per_s": round(statistics.fmean(rate), 3), "per_step": [round(v, 3) for v in rate],
            "generated_tokens": round(statistics.fmean(values["rollout/generated_tokens"]), 1),
            "success_rate": round(statistics.fmean(values["rollout/success_rate"]), 4),
            "invalid_reply_rate": round(statistics.fmean(values["rollout/invalid_reply_rate"]), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", choices=sorted(DATA_SETTINGS), default="quickstart")
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--steps", type=int, default=8, help="training steps per setting (the first is not timed)")
    parser.add_argument("--batch-size", type=int, default=8, help="goals (= trajectories) per process per step")
    parser.add_argument("--train-goals", type=int, default=32, help="stage 1 runs on these (cached, not timed)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vstar-samples", type=int, default=2, help="stage-1 samples per goal (not timed)")
    parser.add_argument("--workdir", default=None, help="keep the runs' logs here (default: a temporary folder)")
    parser.add_argument("extra", nargs="*", help="more cli.py overrides for every setting")
    args = parser.parse_args()
    results = []
    with run_folder(args.workdir) as workdir:
        for name in args.settings:
            result = run(args, name, workdir)
            results.append(result)
            print(f"{name:12s}: {result['trajectories_per_s']:.3f} trajectories/s, {result['generated_tokens']:.0f} "
                  f"generated tokens per trajectory, success {result['success_rate']:.1%}, invalid replies "
                  f"{result['invalid_reply_rate']:.1%}, {result['steps']} steps in {result['seconds']:.0f} s",
                  flush=True)
    base = results[0]["trajectories_per_s"]
    print(f"\n| setting | trajectories/s | × {results[0]['setting']} | generated tokens / trajectory | sampled success "
          "| invalid replies |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        r["ratio"] = round(r["trajectories_per_s"] / base, 2)
        print(f"| {r['setting']} | {r['trajectories_per_s']:.3f} | {r['ratio']:.2f} | {r['generated_tokens']:.0f} | "
              f"{r['success_rate']:.1%} | {r['invalid_reply_rate']:.1%} |")
    print(json.dumps({"setting": args.setting, "processes": args.processes, "threads": args.threads,
                      "batch_size": args.batch_size, "runs": results}))


if __name__ == "__main__":
    main()
