"""A*-PO vs GRPO: wall time per training step and peak memory, in one run, on the same goals.

    python benchmarks/apo_vs_grpo.py --model models/webshop-1k-ref

Each algorithm trains for ``--steps`` steps in its own process (so peak memory is its own: ``ru_maxrss`` on the
CPU, ``torch.cuda.max_memory_allocated`` on a GPU) from the same policy, on the same batches of goals: A*-PO rolls
out 1 trajectory per goal (V* comes from stage 1, precomputed offline before timing starts), GRPO 4 per goal. A
step's time runs from the end of the previous step to the end of this one, so it includes the rollouts; the first
step is a warm-up and is not counted. Target: A*-PO's step time at most 0.5 × GRPO's.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    """Train one algorithm for ``--steps`` steps and print a JSON line with its timings."""
    sys.path.insert(0, str(REPO))
    import torch
    from lightning.pytorch import Callback

    class StepTimer(Callback):
        def __init__(self):
            self.times, self.last = [], None

        def on_train_start(self, trainer, pl_module):
            self.last = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            now = time.perf_counter()
            self.times.append(now - self.last)
            self.last = now

    timer = StepTimer()
    overrides = [
        f"--model.model_name_or_path={args.model}", f"--model.objective={args.worker.upper()}",
        f"--data.env.data_dir={args.data_dir}" if args.data_dir else "--data.env.data_dir=null",
        f"--data.batch_size={args.goals}", f"--data.train_goals={args.train_goals}",
        f"--data.steps_per_epoch={args.steps}", f"--trainer.max_steps={args.steps}",
        "--trainer.limit_val_batches=0", "--trainer.enable_checkpointing=false", "--trainer.logger=false",
        "--trainer.callbacks=[]", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
        f"--data.vstar.num_samples={args.vstar_samples}", f"--num_threads={args.threads}",
        f"--trainer.accelerator={args.accelerator}",
    ]
    from apo_lightning.lit.cli import build_cli

    cli = build_cli(["--config", str(REPO / "configs" / "webshop_1k.yaml"), *overrides], run=False)
    cli.trainer.callbacks.append(timer)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    if torch.cuda.is_available() and args.accelerator != "cpu":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
        memory_kind = "cuda_max_allocated_mb"
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        memory_kind = "max_rss_mb"
    steps = timer.times[1:] or timer.times
    print("RESULT " + json.dumps({"algorithm": args.worker, "step_seconds": statistics.mean(steps),
                                  "step_seconds_all": timer.times, memory_kind: peak_mb,
                                  "trajectories_per_step": args.goals * (4 if args.worker == "grpo" else 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/webshop-1k-ref")
    parser.add_argument("--data-dir", default=None, help="WebShop data folder (default: the data rule)")
    parser.add_argument("--goals", type=int, default=8, help="goals per step (GRPO rolls out 4 per goal)")
    parser.add_argument("--train-goals", type=int, default=64, help="goal pool (stage 1 covers these)")
    parser.add_argument("--vstar-samples", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4, help="training steps per algorithm (first is warm-up)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--worker", choices=("apo", "grpo"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    results = {}
    for algorithm in ("apo", "grpo"):
        command = [sys.executable, __file__, "--worker", algorithm, *sys.argv[1:]]
        start = time.perf_counter()
        out = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        if out.returncode != 0:
            sys.stderr.write(out.stdout[-4000:] + out.stderr[-4000:])
            raise SystemExit(f"{algorithm} worker failed")
        line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
        results[algorithm] = json.loads(line[len("RESULT "):])
        results[algorithm]["process_seconds"] = round(time.perf_counter() - start, 1)
        memory_key = next(k for k in results[algorithm] if k.endswith("_mb"))
        print(f"{algorithm:5s}: {results[algorithm]['trajectories_per_step']:3d} trajectories/step  "
              f"{results[algorithm]['step_seconds']:7.2f} s/step  peak {results[algorithm][memory_key]:8.0f} MB "
              f"({memory_key})")
    memory_key = next(k for k in results["apo"] if k.endswith("_mb"))
    time_ratio = results["apo"]["step_seconds"] / results["grpo"]["step_seconds"]
    memory_ratio = results["apo"][memory_key] / results["grpo"][memory_key]
    print(f"A*-PO / GRPO step time: {time_ratio:.2f}x (target <= 0.5)   peak memory: {memory_ratio:.2f}x")
    print(json.dumps({"apo": results["apo"], "grpo": results["grpo"], "step_time_ratio": round(time_ratio, 3),
                      "memory_ratio": round(memory_ratio, 3)}))


if __name__ == "__main__":
    main()
