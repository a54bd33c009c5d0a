"""The SFT module: supervised fine-tuning of a policy on turn drills and oracle demonstrations (cross-entropy on
reply tokens only), watched by greedy episodes, and exported as the policy that serves as π_ref: a Hugging Face
model directory, or with LoRA (``model.lora.rank`` > 0) a ``peft`` adapter folder over the base, unmerged.

    python cli.py fit --config configs/sft_tiny.yaml

With LoRA only the adapter trains (``models.lora.load_for_training``): a fresh one over a plain model, or from an
adapter folder a trainable copy of its adapter (with rank 0 an adapter folder is merged and fully fine-tuned). The
exported adapter folder names the base it applies to (``base_model_name_or_path``: ``model_name_or_path`` as given,
or the starting adapter's base), so ``models.loading.load_policy`` and ``model_name_or_path`` of an RL run open it.
"""

from __future__ import annotations

import logging

import torch
from lightning.pytorch import LightningModule
from torchmetrics import MeanMetric
from transformers import get_wsd_schedule

from ..apo.logprobs import generated_nll
from ..models.loading import export_policy
from ..models.lora import LoraSettings
from ..models.tiny import TinyPolicySpec
from ..utils.settings import check_settings
from .rl_module import DType
from .settings import CheckedResume, ensure_policy, load_start

log = logging.getLogger(__name__)


class SFTModule(CheckedResume, LightningModule):
    """Supervised fine-tuning of a policy on the SFT data module's course.

    Learning rate (``transformers.get_wsd_schedule``): linear warm-up over ``warmup_steps``, the peak rate until step
    ``constant_steps`` (linked from the data module's drill steps: the drills train at the peak rate), then a cosine
    decay to 0 at the end of training.

    Args:
        model_name_or_path: the policy to start from (a model directory, hub id, 'smollm2-135m-instruct' or an adapter
            folder over one of these).
        tiny: build a fresh (untrained) tiny policy into ``model_name_or_path`` when it does not exist, which must
            then be a new folder under ``data/models/`` (``settings.check_policy``: any other missing path is an
            error).
        export_dir: where the fine-tuned policy is saved at the end of ``fit`` (π_ref): a model directory, or with
            LoRA an adapter folder (``adapter_config.json``, ``adapter_model.safetensors`` and the tokenizer files).
        learning_rate: AdamW peak learning rate.
        weight_decay: AdamW weight decay (matrices only).
        warmup_steps: linear warm-up steps.
        constant_steps: steps at the peak rate before the cosine decay (linked from ``data.drills.steps``).
        dtype: policy weights dtype; use the Trainer's precision for mixed precision.
        export_dtype: the dtype of the exported weights (``bfloat16`` for a reference policy kept in the repository);
            None = the training dtype.
        lora: LoRA settings (rank 0 = full fine-tuning); from an adapter folder, its rank, alpha and target modules.
        gradient_checkpointing: keep only each decoder layer's input in the forward pass and recompute the rest in
            the backward pass (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost";
            ``transformers``' ``activation_checkpointing_enable``): activation memory falls from every layer's
            activations per token to one hidden state per layer, for about one more forward pass per step. The
            same loss and gradients.

    Raises:
        ValueError: a setting out of its range.
    """

    #: a resume must start from these weights with these LoRA settings (``CheckedResume``)
    RESUME_CHECKS = {"model": "model_sha256", "lora": "lora"}
    START_CHECKS = ("model", "lora")

    def __init__(self, model_name_or_path: str = "data/models/tiny-init", tiny: TinyPolicySpec | None = None,
                 export_dir: str | None = "data/models/tiny-sft", learning_rate: float = 2e-3,
                 weight_decay: float = 0.01, warmup_steps: int = 20, constant_steps: int = 0,
                 dtype: DType = "float32", export_dtype: DType | None = None, lora: LoraSettings = LoraSettings(),
                 gradient_checkpointing: bool = False):
        super().__init__()
        check_settings("", [("learning_rate", learning_rate, learning_rate > 0, "> 0"),
                            *((name, value, value >= 0, ">= 0") for name, value in
                              (("weight_decay", weight_decay), ("warmup_steps", warmup_steps),
                               ("constant_steps", constant_steps)))])
        self.save_hyperparameters()
        self.lora_config = lora
        self.tiny = tiny
        self.policy = None
        self.tokenizer = None
        self.model_sha256: str | None = None  # of the starting weights as loaded (configure_model), 16 hex digits
        self.val_loss = MeanMetric()
        self.val_success, self.val_score, self.val_invalid = MeanMetric(), MeanMetric(), MeanMetric()

    def prepare_data(self) -> None:
        """Once per machine: the policy exists, or with ``tiny`` is built (``settings.ensure_policy``)."""
        ensure_policy(self.hparams.model_name_or_path, self.tiny, self.trainer.datamodule)

    def configure_model(self) -> None:
        """Load the policy to train (``models.lora.load_for_training``; an adapter folder's own adapter is not kept).

        Raises:
            SettingError: from an adapter folder, LoRA settings other than the folder's."""
        if self.policy is None:
            hp = self.hparams
            start = load_start(hp.model_name_or_path, self.lora_config, hp.dtype, keep_reference=False,
                               gradient_checkpointing=hp.gradient_checkpointing)
            self.policy, self.tokenizer = start.policy, start.tokenizer
            self.model_sha256 = start.start_sha256  # what a resume must start from
            self.policy.train()

    def training_setup(self) -> dict[str, str]:
        """What a checkpoint of this module must be resumed with: ``model`` (path, dtype and the first 16 hex digits
        of ``utils.hashing.hash_state_dict`` of the starting weights as ``models.loading.load_policy`` loads them, for
        messages), ``model_sha256`` and ``lora`` (the LoRA settings)."""
        hp = self.hparams
        return {"model": f"{hp.model_name_or_path} ({hp.dtype} weights, sha256 {self.model_sha256})",
                "model_sha256": str(self.model_sha256), "lora": repr(self.lora_config)}

    def rollout_policy(self):
        """``(policy, tokenizer)``: what the data module plays validation episodes with."""
        return self.policy, self.tokenizer

    def _loss(self, batch: dict) -> torch.Tensor:
        return generated_nll(self.policy, batch["input_ids"], batch["attention_mask"], batch["gen_mask"])

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        n = batch["input_ids"].shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=n, sync_dist=True)
        self.log("train/reply_tokens", batch["gen_mask"].sum(), reduce_fx="sum", batch_size=1, sync_dist=True)
        # the loss under the phase's own name (train/drills_loss, train/demos_loss), written only at the steps of that
        # phase (self.log would repeat the last value at every later step)
        phase_loss = self.trainer.strategy.reduce(loss.detach(), reduce_op="mean")
        if self.logger is not None and self.trainer.is_global_zero:
            self.logger.log_metrics({f"train/{batch['phase']}_loss": float(phase_loss)}, step=self.global_step)
        return loss

    # ------------------------------------------------------------------------------------------------ validation
    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        # metric objects, logged as such: they reduce over every rank's examples and episodes (weighted by count,
        # not averaged per rank) when the validation ends
        if "trajectories" in batch:
            trajectories = batch["trajectories"]
            n = len(trajectories)
            self.val_success.update(torch.tensor([float(t.success) for t in trajectories]))
            self.val_score.update(torch.tensor([100.0 * t.score for t in trajectories]))
            self.val_invalid.update(torch.tensor([float(turn.action is None) for t in trajectories
                                                  for turn in t.turns]))
            for name, metric in (("success_rate", self.val_success), ("score", self.val_score),
                                 ("invalid_reply_rate", self.val_invalid)):
                self.log(f"val/{name}", metric, on_epoch=True, batch_size=n, add_dataloader_idx=False,
                         prog_bar=name == "success_rate")
        elif "drill_checks" in batch:
            self._copy_accuracy(batch["drill_checks"])
        else:
            n = batch["input_ids"].shape[0]
            self.val_loss.update(self._loss(batch), weight=n)
            self.log("val/loss", self.val_loss, on_epoch=True, batch_size=n, add_dataloader_idx=False, prog_bar=True)

    @torch.no_grad()
    def _copy_accuracy(self, checks: dict[str, list[dict]]) -> None:
        """Exact-copy accuracy of greedy replies on held-out drills, per page kind (``val/copy_<kind>``)."""
        device = next(self.policy.parameters()).device
        for kind, drills in checks.items():
            correct = 0
            for drill in drills:
                first = drill["gen_mask"].index(1)
                prompt = torch.tensor([drill["input_ids"][:first]], device=device)
                target = drill["input_ids"][first:]
                out = self.policy.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(target),
                                           do_sample=False, pad_token_id=self.tokenizer.pad_token_id)
                correct += out[0, first:].tolist() == target
            self.log(f"val/copy_{kind}", correct / len(drills), add_dataloader_idx=False, sync_dist=True,
                     batch_size=len(drills))

    # ------------------------------------------------------------------------------------------------ optimizer
    def configure_optimizers(self):
        trained = [p for p in self.policy.parameters() if p.requires_grad]  # with LoRA, the adapter's only
        decay = [p for p in trained if p.ndim >= 2]
        no_decay = [p for p in trained if p.ndim < 2]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": self.hparams.weight_decay},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=self.hparams.learning_rate)
        total = self.total_steps()
        warmup = min(self.hparams.warmup_steps, total // 2)
        stable = max(0, min(self.hparams.constant_steps, total - 1) - warmup)
        scheduler = get_wsd_schedule(optimizer, num_warmup_steps=warmup, num_stable_steps=stable,
                                     num_decay_steps=total - warmup - stable, decay_type="cosine")
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def total_steps(self) -> int:
        """Optimizer steps in the whole run, for the schedule: ``max_epochs`` courses (``datamodule.course_length()``
        batches each) over ``accumulate_grad_batches``, or ``trainer.max_steps`` if that ends the run first.

        Not ``trainer.estimated_stepping_batches``: that builds the train loader before a checkpoint's loader state is
        restored, so a resumed run would restart its course from batch 0 (Lightning-AI/pytorch-lightning#20550).

        Raises:
            ValueError: neither ``trainer.max_epochs`` nor ``trainer.max_steps`` is set."""
        trainer = self.trainer
        limits = []
        if trainer.max_steps > 0:
            limits.append(trainer.max_steps)
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            limits.append(trainer.max_epochs * trainer.datamodule.course_length() // trainer.accumulate_grad_batches)
        if not limits:
            raise ValueError("an SFT run needs trainer.max_epochs or trainer.max_steps for its learning-rate schedule")
        return max(1, min(limits))

    def on_fit_end(self) -> None:
        if self.hparams.export_dir and self.trainer.is_global_zero:
            path = export_policy(self.policy, self.tokenizer, self.hparams.export_dir, self.hparams.export_dtype)
            log.info("exported the fine-tuned policy to %s", path)
