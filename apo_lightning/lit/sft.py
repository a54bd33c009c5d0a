"""Supervised warm-start on oracle demonstrations: the data module and the module (the WebShop paper's IL stage).

    python cli.py fit --config configs/sft_tiny.yaml

The data module builds (once, cached under ``data/sft``) oracle demonstrations on training goals, rendered and
tokenized by the same rollout engine that RL samples with, so the token layout is identical. The module trains
the policy with next-token cross-entropy on the reply tokens only, watches greedy success on validation goals,
and exports the result as a Hugging Face model directory that serves as π_ref.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, get_cosine_schedule_with_warmup
from transformers.trainer_pt_utils import LengthGroupedSampler

from ..agent.chat import ChatFormat
from ..agent.demonstrations import oracle_demonstrations
from ..agent.evaluate import rollout_goals, trajectory_metrics
from ..agent.logprobs import generated_nll
from ..agent.policy import load_policy
from ..agent.rollout import RolloutEngine, pad_batch
from ..agent.tiny import TinyPolicySpec
from .common import EnvConfig, atomic_torch_save, chat_dict, ensure_policy, export_policy, files_fingerprint, fingerprint

log = logging.getLogger(__name__)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


class SFTDataModule(LightningDataModule):
    """Oracle demonstrations in the chat format.

    Args:
        env: WebShop data and episode settings.
        chat: the prompt format (must match the one RL uses later).
        model_name_or_path: the policy to fine-tune (its tokenizer tokenizes the demonstrations).
        tiny: build the tiny default policy into ``model_name_or_path`` when it does not exist (None: it must).
        num_demos: demonstrations from the first training goals (only successful ones are kept).
        num_val_demos: demonstrations from validation goals, for the validation loss.
        batch_size: sequences per optimizer step (per process).
        max_new_tokens: reply token limit, as in RL (a longer oracle reply would be cut there).
        cache_dir: where tokenized demonstrations are cached, keyed by everything they depend on.
    """

    def __init__(self, env: EnvConfig = EnvConfig(), chat: ChatFormat = ChatFormat(),
                 model_name_or_path: str = "data/models/tiny-init", tiny: TinyPolicySpec | None = None,
                 num_demos: int = 2000, num_val_demos: int = 64, batch_size: int = 4, max_new_tokens: int = 64,
                 cache_dir: str = "data/sft"):
        super().__init__()
        self.env = env
        self.chat = chat
        self.model_name_or_path = model_name_or_path
        self.tiny = tiny
        self.num_demos = num_demos
        self.num_val_demos = num_val_demos
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.cache_dir = Path(cache_dir)
        self.train_examples: list[dict] = []
        self.val_examples: list[dict] = []

    def _cache_path(self) -> Path:
        key = fingerprint(str(self.env.shop().data_dir.resolve()), self.env.goals, self.env.seed,
                          self.env.split_scheme, self.env.observation_mode, self.env.max_steps, chat_dict(self.chat),
                          self.num_demos, self.num_val_demos, self.max_new_tokens,
                          files_fingerprint(self.model_name_or_path, TOKENIZER_FILES), "oracle-v2")
        return self.cache_dir / f"demos-{key}.pt"

    def prepare_data(self) -> None:
        """Build the policy (tiny) and the demonstrations once (rank 0)."""
        ensure_policy(self.model_name_or_path, self.tiny, self.env, self.chat)
        path = self._cache_path()
        if path.exists():
            return
        tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path)
        engine = RolloutEngine(_NoModel(), tokenizer, self.chat, max_new_tokens=self.max_new_tokens)
        envs = self.env.envs(64)
        data = {}
        for name, goals in (("train", self.env.split("train")[: self.num_demos]),
                            ("val", self.env.split("val")[: self.num_val_demos])):
            demos = oracle_demonstrations(engine, envs, goals)
            data[name] = [{"input_ids": s.token_ids, "gen_mask": s.gen_mask, "goal_index": t.goal_index}
                          for t in demos for s in t.segments]
            log.info("%d %s demonstrations from %d goals", len(demos), name, len(goals))
        atomic_torch_save(data, path)

    def setup(self, stage: str | None = None) -> None:
        data = torch.load(self._cache_path(), weights_only=False)
        self.train_examples, self.val_examples = data["train"], data["val"]
        self.pad_id = AutoTokenizer.from_pretrained(self.model_name_or_path).pad_token_id

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(self.env.seed)
        sampler = LengthGroupedSampler(self.batch_size, lengths=[len(e["input_ids"]) for e in self.train_examples],
                                       generator=generator)
        return DataLoader(self.train_examples, batch_size=self.batch_size, sampler=sampler,
                          collate_fn=lambda b: pad_batch(b, self.pad_id))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_examples, batch_size=self.batch_size, collate_fn=lambda b: pad_batch(b, self.pad_id))


class _NoModel:
    """Stands in for the model when the engine only renders demonstrations (it is never called)."""

    training = False
    generation_config = None

    def eval(self) -> None:
        pass


class SFTModule(LightningModule):
    """Supervised fine-tuning of a policy on demonstrations (cross-entropy on reply tokens only).

    Args:
        model_name_or_path: the policy to start from (a model directory, hub id or 'smollm2-135m-instruct').
        export_dir: where the fine-tuned policy is saved as a model directory at the end of ``fit`` (π_ref).
        learning_rate: AdamW peak learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear warm-up steps before the cosine decay.
        dtype: policy weights dtype ("float32" | "bfloat16"); use the Trainer's precision for mixed precision.
        eval_goals: validation goals rolled out greedily after each validation epoch (val/success_rate,
            val/score); 0 turns this off.
        eval_batch_size: episodes per rollout batch in that evaluation.
        max_new_tokens: reply token limit in that evaluation.
    """

    def __init__(self, model_name_or_path: str = "data/models/tiny-init", export_dir: str | None = "data/models/tiny-sft",
                 learning_rate: float = 2e-3, weight_decay: float = 0.01, warmup_steps: int = 20,
                 dtype: str = "float32", eval_goals: int = 32, eval_batch_size: int = 32, max_new_tokens: int = 64):
        super().__init__()
        self.save_hyperparameters()
        self.policy = None
        self.tokenizer = None

    def configure_model(self) -> None:
        if self.policy is None:
            self.policy, self.tokenizer = load_policy(self.hparams.model_name_or_path, dtype=self.hparams.dtype)
            self.policy.train()

    def _loss(self, batch: dict) -> torch.Tensor:
        return generated_nll(self.policy, batch["input_ids"], batch["attention_mask"], batch["gen_mask"])

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        tokens = batch["gen_mask"].sum()
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        self.log("train/reply_tokens", tokens, reduce_fx="sum", batch_size=1)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch), prog_bar=True, sync_dist=True, batch_size=batch["input_ids"].shape[0])

    def on_validation_epoch_end(self) -> None:
        if not self.hparams.eval_goals or self.trainer.sanity_checking:
            return
        data: SFTDataModule = self.trainer.datamodule
        goals = data.env.split("val")[: self.hparams.eval_goals]
        goals = goals[self.global_rank::self.trainer.world_size]
        engine = RolloutEngine(self.policy, self.tokenizer, data.chat, max_new_tokens=self.hparams.max_new_tokens,
                               greedy=True)
        metrics = trajectory_metrics(rollout_goals(engine, data.env.shop(), goals, self.hparams.eval_batch_size,
                                                   observation_mode=data.env.observation_mode,
                                                   max_steps=data.env.max_steps))
        for name in ("success_rate", "score", "avg_turns", "invalid_reply_rate"):
            self.log(f"val/{name}", metrics[name], sync_dist=True, prog_bar=name == "success_rate")

    def configure_optimizers(self):
        decay = [p for n, p in self.policy.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.policy.named_parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": self.hparams.weight_decay},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=self.hparams.learning_rate)
        total = max(1, self.trainer.estimated_stepping_batches)
        scheduler = get_cosine_schedule_with_warmup(optimizer, min(self.hparams.warmup_steps, total // 2), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_fit_end(self) -> None:
        if self.hparams.export_dir and self.trainer.is_global_zero:
            path = export_policy(self.policy, self.tokenizer, self.hparams.export_dir)
            log.info("exported the fine-tuned policy to %s", path)
