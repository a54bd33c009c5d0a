"""How fast each objective learns per trajectory sampled: A*-PO against GRPO (and any other objective) from the same
reference policy, at equal stage-2 trajectories, over several run seeds.

    python benchmarks/learning_speed.py                                   # quick start: the format signal
    python benchmarks/learning_speed.py --setting real --trajectories 1536 --processes 2

Each (objective, seed) trains in its own process (``cli.py fit``, no validation, no checkpoints) for as many steps as
``--trajectories`` allows: a step samples ``goals × rollouts per goal`` trajectories, so every objective samples the
same number. From each run's
TensorBoard log it reads the per-step ``rollout/*`` and ``train/kl`` scalars and reports, averaged over the first and
the last sixth of the steps: the invalid-reply rate (the quick start's π_ref earns only the format penalty, so that
is its signal), the reward and the success rate; and the KL to π_ref at the end. Prints one line per run, a table of
means over seeds with their ranges, and last one JSON object with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from apo_lightning.apo import objectives
from apo_lightning.eval.training_logs import read_scalars, sixths

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {
    # the quick start: synthetic catalog, its shipped reference policy
    "quickstart": {"config": "configs/quickstart.yaml", "goals": 8, "group": 4},
    # the real 1k data: the shipped reference policy of configs/webshop_1k_cpu.yaml
    "real": {"config": "configs/webshop_1k.yaml", "overlay": "configs/webshop_1k_cpu.yaml", "goals": 16, "group": 4},
}


def first_last(values: list[float]) -> tuple[float, float]:
    """Means of the first and the last sixth of ``values`` (:func:`apo_lightning.eval.training_logs.sixths`)."""
    first, last = sixths(values)
    return statistics.fmean(first), statistics.fmean(last)


@contextmanager
def run_folder(path: str | None):
    """The folder the runs log to: ``path`` (created if missing and kept), else a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(path or tmp).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        yield folder


def fit(setting: str, name: str, seed: int, workdir: Path, processes: int, threads: int, train_goals: int,
        overrides: list[str]) -> tuple[float, dict[str, list[float]]]:
    """Train one run with ``cli.py fit`` from the repository folder (no validation, no checkpoints, no callbacks),
    logging to ``workdir/name``; returns its wall time in seconds and its TensorBoard scalars.

    Raises:
        subprocess.CalledProcessError: the run failed (its stderr went to this process's stderr).
    """
    data = SETTINGS[setting]
    configs = [str(REPO / data["config"])] + ([str(REPO / data["overlay"])] if "overlay" in data else [])
    command = [sys.executable, str(REPO / "cli.py"), "fit", *[a for c in configs for a in ("--config", c)],
               f"--seed_everything={seed}", "--trainer.limit_val_batches=0", "--trainer.enable_checkpointing=false",
               "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false", f"--trainer.devices={processes}",
               f"--trainer.strategy={'ddp' if processes > 1 else 'auto'}", f"--trainer.default_root_dir={workdir}",
               f"--trainer.logger.init_args.save_dir={workdir}", f"--trainer.logger.init_args.name={name}",
               f"--run_name={name}", f"--data.train_goals={train_goals}", f"--num_threads={threads}", *overrides]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                   stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    (log_dir,) = (workdir / name).glob("version_*")  # one fit, one version: a leftover run would be mixed in
    return seconds, {tag: [value for _, value in pairs] for tag, pairs in read_scalars(log_dir).items()}


def run(args: argparse.Namespace, objective: str, seed: int, workdir: Path) -> dict:
    """One training run; returns its figures."""
    setting = SETTINGS[args.setting]
    kind = getattr(objectives, objective)
    group = setting["group"] if kind().rollouts_per_goal > 1 else 1  # an objective that compares a goal's rollouts
    goals = setting["goals"] // group
    per_step = goals * group * args.processes
    steps = args.trajectories // per_step
    overrides = [f"--model.objective={objective}", f"--data.batch_size={goals}", f"--trainer.max_steps={steps}",
                 f"--data.steps_per_epoch={steps}", *args.extra]
    if group > 1:
        overrides.append(f"--model.objective.group_size={group}")
    seconds, values = fit(args.setting, f"{objective}-{seed}", seed, workdir, args.processes, args.threads,
                          args.train_goals, overrides)
    result = {"objective": objective, "seed": seed, "steps": steps, "trajectories": steps * per_step,
              "seconds": round(seconds, 1)}
    for tag in ("rollout/invalid_reply_rate", "rollout/reward", "rollout/success_rate"):
        first, last = first_last(values[tag])
        result[tag.split("/")[1]] = [round(first, 4), round(last, 4)]
    result["kl_end"] = round(first_last(values["train/kl"])[1], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="quickstart")
    parser.add_argument("--objectives", nargs="+", default=["APO", "GRPO"],
                        help="objective classes of apo_lightning.apo.objectives (APO, GRPO, KLPG, AWR)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--trajectories", type=int, default=960, help="stage-2 trajectories per run (all ranks)")
    parser.add_argument("--train-goals", type=int, default=16)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workdir", default=None, help="keep the runs' logs here (default: a temporary folder)")
    parser.add_argument("extra", nargs="*",
                        help="more cli.py overrides for every run, e.g. --model.objective.beta2=0.5")
    args = parser.parse_args()
    results = []
    with run_folder(args.workdir) as workdir:
        for seed in args.seeds:
            for objective in args.objectives:
                result = run(args, objective, seed, workdir)
                results.append(result)
                print(f"{objective:6s} seed {seed}: invalid replies {result['invalid_reply_rate'][0]:.1%} -> "
                      f"{result['invalid_reply_rate'][1]:.1%}, reward {result['reward'][0]:+.3f} -> "
                      f"{result['reward'][1]:+.3f}, success {result['success_rate'][0]:.1%} -> "
                      f"{result['success_rate'][1]:.1%}, KL {result['kl_end']:.2f}, {result['trajectories']} "
                      f"trajectories in {result['seconds']:.0f} s", flush=True)
    print("\n| objective | invalid replies, first → last sixth | reward | success | KL at the end | seeds |")
    print("| --- | --- | --- | --- | --- | --- |")
    summary = {}
    for objective in args.objectives:
        mine = [r for r in results if r["objective"] == objective]
        row = {}
        for key in ("invalid_reply_rate", "reward", "success_rate"):
            row[key] = [statistics.fmean(r[key][i] for r in mine) for i in (0, 1)]
        row["kl_end"] = [statistics.fmean(r["kl_end"] for r in mine), min(r["kl_end"] for r in mine),
                         max(r["kl_end"] for r in mine)]
        row["drop_in_invalid_replies"] = [r["invalid_reply_rate"][0] - r["invalid_reply_rate"][1] for r in mine]
        summary[objective] = row
        print(f"| {objective} | {row['invalid_reply_rate'][0]:.1%} → {row['invalid_reply_rate'][1]:.1%} "
              f"(drop {min(row['drop_in_invalid_replies']):.1%} … {max(row['drop_in_invalid_replies']):.1%}) | "
              f"{row['reward'][0]:+.3f} → {row['reward'][1]:+.3f} | {row['success_rate'][0]:.1%} → "
              f"{row['success_rate'][1]:.1%} | {row['kl_end'][0]:.2f} ({row['kl_end'][1]:.2f} … "
              f"{row['kl_end'][2]:.2f}) | {len(mine)} |")
    print(json.dumps({"setting": args.setting, "trajectories": args.trajectories, "runs": results,
                      "summary": summary}))


if __name__ == "__main__":
    main()
