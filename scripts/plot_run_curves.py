"""Draw an RL run's TensorBoard curves into one PNG, for the README and docs/experiments.md.

    pip install matplotlib                 # not a dependency of the package: only this script draws
    python scripts/plot_run_curves.py docs/smollm2_apo_curves.png lightning_logs/smollm2_apo=A*-PO \
        [lightning_logs/smollm2_grpo=GRPO ...]

Each argument after the output file is a run's log folder (every ``version_*`` of a resumed run is read, by
``apo_lightning.eval.training_logs.read_scalars``) and the label its curves get. Four panels, by optimizer step:
``rollout/success_rate`` (the success rate of the step's fresh trajectories) with ``train/v_star_mean`` (the mean V\\*
of the step's goals, when the objective logs it) dashed; ``train/kl`` (KL(π ‖ π_ref) summed over a trajectory,
nats); ``val/success_rate`` (greedy, the validation goals); and ``stage1/pass_at_k`` of π_ref (stage 1's samples,
the bound of what A\\*-PO can raise) as bars.

Raises ``SystemExit`` naming the folder when a run folder holds no TensorBoard event file.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from apo_lightning.eval.training_logs import read_scalars


def first_per_step(pairs: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    """One value per step (the first logged: a resumed run logs its stage-1 figures again)."""
    seen: dict[int, float] = {}
    for step, value in pairs:
        seen.setdefault(step, value)
    steps = sorted(seen)
    return steps, [seen[s] for s in steps]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("runs", nargs="+", help="LOG_FOLDER=LABEL (the label defaults to the folder's name)")
    args = parser.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    success, kl, val, stage1 = axes
    bar_width = 0.8 / len(args.runs)
    for i, spec in enumerate(args.runs):
        folder, _, label = spec.partition("=")
        label = label or Path(folder).name
        scalars = read_scalars(folder)
        if not scalars:
            raise SystemExit(f"error: {folder} holds no TensorBoard event file (events.out.tfevents.*)")
        color = f"C{i}"
        if "rollout/success_rate" in scalars:
            success.plot(*first_per_step(scalars["rollout/success_rate"]), "o-", color=color, label=label)
        if "train/v_star_mean" in scalars:
            success.plot(*first_per_step(scalars["train/v_star_mean"]), "--", color=color, alpha=0.6,
                         label=f"{label}: mean V* of the batch")
        if "train/kl" in scalars:
            kl.plot(*first_per_step(scalars["train/kl"]), "o-", color=color, label=label)
        if "val/success_rate" in scalars:
            val.plot(*first_per_step(scalars["val/success_rate"]), "o-", color=color, label=label)
        passes = sorted((int(m.group(1)), first_per_step(pairs)[1][0]) for tag, pairs in scalars.items()
                        if (m := re.fullmatch(r"stage1/pass_at_(\d+)", tag)))
        if passes:
            ks, values = zip(*passes)
            stage1.bar([k + (i - (len(args.runs) - 1) / 2) * bar_width for k in ks], values, width=bar_width,
                       color=color, label=label)
            stage1.set_xticks(ks)
    for ax, title, ylabel in ((success, "rollout/success_rate (sampled, T = 1)", "success rate"),
                              (kl, "train/kl", "nats per trajectory"),
                              (val, "val/success_rate (greedy)", "success rate"),
                              (stage1, "stage1/pass_at_k of π_ref", "pass@k")):
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("k" if ax is stage1 else "optimizer step")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7)
    for ax in (success, val, stage1):
        ax.set_ylim(0, 1)
    val.set_xlim(success.get_xlim())  # one step axis for the three curves
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
