"""Summary of a training run's TensorBoard scalars, as the run tables of ``docs/experiments.md`` report them: stage 1's
scalars, every validation point, and for each training scalar its mean over the first and the last sixth of the steps,
with the median and the largest value of the last sixth (A*-PO's per-step KL is heavy-tailed: one trajectory with a
large log-ratio can dominate a mean) and the number of steps above ``--above``.

    python docs/evidence/run_summary.py lightning_logs/webshop_1k_2h_s1
    python docs/evidence/run_summary.py --above 20 lightning_logs/real_2h_nonzero/version_0
"""

import argparse
import statistics
from pathlib import Path

from apo_lightning.eval.training_logs import read_scalars, sixths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a run's lightning_logs/NAME (every version) or one version_*")
    parser.add_argument("--above", type=float, default=20.0, help="count training steps whose value exceeds this")
    args = parser.parse_args()
    series = read_scalars(args.run_dir)
    if not series:
        raise SystemExit(f"no TensorBoard event files under {args.run_dir}")
    for tag in sorted(t for t in series if t.startswith("stage1/")):
        print(f"{tag}: {series[tag][-1][1]:.4f}")
    for tag in sorted(t for t in series if t.startswith("val/")):
        print(f"{tag}: " + ", ".join(f"{value:.4g} @{step}" for step, value in series[tag]))
    for tag in sorted(t for t in series if t.startswith(("train/", "rollout/"))):
        values = [value for _, value in series[tag]]
        first, last = sixths(values)
        print(f"{tag}: {len(values)} steps, first sixth {statistics.fmean(first):.4g} -> last sixth "
              f"{statistics.fmean(last):.4g} (median {statistics.median(last):.4g}, max {max(last):.4g}); "
              f"{sum(v > args.above for v in values)} steps above {args.above:g}")


if __name__ == "__main__":
    main()
