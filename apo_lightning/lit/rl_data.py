"""The RL data module: goals, splits, V* (A*-PO stage 1) and the stream of fresh trajectories (stage 2).

Stage 1 (``setup``, once, cached; under DDP every rank samples its share of the goals): for each training goal,
N trajectories from the frozen reference policy and ``V*(x) = β1 · (logsumexp_i(r_i/β1) − log N)`` (Brantley et
al. 2025, §3), stored under ``data/vstar`` with a key covering the reference weights, goals, N, β1, sampling, env,
reward and prompt settings.

Stage 2 (``train_dataloader``): an ``IterableDataset`` that, for each batch, picks this rank's next goals and asks
the LightningModule's *current* policy for fresh trajectories (the pattern of Lightning's PPO example). Which goals
and which sampling seed a batch uses are pure functions of (seed, rank, batch number), and the batch number is
part of the checkpoint, so a resumed run continues exactly. Every rank yields the same number of batches.
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, IterableDataset

from ..agent.chat import ChatFormat
from ..agent.evaluate import rollout_goals
from ..agent.policy import load_policy, resolve_device
from ..agent.rollout import RolloutEngine, derive_seed
from ..agent.tiny import TinyPolicySpec
from ..apo.vstar import VStarCache, VStarTable, hash_state_dict
from .common import EnvConfig, chat_dict, ensure_policy

log = logging.getLogger(__name__)


@dataclass
class VStarConfig:
    """Stage-1 settings.

    Args:
        num_samples: N reference trajectories per goal (paper default 8).
        beta1: the V* temperature β1 (paper default 0.5); small → max reward, large → mean reward.
        temperature: sampling temperature of the reference rollouts.
        batch_size: episodes per rollout batch.
        drop_all_zero: train only on goals where some reference sample scored above 0.
        refresh_every: re-estimate V* with the current policy every K training batches (0 = never).
        cache_dir: where V* tables are cached.
        device: where the stage-1 rollouts run: "auto" (CUDA when available, else CPU), "cpu" or "cuda". Not a
            part of the cache key: samples drawn on either device estimate the same V*.
    """

    num_samples: int = 8
    beta1: float = 0.5
    temperature: float = 1.0
    batch_size: int = 32
    drop_all_zero: bool = False
    refresh_every: int = 0
    cache_dir: str = "data/vstar"
    device: str = "auto"


class RolloutStream(IterableDataset):
    """Yields collated batches of fresh trajectories, calling back into the LightningModule for each batch."""

    def __init__(self, data: "WebShopRLDataModule"):
        self.data = data

    def __iter__(self) -> Iterator[dict]:
        data = self.data
        module = data.trainer.lightning_module
        remaining = data.steps_per_epoch - data.cursor % data.steps_per_epoch
        for _ in range(remaining):
            batch_number = data.cursor
            goals = data.goals_for_batch(batch_number)
            seed = derive_seed(data.env.seed, data.rank, batch_number, "train")
            batch = module.collect_rollouts(goals, seed, data)
            data.cursor += 1
            yield batch


class _GoalChunks(IterableDataset):
    """Evaluation: this rank's goals in chunks (each chunk is one rollout batch)."""

    def __init__(self, goals: list[int], chunk: int):
        self.goals, self.chunk = goals, chunk

    def __iter__(self) -> Iterator[list[int]]:
        for start in range(0, len(self.goals), self.chunk):
            yield self.goals[start:start + self.chunk]

    def __len__(self) -> int:
        return (len(self.goals) + self.chunk - 1) // self.chunk


class WebShopRLDataModule(LightningDataModule):
    """Goals, splits, V* and the rollout stream for A*-PO / GRPO training on WebShop.

    Args:
        env: WebShop data and episode settings.
        chat: the prompt format.
        model_name_or_path: π_ref, the frozen reference policy, which is also where the policy starts (linked from
            the module's ``model_name_or_path``).
        tiny: build a fresh tiny policy into ``model_name_or_path`` if it is missing (smoke tests only; a real run
            starts from an SFT-warm-started reference).
        batch_size: goals per training batch per process (one rollout each for A*-PO; GRPO repeats them).
        train_goals: use the first N training goals (0 = all); stage 1 runs on exactly these.
        steps_per_epoch: training batches per epoch (validation runs at epoch ends).
        val_goals: validation goals rolled out greedily each validation (first N of the val split; 0 = all).
        test_goals: test goals for ``cli.py test`` (first N of the test split; 0 = all).
        eval_batch_size: episodes per evaluation rollout batch.
        max_new_tokens: reply token limit (linked from the module).
        vstar: stage-1 settings.
    """

    def __init__(self, env: EnvConfig = EnvConfig(), chat: ChatFormat = ChatFormat(),
                 model_name_or_path: str = "data/models/tiny-sft", tiny: TinyPolicySpec | None = None,
                 batch_size: int = 16, train_goals: int = 0, steps_per_epoch: int = 50, val_goals: int = 64,
                 test_goals: int = 0, eval_batch_size: int = 32, max_new_tokens: int = 64,
                 vstar: VStarConfig = VStarConfig()):
        super().__init__()
        if batch_size < 1 or steps_per_epoch < 1:
            raise ValueError("batch_size and steps_per_epoch must be >= 1")
        self.env = env
        self.chat = chat
        self.reference_model = model_name_or_path
        self.tiny = tiny
        self.batch_size = batch_size
        self.train_goals = train_goals
        self.steps_per_epoch = steps_per_epoch
        self.val_goals = val_goals
        self.test_goals = test_goals
        self.eval_batch_size = eval_batch_size
        self.max_new_tokens = max_new_tokens
        self.vstar = vstar
        self.cursor = 0  # training batches produced so far on this rank (checkpointed)
        self.v_star: VStarTable | None = None
        self.goal_pool: list[int] = []

    # ------------------------------------------------------------------------------------------------ ranks
    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    # ------------------------------------------------------------------------------------------------ stage 1
    def pool(self) -> list[int]:
        """The training goals stage 1 covers: the first ``train_goals`` of the train split."""
        goals = self.env.split("train")
        return goals[: self.train_goals] if self.train_goals else goals

    def vstar_key_parts(self, reference_hash: str) -> dict:
        """Everything the stage-1 reward samples depend on (the cache key).

        β1 is deliberately not a part: the cache stores the N rewards per goal and V* is recomputed from them
        (exactly, in microseconds) for whatever β1 a run asks for, so changing β1 never re-samples.
        """
        shop = self.env.shop()
        return {
            "reference": reference_hash,
            "goals": self.pool(),
            "data": str(shop.data_dir.resolve()),
            "goal_kind": self.env.goals,
            "goal_seed": self.env.seed,
            "env": asdict(self.env),
            "chat": chat_dict(self.chat),
            "num_samples": self.vstar.num_samples,
            "temperature": self.vstar.temperature,
            "max_new_tokens": self.max_new_tokens,
            "version": 1,
        }

    def sample_rewards(self, model, tokenizer, goals: list[int], seed_tag: str) -> dict[str, list[float]]:
        """N sampled trajectory rewards per goal under ``model`` (the reference, or the current policy on refresh)."""
        engine = RolloutEngine(model, tokenizer, self.chat, max_new_tokens=self.max_new_tokens,
                               temperature=self.vstar.temperature)
        repeated = [g for g in goals for _ in range(self.vstar.num_samples)]
        trajectories = rollout_goals(engine, self.env.shop(), repeated, self.vstar.batch_size,
                                     seed=derive_seed(self.env.seed, seed_tag),
                                     observation_mode=self.env.observation_mode,
                                     max_steps=self.env.max_steps, progress=self.rank == 0)
        rewards: dict[str, list[float]] = {str(g): [] for g in goals}
        for t in trajectories:
            rewards[str(t.goal_index)].append(t.reward)
        return rewards

    @property
    def needs_v_star(self) -> bool:
        """Stage 1 runs when fitting A*-PO (GRPO, validate and test need no V*)."""
        if self.trainer is None:
            return True
        fitting = self.trainer.state.fn == "fit"
        return fitting and self.trainer.lightning_module.hparams.get("algorithm", "apo") == "apo"

    def prepare_data(self) -> None:
        """Once per machine: build the tiny policy if the config asks for one and it is missing."""
        ensure_policy(self.reference_model, self.tiny, self.env, self.chat)

    def _stage1_device(self) -> str:
        """Where this rank's stage-1 rollouts run: ``vstar.device``, on this rank's own GPU under a trainer."""
        device = resolve_device(self.vstar.device)
        root = self.trainer.strategy.root_device if self.trainer is not None else None
        return str(root) if root is not None and root.type == device else device

    def _load_vstar(self) -> VStarTable:
        """Stage 1: the V* table from the cache, or sampled with π_ref (every rank its share of the goals) and saved.

        All ranks look the key up before any of them samples, and sampling ends in a collective, so they agree
        on hit or miss; every rank then holds the whole table.
        """
        model, tokenizer = load_policy(self.reference_model)
        key_parts = self.vstar_key_parts(hash_state_dict(model.state_dict()))

        def compute_fn() -> dict[str, list[float]]:
            model.to(self._stage1_device())
            return self.sample_rewards_shared(model, tokenizer, self.pool(), "vstar")

        return VStarCache(self.vstar.cache_dir).get_or_compute(key_parts, compute_fn, self.vstar.beta1)

    def sample_rewards_shared(self, model, tokenizer, goals: list[int], seed_tag: str) -> dict[str, list[float]]:
        """``sample_rewards`` over ``goals`` with the work split across ranks: each rank samples every
        ``world_size``-th goal with its own seed, and the parts are gathered so that every rank returns all of them.
        A single process samples exactly as ``sample_rewards(..., seed_tag)``."""
        if self.world_size == 1:
            return self.sample_rewards(model, tokenizer, goals, seed_tag)
        share = goals[self.rank::self.world_size]
        rewards = self.sample_rewards(model, tokenizer, share, f"{seed_tag}-rank{self.rank}")
        gathered: list = [None] * self.world_size
        torch.distributed.all_gather_object(gathered, rewards)
        return {goal: samples for part in gathered for goal, samples in part.items()}

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", None):
            pool = self.pool()
            self.v_star = self._load_vstar() if self.needs_v_star else None
            if self.vstar.drop_all_zero and self.v_star is not None:
                dropped = {int(g) for g in self.v_star.drop_all_zero()}
                pool = [g for g in pool if g not in dropped]
                log.info("drop_all_zero: %d of %d goals kept", len(pool), len(self.pool()))
            if len(pool) < self.world_size:
                raise ValueError(f"{len(pool)} training goals cannot be shared by {self.world_size} processes")
            self.goal_pool = pool

    def refresh_v_star(self, model, tokenizer) -> None:
        """Re-estimate V* for the goal pool with ``model`` (the current policy); every rank computes its share."""
        rewards = self.sample_rewards_shared(model, tokenizer, self.goal_pool, f"refresh-{self.cursor}")
        self.v_star = VStarTable.from_rewards(f"refresh-{self.cursor}", rewards, self.vstar.beta1)

    # ------------------------------------------------------------------------------------------------ stage 2
    def goals_for_batch(self, batch_number: int) -> list[int]:
        """This rank's goals for training batch ``batch_number``: its shard of the pool, reshuffled every pass."""
        shard = self.goal_pool[self.rank::self.world_size]
        start = batch_number * self.batch_size
        goals = []
        for position in range(start, start + self.batch_size):
            epoch, index = divmod(position, len(shard))
            order = list(shard)
            random.Random(derive_seed(self.env.seed, self.rank, epoch, "order")).shuffle(order)
            goals.append(order[index])
        return goals

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RolloutStream(self), batch_size=None, num_workers=0)

    def _eval_loader(self, split: str, limit: int) -> DataLoader:
        goals = self.env.split(split)
        goals = goals[:limit] if limit else goals
        return DataLoader(_GoalChunks(goals[self.rank::self.world_size], self.eval_batch_size), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val", self.val_goals)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test", self.test_goals)

    # ------------------------------------------------------------------------------------------------ resume
    def state_dict(self) -> dict:
        return {"cursor": self.cursor}

    def load_state_dict(self, state_dict: dict) -> None:
        self.cursor = int(state_dict["cursor"])
