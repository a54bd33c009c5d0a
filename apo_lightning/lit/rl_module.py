"""The RL LightningModule: the policy, the frozen reference π_ref, and the configured objective's loss.

Each training batch holds fresh trajectories of the current policy (``rl_data``); the module computes log π and
log π_ref at the generated tokens, packs them one row per trajectory and asks the objective (an
``apo.objectives.Objective``) for the loss. It never branches on the objective's name.

The objective is one argument, its class and settings together::

    model:
      init_args:
        objective:
          class_path: apo_lightning.apo.objectives.GRPO   # or APO, KLPG, AWR
          init_args: {group_size: 4, beta_kl: 0.04}

On the command line ``--model.objective=GRPO --model.objective.beta_kl=0.04`` (the class by its name, then its
settings; a later ``--config`` with another ``class_path`` replaces the objective, keeping only the settings the new
class also has). ``python cli.py fit --config configs/quickstart.yaml --model.objective=GRPO --help`` (or
``--print_config=comments``) lists that objective's settings, ``--model.objective.help GRPO`` those of any objective.

The reference π_ref is the model ``model_name_or_path`` names, as ``models.loading.load_policy`` loads it, and the
policy starts equal to it (``models.lora.load_for_training`` prepares both):

* full fine-tuning (``lora.rank`` 0): the reference is a second copy, kept outside the module's parameters: not
  trained, not in the optimizer and not in the checkpoint (it is reloaded from ``model_name_or_path``). An adapter
  folder is merged into its base, in both.
* LoRA over a plain model: the policy is the model with a fresh adapter; the reference is the same network with the
  adapter switched off.
* LoRA from an adapter folder (an SFT adapter, say): the reference is the base with the folder's adapter, frozen, as
  the adapter ``reference``; the policy is a trainable copy of it, the adapter ``policy``. Reference log-probs run
  the network with ``reference`` active, so π_ref is the adapted model (not the bare base), one copy of the base
  serves both, and the exported policy (``callbacks.ExportPolicy``: the ``policy`` adapter) applies over the base
  alone.

A checkpoint records the objective, the reference (path, dtype and a hash of its weights as the loss sees them: for
an adapter folder, the base and the adapter) and the LoRA settings; ``fit`` refuses to resume it under any other
(``on_load_checkpoint``). With LoRA it holds only the trained adapter: the frozen weights come back from the
reference it records (``settings.CheckedResume``).
"""

from __future__ import annotations

import copy
import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal

import torch
from lightning.pytorch import LightningModule
from torchmetrics import MeanMetric

from ..apo.logprobs import generated_logprobs, pack_generated
from ..apo.objectives import APO, Objective, PackedBatch, kl_statistics
from ..apo.objectives.base import masked_token_mean
from ..eval.metrics import trajectory_metrics
from ..eval.report import write_results
from ..models.lora import REFERENCE_ADAPTER, LoraSettings, adapter_active
from ..models.tiny import TinyPolicySpec
from ..rollout.trajectory import Trajectory
from ..utils.memory import release_free_memory
from .rl_data import TrainingBatch
from .settings import CheckedResume, ensure_policy, load_start

log = logging.getLogger(__name__)
DType = Literal["float32", "bfloat16", "float16"]
#: what a resumed run must share with its checkpoint: {name in messages: ``training_setup`` key compared}


class WebShopRLModule(CheckedResume, LightningModule):
    """RL fine-tuning of a language-model policy on WebShop with one objective (A*-PO by default).

    Args:
        model_name_or_path: π_ref, the frozen reference (usually the SFT-warm-started policy: a model directory,
            or an adapter folder over its base); the policy starts as a copy of it (A*-PO's π_0 = π_ref).
        tiny: build a fresh (untrained) tiny policy into ``model_name_or_path`` if it is missing, which must then be
            a new folder under ``data/models/`` (``settings.check_policy``: any other missing path is an error).
            For smoke tests; a real run starts from an SFT-warm-started reference.
        objective: the objective and its settings: ``APO`` (A*-PO, Brantley et al. 2025), ``GRPO`` (Shao et al.
            2024), ``KLPG`` (the seed project's KL-anchored policy gradient) or ``AWR`` (advantage-weighted SFT),
            from ``apo_lightning.apo.objectives`` (module docstring: how a config or the command line sets it).
        learning_rate: AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear learning-rate warm-up steps: step s (from 0) trains at ``(s + 1) / warmup_steps`` of
            the rate; after the warm-up the rate stays constant.
        lora: LoRA settings (rank 0 = full fine-tuning); from an adapter folder, its rank, alpha and target modules
            (the module docstring: which reference each case has).
        dtype: weights dtype; mixed precision comes from the Trainer's ``precision``.
        sample_trajectories: how many trajectories to log as text every ``text_every`` steps.
        text_every: steps between text samples in TensorBoard (0 = none).
        results_dir: where ``cli.py test`` writes summary.csv, episodes.jsonl and failure_analysis.md (default:
            ``results/<run_name>``, else ``results``).
        method_name: the method's name in the results (default: the objective's name, e.g. ``apo``).
        gradient_checkpointing: keep only each decoder layer's input in the policy's forward pass and recompute the
            rest in the backward pass (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"): the
            activations of a batch's segments fall from every layer's per token to one hidden state per layer, for
            about one more forward pass per step; the same loss and gradients. Rollouts (which run the policy in
            eval mode) and π_ref's log-probs (no gradients) are unchanged.
    """

    #: a resume must have this objective, these reference weights and these LoRA settings (``CheckedResume``)
    RESUME_CHECKS = {"objective": "objective", "reference": "reference_sha256", "lora": "lora"}
    START_CHECKS = ("reference", "lora")

    def __init__(self, model_name_or_path: str = "data/models/tiny-sft", tiny: TinyPolicySpec | None = None,
                 objective: Objective = APO(),
                 learning_rate: float = 1e-4, weight_decay: float = 0.0, warmup_steps: int = 0,
                 lora: LoraSettings = LoraSettings(), dtype: DType = "float32", sample_trajectories: int = 2,
                 text_every: int = 25, results_dir: str | None = None, method_name: str | None = None,
                 gradient_checkpointing: bool = False):
        super().__init__()
        self.save_hyperparameters()
        self.objective = objective
        self.lora_config = lora
        self.tiny = tiny
        self.policy = None
        self.tokenizer = None
        self.reference_sha256: str | None = None  # of π_ref as loaded (configure_model), 16 hex digits
        self._reference_box: list = []  # a list, not an attribute: keeps π_ref out of parameters() and checkpoints
        self.skipped_nonfinite = 0
        self._last_step_start: float | None = None
        self._logp_gap = 0.0  # of the last packed batch (packed_batch)
        self.val_success, self.val_score = MeanMetric(), MeanMetric()
        self.train_goal_success, self.train_goal_score = MeanMetric(), MeanMetric()  # data.train_eval_goals
        self.test_success, self.test_score = MeanMetric(), MeanMetric()
        self._test_trajectories: list[Trajectory] = []

    # ------------------------------------------------------------------------------------------------ models
    def prepare_data(self) -> None:
        """Once per machine: the policy exists, or with ``tiny`` is built (``settings.ensure_policy``)."""
        ensure_policy(self.hparams.model_name_or_path, self.tiny, self.trainer.datamodule)

    def configure_model(self) -> None:
        """Load the policy and π_ref (the module docstring's cases).

        Raises:
            SettingError: from an adapter folder, LoRA settings other than the folder's."""
        if self.policy is not None:
            return
        hp = self.hparams
        start = load_start(hp.model_name_or_path, self.lora_config, hp.dtype,
                           gradient_checkpointing=hp.gradient_checkpointing)
        policy, self.tokenizer = start.policy, start.tokenizer
        self.reference_sha256 = start.start_sha256  # π_0 = π_ref: what a resume must match
        if self.lora_config.rank == 0:
            reference = copy.deepcopy(policy)  # π_ref = π_0, held apart: the policy's parameters move
            reference.eval().requires_grad_(False)
            self._reference_box = [reference]
        policy.train()
        self.policy = policy

    @property
    def reference(self):
        """π_ref as a separate model (None with LoRA, where π_ref is the policy's network with its adapter disabled,
        or with the ``reference`` adapter active: ``reference_logprobs``)."""
        return self._reference_box[0] if self._reference_box else None

    def rollout_policy(self):
        """``(policy, tokenizer)``: what the data module samples trajectories from (the current parameters)."""
        return self.policy, self.tokenizer

    def on_fit_start(self) -> None:
        if self.reference is not None:
            self.reference.to(self.device)

    on_validation_start = on_test_start = on_fit_start

    def on_validation_end(self) -> None:
        self._last_step_start = None  # a validation is not a training step's time

    @contextmanager
    def reference_policy(self) -> Iterator[torch.nn.Module]:
        """π_ref as a model to run, inside this context: the separate copy (full fine-tuning), or the policy's
        network with its ``reference`` adapter active (LoRA from an adapter folder) or its adapter disabled (a fresh
        adapter). Stage 1 samples it and the loss scores with it: one π_ref, loaded once (``configure_model``)."""
        if self.reference is not None:
            yield self.reference
        elif REFERENCE_ADAPTER in self.policy.peft_config:  # LoRA from an adapter folder: its frozen adapter
            with adapter_active(self.policy, REFERENCE_ADAPTER):
                yield self.policy
        else:
            with self.policy.disable_adapter():  # a fresh adapter: the base network is the reference
                yield self.policy

    def reference_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                           gen_mask: torch.Tensor) -> torch.Tensor:
        """log π_ref of each generated token, (S, T) float32 (0 elsewhere), without gradients."""
        with torch.no_grad(), self.reference_policy() as reference:
            return generated_logprobs(reference, input_ids, attention_mask, gen_mask)

    # ------------------------------------------------------------------------------------------------ training
    def packed_batch(self, batch: TrainingBatch) -> PackedBatch:
        """Log π (with gradients), log π_ref and the old log π at the generated tokens, one row per trajectory (the
        fresh ones, then any reused stage-1 samples), with the batch's rewards, V* and groups.

        The old log π is the sampler's own (recorded at rollout) with the "hf" backend, and the trainer's log π,
        detached, when vLLM sampled (``batch["sampled_by"]``); either way the mean absolute gap between the
        sampler's and the trainer's log π over the fresh trajectories' generated tokens is kept for
        ``rollout/logp_gap``."""
        n = len(batch["reward"])
        tokens, attention, gen_mask = batch["input_ids"], batch["attention_mask"], batch["gen_mask"]
        logp, entropy = generated_logprobs(self.policy, tokens, attention, gen_mask, with_entropy=True)  # (S, T)
        ref_logp = self.reference_logprobs(tokens, attention, gen_mask)  # (S, T)
        packed_logp, mask = pack_generated(logp, gen_mask, batch["traj_index"], n)  # (B, L)
        packed_ref, _ = pack_generated(ref_logp, gen_mask, batch["traj_index"], n)
        packed_sampled, _ = pack_generated(batch["old_logp"], gen_mask, batch["traj_index"], n)
        packed_entropy, _ = pack_generated(entropy, gen_mask, batch["traj_index"], n)
        fresh = len(batch["trajectories"])
        gap = (packed_sampled[:fresh] - packed_logp[:fresh].detach()).abs()
        self._logp_gap = float(masked_token_mean(gap, mask[:fresh]))
        # vLLM samples in its own numerics: the objectives' old log π (GRPO's ratio) is the trainer's, as in verl
        packed_old = packed_logp.detach() if batch.get("sampled_by") == "vllm" else packed_sampled
        return PackedBatch(packed_logp, packed_ref, packed_old, mask, batch["reward"], batch["v_star"],
                           batch["group"], packed_entropy)

    def training_step(self, batch: TrainingBatch, batch_idx: int):
        now = time.perf_counter()
        if self._last_step_start is not None:  # the rollout of this batch and the update of the last one
            seconds = now - self._last_step_start
            n = len(batch["trajectories"])
            self.log("time/step_seconds", seconds, batch_size=n)
            self.log("time/trajectories_per_s", n / seconds, batch_size=n, sync_dist=True, reduce_fx="sum")
        self._last_step_start = now
        packed = self.packed_batch(batch)
        loss, stats = self.objective.loss(packed)
        fresh = len(batch["trajectories"])  # the KL is the current policy's: measured on its own samples only
        stats.update(kl_statistics(packed.head(fresh)))
        finite = torch.isfinite(loss).float()
        if self.trainer.world_size > 1:  # every rank must skip together, or DDP waits forever
            finite = self.trainer.strategy.reduce(finite, reduce_op="min")
        if finite.item() < 1:
            self.skipped_nonfinite += 1
            log.warning("non-finite loss at step %d: step skipped (%d so far)", self.global_step,
                        self.skipped_nonfinite)
            self._log_training(None, stats, batch)
            return None
        self._log_training(loss, stats, batch)
        return loss

    def on_train_batch_end(self, outputs, batch: TrainingBatch, batch_idx: int) -> None:
        release_free_memory()  # the step's activations: back to the OS, not kept through the next rollout

    def _log_training(self, loss, stats: dict, batch: TrainingBatch) -> None:
        """``train/*`` (the objective's statistics), ``rollout/*`` (the trajectories') and text samples; every scalar
        is reduced across ranks."""
        trajectories: list[Trajectory] = batch["trajectories"]
        n = len(trajectories)
        if loss is not None:
            self.log("train/loss", loss, prog_bar=True, batch_size=n, sync_dist=True)
        self.log("train/nonfinite_skipped", float(self.skipped_nonfinite), batch_size=n)
        for name, value in stats.items():
            self.log(f"train/{name}", value, batch_size=n, sync_dist=True)
        for name, value in trajectory_metrics(trajectories).items():
            if name != "episodes":
                self.log(f"rollout/{name}", value, batch_size=n, sync_dist=True, prog_bar=name == "success_rate")
        self.log("rollout/trajectories_per_s", n / max(batch["rollout_seconds"], 1e-9), batch_size=n,
                 sync_dist=True, reduce_fx="sum")
        self.log("rollout/logp_gap", self._logp_gap, batch_size=n, sync_dist=True)
        if self.hparams.text_every and self.global_step % self.hparams.text_every == 0:
            self._log_text(trajectories[: self.hparams.sample_trajectories])

    def _log_text(self, trajectories: list[Trajectory]) -> None:
        experiment = getattr(self.logger, "experiment", None)
        if experiment is None or not hasattr(experiment, "add_text") or not self.trainer.is_global_zero:
            return
        for i, t in enumerate(trajectories):
            lines = [f"**goal {t.goal_index}**: {t.instruction}  ", f"score {t.score:.3f}, reward {t.reward:.3f}  "]
            for k, turn in enumerate(t.turns, 1):
                lines.append(f"{k}. `{turn.action}` — {turn.thought[:200]}  ")
            experiment.add_text(f"samples/trajectory_{i}", "\n".join(lines), self.global_step)

    # ------------------------------------------------------------------------------------------------ evaluation
    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Greedy episodes of the validation goals (loader 0: ``val/*``) or of the training pool's first goals
        (loader 1, with ``data.train_eval_goals``: ``train_goals/*``)."""
        # the metric objects reduce over every rank's episodes (weighted by episodes) when the epoch ends
        n = len(batch["trajectories"])
        prefix, success, score = (("val", self.val_success, self.val_score) if dataloader_idx == 0 else
                                  ("train_goals", self.train_goal_success, self.train_goal_score))
        success.update(torch.tensor([float(t.success) for t in batch["trajectories"]]))
        score.update(torch.tensor([100.0 * t.score for t in batch["trajectories"]]))
        self.log(f"{prefix}/success_rate", success, on_epoch=True, prog_bar=dataloader_idx == 0, batch_size=n,
                 add_dataloader_idx=False)
        self.log(f"{prefix}/score", score, on_epoch=True, prog_bar=dataloader_idx == 0, batch_size=n,
                 add_dataloader_idx=False)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        n = len(batch["trajectories"])
        self.test_success.update(torch.tensor([float(t.success) for t in batch["trajectories"]]))
        self.test_score.update(torch.tensor([100.0 * t.score for t in batch["trajectories"]]))
        self.log("test/success_rate", self.test_success, on_epoch=True, batch_size=n)
        self.log("test/score", self.test_score, on_epoch=True, batch_size=n)
        self._test_trajectories += batch["trajectories"]

    def on_test_epoch_end(self) -> None:
        trajectories = self._test_trajectories
        if self.trainer.world_size > 1:
            gathered = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(gathered, trajectories)
            trajectories = [t for part in gathered for t in part]
        self._test_trajectories = []
        if self.trainer.is_global_zero:
            method = self.hparams.method_name or self.objective.name
            summary = write_results(Path(self.hparams.results_dir or "results"),
                                    sorted(trajectories, key=lambda t: t.goal_index), self.trainer.datamodule.shop,
                                    method=method, split="test")
            log.info("test results written to %s: %s", self.hparams.results_dir, summary)

    # ------------------------------------------------------------------------------------------------ optimizer
    def configure_optimizers(self):
        params = [p for p in self.policy.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=self.hparams.learning_rate, weight_decay=self.hparams.weight_decay)
        warmup = self.hparams.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / max(1, warmup)))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def training_setup(self) -> dict[str, str]:
        """What a checkpoint of this module must be resumed with, as text: ``objective`` (class and settings),
        ``reference`` (path, dtype and weights hash, for messages), ``reference_sha256`` (the first 16 hex digits of
        ``utils.hashing.hash_state_dict`` of π_ref as ``models.loading.load_policy`` loads it: for an adapter
        folder, its base and adapter, the reference the loss sees) and ``lora`` (the LoRA settings)."""
        hp = self.hparams
        return {"objective": repr(self.objective), "lora": repr(self.lora_config),
                "reference": f"{hp.model_name_or_path} ({hp.dtype} weights, sha256 {self.reference_sha256})",
                "reference_sha256": str(self.reference_sha256)}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["skipped_nonfinite"] = self.skipped_nonfinite
        super().on_save_checkpoint(checkpoint)  # the training setup (CheckedResume)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Restore the count of skipped steps; in ``fit``, refuse a checkpoint trained under another objective,
        reference or LoRA setting (``CheckedResume``)."""
        self.skipped_nonfinite = checkpoint["skipped_nonfinite"]
        super().on_load_checkpoint(checkpoint)
