"""Callbacks: export the trained policy (a model directory or an adapter folder), lower CPU memory in training steps
(``--low_cpu_memory``), and a summary of a run for comparisons at equal wall time."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path
from typing import Literal

from lightning.pytorch import Callback, LightningModule, Trainer

from ..models.loading import export_policy
from ..utils.memory import DEFAULT_MMAP_THRESHOLD, MAX_MMAP_THRESHOLD, map_large_allocations


class ExportPolicy(Callback):
    """Save the policy (and tokenizer) when ``fit`` ends (rank 0), by ``models.loading.export_policy``: a Hugging Face
    model directory, or with LoRA the trained adapter, unmerged, as an adapter folder over the base.

    Args:
        out_dir: the folder to write (replaced atomically); None = ``data/models/<run_name>`` (``lit.cli``).
        dtype: the dtype of the exported weights (``bfloat16`` for a policy kept in the repository); None = the
            training dtype.
    """

    def __init__(self, out_dir: str | None = None, dtype: Literal["float32", "bfloat16", "float16"] | None = None):
        self.out_dir = out_dir
        self.dtype = dtype

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:
            if self.out_dir is None:
                raise ValueError("ExportPolicy needs out_dir (or a run_name to derive it from)")
            export_policy(pl_module.policy, pl_module.tokenizer, self.out_dir, self.dtype)


class LowCPUMemory(Callback):
    """During each training step (forward, backward, optimizer step) every CPU block of 128 KiB or more gets its own
    memory mapping, returned to the system when freed; outside them (rollouts, validation) blocks under 32 MiB come
    from the heap again, as glibc's own rule ends up doing, so rollouts do not pay a page fault per new block
    (``utils.memory``, whose docstring says why a training step needs it). The CLI adds it with ``--low_cpu_memory``.
    """

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int) -> None:
        map_large_allocations(DEFAULT_MMAP_THRESHOLD)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        map_large_allocations(MAX_MMAP_THRESHOLD)


class RunSummary(Callback):
    """Write one JSON file when ``fit`` ends (rank 0): the steps, the trajectories sampled on all ranks, the wall
    time, the peak resident memory of this process (MB) and the last logged ``train/kl`` — what a comparison of
    objectives at equal wall time reports (``benchmarks/compare_objectives.py``).

    Args:
        out_file: the JSON file to write.
    """

    def __init__(self, out_file: str):
        self.out_file = Path(out_file)
        self.trajectories = 0
        self.start: float | None = None

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        self.trajectories += len(batch["trajectories"]) * trainer.world_size

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        kl = trainer.callback_metrics.get("train/kl")
        record = {"global_step": trainer.global_step, "trajectories": self.trajectories,
                  "seconds": round(time.perf_counter() - self.start, 1),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "kl_end": float(kl) if kl is not None else None}
        self.out_file.parent.mkdir(parents=True, exist_ok=True)
        self.out_file.write_text(json.dumps(record))
