"""One A*-PO step of the SmolLM2 recipe, today's settings against the new ones, in one run.

    python benchmarks/rl_step.py          # the data rule (README); vLLM from $APO_VLLM_PYTHON or .venv-vllm
    python benchmarks/rl_step.py --settings old new_hf                 # without vLLM

Each setting is one ``cli.py fit`` of ``configs/smollm2.yaml`` + ``configs/machine/cpu.yaml`` +
``configs/smollm2_2h.yaml`` in a fresh process with one torch thread: one process's share of the recipe (8 goals a
step), on the first ``--goals`` training goals, ``max_steps`` 1, no validation. Stage 1 runs first (``--samples``
per goal; not timed: it stands for the cached table, and it also loads and compiles the vLLM engine), then the step
is timed by :class:`StepTimer`: the rollout (``batch["rollout_seconds"]``) and the update (the training step's
forward passes, loss, backward and optimizer step, ``on_train_batch_start`` → ``on_train_batch_end``).

Settings (``SETTINGS``):

- ``old`` (the baseline): the "hf" decoder, float32 (``32-true``), 8 reused stage-1 trajectories per step
  (``vstar.reuse: 8``), as the recipe ran;
- ``new_hf``: the "hf" decoder under ``bf16-mixed``, no reused rows;
- ``new``: the vLLM backend (bfloat16 engine) under ``bf16-mixed``, no reused rows;
- ``budget_2048``, ``turns_10``, ``pages_1500``: ``new_hf`` with a context budget of 2,048 tokens, a turn limit of
  10, or pages cut to 1,500 characters (``chat.max_observation_chars``): tokens and seconds a step only.

Per setting: seconds of the rollout and of the update, seconds per fresh trajectory, tokens through the update (all
rows' context) and generated tokens of the fresh trajectories, update tokens per second and GFLOP/s (about 8 × the
parameters per token: π_ref's and the policy's forward passes, the recomputed forward of gradient checkpointing and
the backward to the activations), peak memory of the trainer and of its vLLM server. Last line: one JSON object of
every figure, with ``ratio`` (the old step's seconds ÷ the new one's) and ``ratio_per_trajectory``; the table's
ratio column is against ``old``, or against the first setting run when ``old`` is not among them.
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

from lightning.pytorch import Callback
from update_memory import peak_gb

REPO = Path(__file__).resolve().parents[1]
CONFIGS = ["configs/smollm2.yaml", "configs/machine/cpu.yaml", "configs/smollm2_2h.yaml"]
SETTINGS = {
    "old": ["--trainer.precision=32-true", "--data.rollout.backend=hf", "--data.vstar.reuse=8"],
    "new_hf": ["--trainer.precision=bf16-mixed", "--data.rollout.backend=hf", "--data.vstar.reuse=0"],
    "new": ["--trainer.precision=bf16-mixed", "--data.rollout.backend=vllm", "--data.vstar.reuse=0"],
}
# fewer tokens per step, each on top of new_hf (what they do to learning is measured by training runs, not here)
SETTINGS["budget_2048"] = [*SETTINGS["new_hf"], "--data.chat.context_budget=2048"]
SETTINGS["turns_10"] = [*SETTINGS["new_hf"], "--data.env.max_steps=10"]
SETTINGS["pages_1500"] = [*SETTINGS["new_hf"], "--data.chat.max_observation_chars=1500"]


def server_peak_gb(pid: int) -> float:
    """Peak resident memory of process ``pid`` in GB (``VmHWM``; this process's own: ``update_memory.peak_gb``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    return 0.0


class StepTimer(Callback):
    """Writes the first training step's figures to ``out_file`` (JSON) when it ends.

    Args:
        out_file: where the figures go.
    """

    def __init__(self, out_file: str):
        self.out_file = out_file
        self.start = 0.0
        self.batch: dict | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        update = time.perf_counter() - self.start
        fresh = batch["trajectories"]
        backend = trainer.datamodule._vllm
        parameters = sum(p.numel() for p in pl_module.policy.parameters())
        tokens = int(batch["attention_mask"].sum())
        figures = {
            "rollout_s": round(batch["rollout_seconds"], 2), "update_s": round(update, 2),
            "fresh_trajectories": len(fresh), "rows": int(batch["reward"].shape[0]),
            "update_tokens": tokens, "generated_tokens": int(batch["gen_mask"].sum()),
            "fresh_generated_tokens": sum(t.generated_tokens for t in fresh),
            "fresh_turns": sum(len(t.turns) for t in fresh),
            "update_tokens_per_s": round(tokens / update, 1),
            "update_gflop_per_s": round(8 * parameters * tokens / update / 1e9, 1),
            "sampled_success": sum(t.success for t in fresh) / len(fresh),
            "peak_gb": round(peak_gb(), 2),
            "server_peak_gb": round(server_peak_gb(backend._process.pid), 2) if backend is not None else 0.0,
            "logp_gap": round(pl_module._logp_gap, 4),
        }
        Path(self.out_file).write_text(json.dumps(figures))


def run(name: str, args: argparse.Namespace, workdir: Path, configs: list[str] = CONFIGS,
        overrides: list[str] | None = None) -> dict:
    """One setting's fit in a fresh process (``configs`` composed, then ``overrides``, default ``SETTINGS[name]``);
    returns its :class:`StepTimer` figures and wall time."""
    out = workdir / f"{name}.json"
    command = [sys.executable, str(REPO / "cli.py"), "fit", *[a for c in configs for a in ("--config", str(REPO / c))],
               *(SETTINGS[name] if overrides is None else overrides), "--trainer.devices=1", "--trainer.strategy=auto", "--trainer.max_steps=1",
               "--trainer.max_time=null", "--trainer.limit_val_batches=0", "--trainer.enable_checkpointing=false",
               "--trainer.callbacks=[]", "--trainer.callbacks+=rl_step.StepTimer", f"--trainer.callbacks.out_file={out}",
               "--trainer.logger=false", "--trainer.enable_progress_bar=false", f"--run_name=rl_step_{name}",
               f"--data.train_goals={args.goals}", f"--data.vstar.num_samples={args.samples}",
               f"--data.vstar.cache_dir={workdir / 'vstar'}", f"--data.env.data_dir={args.data_dir}",
               f"--model.results_dir={workdir / 'results'}", "--num_threads=1",
               *([f"--data.rollout.vllm.python={args.vllm_python}"] if args.vllm_python else [])]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=workdir, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "benchmarks")])})
    figures = json.loads(out.read_text())
    figures.update(setting=name, wall_s=round(time.perf_counter() - start, 1),
                   step_s=round(figures["rollout_s"] + figures["update_s"], 2))
    figures["s_per_fresh_trajectory"] = round(figures["step_s"] / figures["fresh_trajectories"], 2)
    return figures


def cpu_flags() -> str:
    """The CPU's bfloat16 flags as ``lscpu`` lists them (what decides whether bfloat16 is fast)."""
    flags = Path("/proc/cpuinfo").read_text().split("flags", 2)[1].split("\n")[0].split()
    return " ".join(f for f in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f") if f in flags) or "none of them"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("APO_WEBSHOP_DATA", "data/webshop_1k"))
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["old", "new_hf", "new"])
    parser.add_argument("--goals", type=int, default=8, help="training goals: the step's batch and stage 1's goals")
    parser.add_argument("--samples", type=int, default=1, help="stage-1 samples per goal (the reused rows' source)")
    parser.add_argument("--vllm-python", default=None, help="vLLM's interpreter (default: as rollout.vllm.python)")
    args = parser.parse_args()
    args.data_dir = str(Path(args.data_dir).resolve())
    results = {}
    with tempfile.TemporaryDirectory(prefix="rl_step-") as tmp:
        workdir = Path(tmp)
        (workdir / "data").mkdir()
        (workdir / "models").symlink_to(REPO / "models")
        (workdir / "data" / "models").symlink_to(REPO / "data" / "models")
        for name in args.settings:
            results[name] = run(name, args, workdir)
            print(name, json.dumps(results[name]), flush=True)
    base = results.get("old") or next(iter(results.values()))
    print(f"CPU flags: {cpu_flags()}")
    print(f"{'setting':8} {'step s':>8} {'rollout s':>9} {'update s':>8} {'s/traj':>7} {'upd tok':>8} {'tok/s':>7} "
          f"{'GFLOP/s':>7} {'peak GB':>7} {'ratio':>6}")
    for name, r in results.items():
        ratio = base["step_s"] / r["step_s"] if base else float("nan")
        print(f"{name:8} {r['step_s']:8.1f} {r['rollout_s']:9.1f} {r['update_s']:8.1f} "
              f"{r['s_per_fresh_trajectory']:7.2f} {r['update_tokens']:8d} {r['update_tokens_per_s']:7.0f} "
              f"{r['update_gflop_per_s']:7.1f} {r['peak_gb'] + r['server_peak_gb']:7.2f} {ratio:6.2f}")
    summary = {"cpu_flags": cpu_flags(), "settings": results}
    if "old" in results and "new" in results:
        summary["ratio"] = round(base["step_s"] / results["new"]["step_s"], 2)
        summary["ratio_per_trajectory"] = round(base["s_per_fresh_trajectory"]
                                                / results["new"]["s_per_fresh_trajectory"], 2)
    if "old" in results and "new_hf" in results:
        summary["ratio_new_hf"] = round(base["step_s"] / results["new_hf"]["step_s"], 2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
