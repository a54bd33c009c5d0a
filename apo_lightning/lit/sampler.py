"""The sampler of the RL data module: how one process rolls out trajectories of the current policy.

Built once per run (``WebShopRLDataModule.sampler``), it holds the env, the prompt format, the reward, the rollout
settings, the run seed and, with ``rollout.backend: vllm``, the process's vLLM server. The LightningModule hands it
its policy once (:meth:`Sampler.attach`); the policy object stays the same while its parameters train, so every
rollout samples the parameters of the moment. Seeds are pure functions of (run seed, purpose, this process's rank,
batch number), so a resumed run samples the same batches.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import torch

from ..rollout.chat import ChatFormat
from ..rollout.collate import collate_trajectories
from ..rollout.engine import RolloutEngine
from ..rollout.settings import RolloutSettings
from ..rollout.trajectory import Trajectory
from ..rollout.vllm_backend import VLLMBackend
from ..utils.seeds import derive_seed
from ..webshop.settings import EnvConfig, RewardSettings


class Sampler:
    """Training and greedy evaluation rollouts of one policy, on one process.

    Args:
        env, chat, reward, rollout: the run's env, prompt format, reward and rollout settings.
        seed: the run seed.
        rank: this process's rank (every rank samples with seeds of its own).
        backend: with ``rollout.backend`` "vllm", this process's server (synced to the policy before each rollout);
            None for the "hf" decoder.
    """

    def __init__(self, env: EnvConfig, chat: ChatFormat, reward: RewardSettings, rollout: RolloutSettings, seed: int,
                 rank: int, backend: VLLMBackend | None = None):
        self.env, self.chat, self.reward, self.rollout, self.seed, self.rank = env, chat, reward, rollout, seed, rank
        self.backend = backend
        self.policy: torch.nn.Module | None = None
        self.tokenizer = None
        self._context: Callable[[], AbstractContextManager] = nullcontext
        self._sampling: RolloutEngine | None = None
        self._greedy: RolloutEngine | None = None

    def attach(self, policy: torch.nn.Module, tokenizer, context: Callable[[], AbstractContextManager] = nullcontext
               ) -> None:
        """Sample ``policy`` from now on (once per run: the module's policy, whose parameters train in place), each
        rollout inside ``context()`` (the Trainer's precision, e.g. bfloat16 autocast)."""
        self.policy, self.tokenizer, self._context = policy, tokenizer, context
        self._sampling = self.rollout.engine(policy, tokenizer, self.chat, self.reward, backend=self.backend)
        self._greedy = self.rollout.engine(policy, tokenizer, self.chat, self.reward, greedy=True,
                                           backend=self.backend)

    def training_trajectories(self, goals: list[int], batch_number: int, step: int) -> tuple[list[Trajectory], float]:
        """One sampled trajectory per entry of ``goals`` (repeat a goal for several), in order, and the seconds
        they took. With the env's ``vary_wording`` each episode shows its goal's instruction drawn afresh.

        Args:
            goals: the goals, one per trajectory.
            batch_number: the training batch (seeds).
            step: the optimizer step the policy is at (the vLLM server's weight version).
        """
        self._sync(step)
        start = time.perf_counter()
        with self._context():
            envs = self.env.training_envs(goals, seed=derive_seed(self.seed, "wording", self.rank, batch_number))
            trajectories = self._sampling.rollout(envs, goals,
                                                  seed=derive_seed(self.seed, "rollout", self.rank, batch_number))
        return trajectories, time.perf_counter() - start

    def greedy_trajectories(self, goals: list[int], step: int) -> list[Trajectory]:
        """One greedy trajectory per goal, in order, showing the env's own wording (validation and test)."""
        self._sync(step)
        with self._context():
            return self._greedy.rollout(self.env.envs(len(goals)), goals, seed=0)

    def collate(self, trajectories: list[Trajectory]) -> dict[str, torch.Tensor]:
        """``rollout.collate.collate_trajectories`` with the policy's pad token."""
        return collate_trajectories(trajectories, self.tokenizer.pad_token_id)

    def _sync(self, step: int) -> None:
        """With vLLM: the server's weights to the policy's (once per optimizer step)."""
        if self.backend is not None:
            self.backend.sync(self.policy, step)
