"""The RL LightningModule: the policy, the frozen reference π_ref, and the A*-PO (or GRPO) loss.

A*-PO stage 2 (Brantley et al. 2025, §3): each batch holds one fresh trajectory per goal from the current policy;
the loss regresses ``β2 · Σ_gen-tokens log π/π_ref`` onto ``r − V*(x)`` by least squares (``apo/losses.py``). GRPO
(``algorithm: grpo``) runs in the same module for side-by-side comparison: G rollouts per goal, group-normalised
advantages, the clipped ratio and an optional KL term.

The reference is kept outside the module's parameters: it is not trained, not in the optimizer and not in the
checkpoint (it is reloaded from ``model_name_or_path``). With LoRA the reference is the same network with the adapter
switched off, so no second copy is held.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from lightning.pytorch import LightningModule
from torchmetrics import MeanMetric

from ..agent.evaluate import trajectory_metrics
from ..agent.logprobs import generated_logprobs
from ..agent.policy import load_policy
from ..agent.rollout import RolloutEngine, Trajectory, collate_trajectories
from ..apo.losses import apo_loss, grpo_advantages, grpo_loss
from ..apo.vstar import VStarTable

log = logging.getLogger(__name__)


@dataclass
class GRPOConfig:
    """GRPO baseline settings.

    Args:
        group_size: rollouts per goal (G).
        clip_eps: PPO clip range ε.
        beta_kl: weight of the k3 KL to π_ref (0 = none).
        scale_advantages: divide by the group std (False: only subtract the group mean).
    """

    group_size: int = 4
    clip_eps: float = 0.2
    beta_kl: float = 0.0
    scale_advantages: bool = True


@dataclass
class LoraSettings:
    """LoRA adapters through ``peft`` (rank 0 = full fine-tuning).

    Args:
        rank: adapter rank r.
        alpha: scaling α.
        dropout: adapter dropout.
        target_modules: module names to adapt.
    """

    rank: int = 0
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def pack_generated(values: torch.Tensor, gen_mask: torch.Tensor, traj_index: torch.Tensor,
                   num_trajectories: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather the generated-token values of every trajectory's segments into one row per trajectory.

    Only generated tokens enter the losses, so a trajectory split over several segments (history window, context
    budget) is the concatenation of its segments' generated tokens.

    Args:
        values: (S, T) per-token values (log-probs) of S segments.
        gen_mask: (S, T) 1 on generated tokens.
        traj_index: (S,) int64, the trajectory of each segment.
        num_trajectories: B.

    Returns:
        ``(packed (B, G), mask (B, G))`` with G the largest number of generated tokens of a trajectory; values are
        0 where mask is 0. Gradients flow through ``values``.
    """
    seg, pos = gen_mask.nonzero(as_tuple=True)  # in (segment, position) order: per trajectory, segments in order
    owner = traj_index[seg]  # (N,)
    order = torch.argsort(owner, stable=True)
    seg, pos, owner = seg[order], pos[order], owner[order]
    counts = torch.bincount(owner, minlength=num_trajectories)  # (B,)
    starts = torch.cumsum(counts, 0) - counts
    column = torch.arange(owner.numel(), device=owner.device) - starts[owner]
    width = int(counts.max().item()) if counts.numel() else 0
    packed = values.new_zeros((num_trajectories, max(width, 1)))
    mask = values.new_zeros((num_trajectories, max(width, 1)))
    packed = packed.index_put((owner, column), values[seg, pos])
    mask = mask.index_put((owner, column), torch.ones_like(column, dtype=values.dtype))
    return packed, mask


class WebShopRLModule(LightningModule):
    """A*-PO (or GRPO) fine-tuning of a language-model policy on WebShop.

    Args:
        model_name_or_path: π_ref, the frozen reference (usually the SFT-warm-started policy); the policy starts
            as a copy of it (A*-PO's π_0 = π_ref).
        algorithm: "apo" (A*-PO) or "grpo".
        beta2: A*-PO's stage-2 β2 (paper default 1e-3; larger keeps the policy nearer π_ref for short replies).
        learning_rate: AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear learning-rate warm-up steps.
        max_new_tokens: reply token limit per turn.
        temperature: sampling temperature of training rollouts. The loss always reads the untempered log π and
            log π_ref: A*-PO's regression target ``β2 ln π*/π_ref = r − V*`` holds for every trajectory, so
            trajectories drawn from a sharper sampler (T < 1, nearer the greedy policy that is evaluated) are as
            valid a regression set as on-policy ones; V* stays the reference's (``vstar.temperature``). GRPO
            with T ≠ 1 treats the recorded untempered log π as the old policy.
        top_p: nucleus sampling of training rollouts.
        grpo: GRPO settings (used when ``algorithm == "grpo"``).
        lora: LoRA settings (rank 0 = full fine-tuning).
        dtype: weights dtype ("float32" | "bfloat16"); mixed precision comes from the Trainer's ``precision``.
        sample_trajectories: how many trajectories to log as text every ``text_every`` steps.
        text_every: steps between text samples in TensorBoard.
        results_dir: where ``cli.py test`` writes summary.csv, episodes.jsonl and failure_analysis.md.
        method_name: the method's name in the results (default: the algorithm).
    """

    def __init__(self, model_name_or_path: str = "data/models/tiny-sft", algorithm: str = "apo", beta2: float = 1e-3, learning_rate: float = 1e-4, weight_decay: float = 0.0,
                 warmup_steps: int = 0, max_new_tokens: int = 64, temperature: float = 1.0, top_p: float = 1.0,
                 grpo: GRPOConfig = GRPOConfig(), lora: LoraSettings = LoraSettings(), dtype: str = "float32",
                 sample_trajectories: int = 2, text_every: int = 25, results_dir: str = "results",
                 method_name: str | None = None):
        super().__init__()
        if algorithm not in ("apo", "grpo"):
            raise ValueError(f"algorithm must be 'apo' or 'grpo', got {algorithm!r}")
        self.save_hyperparameters()
        self.grpo_config, self.lora_config = grpo, lora  # hparams hold them as plain dicts
        self.policy = None
        self.tokenizer = None
        self._reference_box: list = []  # a list, not an attribute: keeps π_ref out of parameters() and checkpoints
        self.skipped_nonfinite = 0
        self.val_success, self.val_score = MeanMetric(), MeanMetric()
        self.test_success, self.test_score = MeanMetric(), MeanMetric()
        self._test_trajectories: list[Trajectory] = []

    # ------------------------------------------------------------------------------------------------ models
    def configure_model(self) -> None:
        if self.policy is not None:
            return
        hp = self.hparams
        policy, self.tokenizer = load_policy(hp.model_name_or_path, dtype=hp.dtype)
        lora = self.lora_config
        if lora.rank > 0:
            from peft import LoraConfig, get_peft_model

            policy = get_peft_model(policy, LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                       target_modules=list(lora.target_modules)))
        else:
            reference, _ = load_policy(hp.model_name_or_path, dtype=hp.dtype)
            reference.eval().requires_grad_(False)
            self._reference_box = [reference]
        policy.train()
        self.policy = policy

    @property
    def reference(self):
        """π_ref (None with LoRA, where the policy with its adapter disabled is the reference)."""
        return self._reference_box[0] if self._reference_box else None

    def on_fit_start(self) -> None:
        if self.reference is not None:
            self.reference.to(self.device)

    on_validation_start = on_test_start = on_fit_start

    def on_train_start(self) -> None:
        self.log_stage1(getattr(self.trainer.datamodule, "v_star", None))

    def log_stage1(self, table: VStarTable | None) -> None:
        """Log ``table.summary()`` (None: nothing) as one log line and as ``stage1/*`` scalars at this step.

        ``stage1/pass_at_n`` against π_ref's greedy success rate says how much stage 2's on-policy sampling can
        find that greedy decoding does not already (see :meth:`VStarTable.summary`).
        """
        if table is None:
            return
        summary = table.summary()
        log.info("stage 1: %s", ", ".join(f"{k} {v:.4g}" for k, v in summary.items()))
        if self.logger is not None:
            self.logger.log_metrics({f"stage1/{k}": v for k, v in summary.items()}, step=self.global_step)

    def reference_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                           gen_mask: torch.Tensor) -> torch.Tensor:
        """log π_ref of each generated token, (S, T) float32 (0 elsewhere), without gradients."""
        with torch.no_grad():
            if self.reference is None:  # LoRA: the base network is the reference
                with self.policy.disable_adapter():
                    return generated_logprobs(self.policy, input_ids, attention_mask, gen_mask)
            return generated_logprobs(self.reference, input_ids, attention_mask, gen_mask)

    def engine(self, chat, greedy: bool) -> RolloutEngine:
        """A rollout engine over the current policy."""
        return RolloutEngine(self.policy, self.tokenizer, chat, max_new_tokens=self.hparams.max_new_tokens,
                             temperature=self.hparams.temperature, top_p=self.hparams.top_p, greedy=greedy)

    def _rollout_context(self):
        plugin = getattr(self.trainer, "precision_plugin", None) if self._trainer is not None else None
        return plugin.forward_context() if plugin is not None else contextlib.nullcontext()

    # ------------------------------------------------------------------------------------------------ rollouts
    def collect_rollouts(self, goals: list[int], seed: int, data) -> dict:
        """Fresh trajectories of the current policy for ``goals`` (called by the data module's stream).

        A*-PO: one rollout per goal; GRPO: ``group_size`` per goal. Returns the collated tensors, V* per
        trajectory, and the trajectories themselves (for metrics and text samples).
        """
        if data.vstar.refresh_every and data.cursor and data.cursor % data.vstar.refresh_every == 0:
            with self._rollout_context():
                data.refresh_v_star(self.policy, self.tokenizer)
            self.log_stage1(data.v_star)
        group = self.grpo_config.group_size if self.hparams.algorithm == "grpo" else 1
        goal_list = [g for g in goals for _ in range(group)]
        start = time.perf_counter()
        with self._rollout_context():
            trajectories = self.engine(data.chat, greedy=False).rollout(data.env.envs(len(goal_list)), goal_list, seed)
        seconds = time.perf_counter() - start
        batch = collate_trajectories(trajectories, self.tokenizer.pad_token_id)
        batch["v_star"] = data.v_star.lookup(goal_list) if self.hparams.algorithm == "apo" else torch.zeros(len(goal_list))
        batch["group"] = torch.tensor([i // group for i in range(len(goal_list))])
        batch["trajectories"] = trajectories
        batch["rollout_seconds"] = seconds
        return batch

    def transfer_batch_to_device(self, batch, device, dataloader_idx: int):
        if isinstance(batch, dict):
            return {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
        return batch

    # ------------------------------------------------------------------------------------------------ training
    def training_step(self, batch: dict, batch_idx: int):
        hp = self.hparams
        trajectories: list[Trajectory] = batch["trajectories"]
        n = len(trajectories)
        tokens, attention, gen_mask = batch["input_ids"], batch["attention_mask"], batch["gen_mask"]
        logp = generated_logprobs(self.policy, tokens, attention, gen_mask)  # (S, T)
        ref_logp = self.reference_logprobs(tokens, attention, gen_mask)  # (S, T)
        packed_logp, mask = pack_generated(logp, gen_mask, batch["traj_index"], n)  # (B, G)
        packed_ref, _ = pack_generated(ref_logp, gen_mask, batch["traj_index"], n)
        if hp.algorithm == "apo":
            loss, stats = apo_loss(packed_logp, packed_ref, mask, batch["reward"], batch["v_star"], hp.beta2)
            self.log("train/v_star_mean", batch["v_star"].mean(), batch_size=n)
        else:
            packed_old, _ = pack_generated(batch["old_logp"], gen_mask, batch["traj_index"], n)
            grpo = self.grpo_config
            advantages = grpo_advantages(batch["reward"], batch["group"], scale=grpo.scale_advantages)
            loss, stats = grpo_loss(packed_logp, packed_old, packed_ref, mask, advantages, grpo.clip_eps, grpo.beta_kl)
            stats["advantage_std"] = advantages.std(correction=0)

        finite = torch.isfinite(loss).float()
        if self.trainer.world_size > 1:  # every rank must skip together, or DDP waits forever
            finite = self.trainer.strategy.reduce(finite, reduce_op="min")
        if finite.item() < 1:
            self.skipped_nonfinite += 1
            self.log("train/nonfinite_skipped", float(self.skipped_nonfinite), batch_size=n)
            log.warning("non-finite loss at step %d: step skipped (%d so far)", self.global_step,
                        self.skipped_nonfinite)
            return None

        self._log_training(loss, stats, batch, trajectories)
        return loss

    def _log_training(self, loss, stats: dict, batch: dict, trajectories: list[Trajectory]) -> None:
        n = len(trajectories)
        metrics = trajectory_metrics(trajectories)
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        self.log("train/nonfinite_skipped", float(self.skipped_nonfinite), batch_size=n)
        for name, value in stats.items():
            tag = {"beta2_log_ratio": "train/beta2_log_ratio", "kl_k3": "train/kl", "kl_k1": "train/kl_k1",
                   "advantage_mean": "train/advantage_mean", "advantage_std": "train/advantage_std",
                   "gen_tokens": "rollout/gen_tokens"}.get(name, f"train/{name}")
            self.log(tag, value, batch_size=n)
        self.log("rollout/reward", metrics["reward"], batch_size=n, sync_dist=True)
        self.log("rollout/success_rate", metrics["success_rate"], prog_bar=True, batch_size=n, sync_dist=True)
        self.log("rollout/score", metrics["score"], batch_size=n, sync_dist=True)
        self.log("rollout/turns", metrics["avg_turns"], batch_size=n)
        self.log("rollout/invalid_reply_rate", metrics["invalid_reply_rate"], batch_size=n)
        self.log("rollout/trajectories_per_s", n / max(batch["rollout_seconds"], 1e-9), batch_size=n)
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
    def _evaluate(self, goals: list[int], success: MeanMetric, score: MeanMetric) -> list[Trajectory]:
        data = self.trainer.datamodule
        with self._rollout_context():
            trajectories = self.engine(data.chat, greedy=True).rollout(data.env.envs(len(goals)), goals, seed=0)
        for t in trajectories:
            success.update(float(t.success))
            score.update(100.0 * t.score)
        return trajectories

    def validation_step(self, goals: list[int], batch_idx: int) -> None:
        self._evaluate(goals, self.val_success, self.val_score)

    def on_validation_epoch_end(self) -> None:
        self.log("val/success_rate", self.val_success.compute(), prog_bar=True)
        self.log("val/score", self.val_score.compute(), prog_bar=True)
        self.val_success.reset()
        self.val_score.reset()

    def test_step(self, goals: list[int], batch_idx: int) -> None:
        self._test_trajectories += self._evaluate(goals, self.test_success, self.test_score)

    def on_test_epoch_end(self) -> None:
        self.log("test/success_rate", self.test_success.compute())
        self.log("test/score", self.test_score.compute())
        self.test_success.reset()
        self.test_score.reset()
        trajectories = self._test_trajectories
        if self.trainer.world_size > 1:
            gathered = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(gathered, trajectories)
            trajectories = [t for part in gathered for t in part]
        self._test_trajectories = []
        if self.trainer.is_global_zero:
            from ..agent.report import write_results

            data = self.trainer.datamodule
            method = self.hparams.method_name or self.hparams.algorithm
            summary = write_results(Path(self.hparams.results_dir), sorted(trajectories, key=lambda t: t.goal_index),
                                    data.env.shop(), method=method, split="test")
            log.info("test results written to %s: %s", self.hparams.results_dir, summary)

    # ------------------------------------------------------------------------------------------------ optimizer
    def configure_optimizers(self):
        params = [p for p in self.policy.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=self.hparams.learning_rate, weight_decay=self.hparams.weight_decay)
        warmup = max(1, self.hparams.warmup_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["skipped_nonfinite"] = self.skipped_nonfinite

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.skipped_nonfinite = checkpoint.get("skipped_nonfinite", 0)
