"""The objectives side by side: each trains from the same reference policy on the same goals for the same wall time,
then its final policy and the reference play the same test goals greedily, compared paired.

    python benchmarks/compare_objectives.py --minutes 45                 # real 1k data, CPU reference, 2 processes
    python benchmarks/compare_objectives.py --minutes 5 --objectives apo grpo --base configs/quickstart.yaml \
        --overlay ""

For every objective of ``configs/objective/`` (A*-PO, GRPO with G = 4, the KL-anchored policy gradient, the
advantage-weighted SFT) it runs ``cli.py fit`` on the base config and overlay with that objective's overlay, no
validation, ``--trainer.max_time``; stage 1 (V*) is computed by the first objective that needs it and cached for the
others, outside the timed training. The final policy is exported and evaluated greedily on the test split
(``python -m apo_lightning.eval evaluate --processes``), and so is the reference. Prints a markdown table — test
success and score of each against the reference (paired difference with its 95 % interval, McNemar's p), the
trajectories sampled, the mean step time, the peak memory of a training process and the final KL to the reference —
and last one JSON object with every number. Results directories and logs stay under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def sh(command: list[str], log: Path) -> None:
    """Run a command from the repository root, its output to ``log``; raise with the log's tail if it fails."""
    with open(log, "w") as out:
        code = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": str(REPO)}).returncode
    if code:
        raise SystemExit(f"{' '.join(command)} failed; the end of {log}:\n" + log.read_text()[-3000:])


def main() -> None:
    from apo_lightning.eval.compare import compare_episodes, load_episodes

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="configs/webshop_1k.yaml")
    parser.add_argument("--overlay", default="configs/webshop_1k_cpu.yaml", help="'' for none")
    parser.add_argument("--objectives", nargs="+", default=["apo", "grpo", "kl_pg", "awr"])
    parser.add_argument("--minutes", type=float, default=45.0, help="training wall time per objective")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--test-goals", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/compare_objectives")
    parser.add_argument("extra", nargs="*", help="more cli.py overrides for every run")
    args = parser.parse_args()
    out = (REPO / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    configs = [args.base] + ([args.overlay] if args.overlay else [])

    from apo_lightning.lit.cli import build_cli

    parsed = build_cli([a for c in configs for a in ("--config", c)] + ["--trainer.logger=false"], run=False)
    reference = parsed.model.hparams.model_name_or_path
    env = parsed.datamodule.env
    max_new_tokens = parsed.datamodule.rollout.max_new_tokens
    del parsed

    def evaluate(model: str, name: str) -> Path:
        results = out / name
        if not (results / "episodes.jsonl").exists():
            command = [sys.executable, "-m", "apo_lightning.eval", "evaluate", "--model", model, "--split", "test",
                       "--limit", str(args.test_goals), "--max-steps", str(env.max_steps), "--max-new-tokens",
                       str(max_new_tokens), "--processes", str(args.processes), "--results-dir", str(results),
                       "--method-name", name]
            if env.data_dir is not None:  # else the same data-location rule as the fits
                command += ["--data-dir", env.data_dir]
            sh(command, out / f"{name}-test.log")
        return results

    reference_results = evaluate(reference, "reference")
    _, reference_episodes = load_episodes(reference_results)
    hours = args.minutes / 60
    rows = {}
    for objective in args.objectives:
        run = f"compare_{objective}"
        summary = out / f"{run}.json"
        if not summary.exists():
            sh([sys.executable, "cli.py", "fit", *[a for c in configs for a in ("--config", c)], "--config",
                f"configs/objective/{objective}.yaml", f"--run_name={run}", f"--seed_everything={args.seed}",
                f"--trainer.devices={args.processes}",
                f"--trainer.strategy={'ddp' if args.processes > 1 else 'auto'}", "--trainer.limit_val_batches=0",
                f"--trainer.max_time=00:{int(hours):02d}:{int(args.minutes % 60):02d}:00",
                "--trainer.max_steps=100000", "--trainer.callbacks+=apo_lightning.lit.callbacks.RunSummary",
                f"--trainer.callbacks.out_file={summary}", *args.extra], out / f"{run}-fit.log")
        results = evaluate(str(REPO / "data" / "models" / run), objective)
        _, episodes = load_episodes(results)
        rows[objective] = {"fit": json.loads(summary.read_text()), "test": compare_episodes(reference_episodes,
                                                                                          episodes)}

    first = next(iter(rows.values()))["test"]
    print(f"\nReference `{reference}`: {100 * first['success_a']:.1f} % success, score {first['score_a']:.2f} on "
          f"{first['goals']} test goals. Each objective trained {args.minutes:g} minutes on {args.processes} "
          f"processes (seed {args.seed}).\n")
    print("| objective | test success (Δ vs π_ref, 95 % CI) | McNemar p | won / lost | score (Δ) | trajectories | "
          "step time | peak memory | final KL |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for objective, row in rows.items():
        t, f = row["test"], row["fit"]
        step = f["seconds"] / max(1, f["global_step"])
        kl = f"{f['kl_end']:.2f}" if f["kl_end"] is not None else "–"
        print(f"| {objective} | {100 * t['success_b']:.1f} % ({100 * t['success_diff']:+.1f} "
              f"[{100 * t['success_diff_low']:+.1f}, {100 * t['success_diff_high']:+.1f}]) | {t['mcnemar_p']:.3g} | "
              f"{t['won']} / {t['lost']} | {t['score_b']:.2f} ({t['score_diff']:+.2f}) | {f['trajectories']} | "
              f"{step:.1f} s | {f['peak_rss_mb']:.0f} MB | {kl} |")
    print(json.dumps({"reference": reference, "minutes": args.minutes, "seed": args.seed, "rows": rows}))


if __name__ == "__main__":
    main()
