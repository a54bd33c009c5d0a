"""A*-PO stage 1 for the RL data module: V* of the training goals from N samples of the frozen reference policy.

``V*(x) = β1 · (logsumexp_i(r_i/β1) − log N)`` over N sampled rewards per goal (Brantley et al. 2025, §3; the
estimator, table and cache are ``apo.vstar``'s). The N rewards are cached under ``vstar.cache_dir`` with a key
covering the reference weights, goals, N, sampling, run seed, env, reward and prompt settings, so a run or a resume
with the same settings samples nothing. Under DDP every rank samples its share of the goals (every
``world_size``-th) with its own seed, and the parts are gathered so that every rank holds the whole table.

π_ref is the LightningModule's own (``WebShopRLModule.reference_policy``), so the weights the loss compares with are
the weights stage 1 samples, loaded and hashed once. During training, :class:`Stage1` can also hand out stage-1
trajectories as extra regression rows (``reuse``).

With the env's ``vary_wording`` (training that reads), stage 1 samples under the same wording distribution as stage
2: each of a goal's N samples shows its own freshly drawn instruction (``EnvConfig.training_envs``), so V*(x) is the
soft maximum over the goal's instructions and trajectories together, an estimate over the wording distribution,
not of one wording; stage 2 then regresses each rollout, in whatever words it drew, onto that one V*(x).
"""

from __future__ import annotations

import logging
import random
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import torch

from ..apo.vstar import VStarCache, VStarTable
from ..eval.metrics import sample_statistics
from ..rollout.chat import ChatFormat
from ..rollout.engine import rollout_goals
from ..rollout.settings import RolloutSettings
from ..rollout.trajectory import Trajectory, regression_record, regression_trajectory
from ..utils.seeds import derive_seed
from ..utils.settings import check_settings
from ..webshop.settings import EnvConfig, RewardSettings

log = logging.getLogger(__name__)


@dataclass
class VStarConfig:
    """Stage-1 settings (the RL data module's ``vstar``).

    Args:
        num_samples: N reference trajectories per goal (the paper's default 8).
        beta1: the V* temperature β1 (> 0; the paper's default 0.5): small → V* near the best of the N rewards,
            large → near their mean (docs/experiments.md, "Learning sanity setting", measures both).
        temperature: sampling temperature of the reference rollouts (> 0); they sample the whole distribution
            (no nucleus), with the rollouts' ``max_new_tokens`` and ``valid_clicks``.
        batch_size: episodes per stage-1 rollout batch.
        reuse: stage-1 reference trajectories added to every training batch (per process) as extra regression rows
            with their goal's V*; 0 = none (the paper's stage 2: fresh trajectories only). A*-PO's regression target
            ``β2 · log π*(y|x)/π_ref(y|x) = r(x, y) − V*(x)`` holds for every y (Brantley et al. 2025, §3), so
            π_ref's samples are valid rows (docs/experiments.md, "Stage-1 samples reused as regression rows"). They
            are drawn from this process's share of the goal pool, afresh for every batch, and cached beside the V*
            table (``<key>.samples.pt``).
        cache_dir: where V* tables are cached.
    """

    num_samples: int = 8
    beta1: float = 0.5
    temperature: float = 1.0
    batch_size: int = 32
    reuse: int = 0
    cache_dir: str = "data/vstar"

    def __post_init__(self) -> None:
        """Raise ValueError naming the first setting out of range, as ``vstar.<setting>`` (``check_settings``)."""
        check_settings("vstar.", [("num_samples", self.num_samples, self.num_samples >= 1, ">= 1"),
                                  ("beta1", self.beta1, self.beta1 > 0, "> 0"),
                                  ("temperature", self.temperature, self.temperature > 0, "> 0"),
                                  ("batch_size", self.batch_size, self.batch_size >= 1, ">= 1"),
                                  ("reuse", self.reuse, self.reuse >= 0, ">= 0")])


class Stage1:
    """Stage 1 of one run, and the V* table stage 2 looks up.

    Args:
        settings: the stage-1 settings.
        env, chat, reward, rollout: the run's env, prompt format, reward and rollout settings.
        seed: the run seed; each rank and purpose derives its sampling seed from it.

    Attributes:
        table: the V* table; None before :meth:`load`.
        samples: with ``reuse``, the stage-1 trajectories: goal id -> the N records of
            ``rollout.trajectory.regression_record``.
        statistics: the sample statistics of ``table`` (``eval.metrics.sample_statistics``); None before
            :meth:`load`.
    """

    def __init__(self, settings: VStarConfig, env: EnvConfig, chat: ChatFormat, reward: RewardSettings,
                 rollout: RolloutSettings, seed: int):
        self.settings = settings
        self.env = env
        self.chat = chat
        self.reward = reward
        self.rollout = rollout
        self.seed = seed
        self.table: VStarTable | None = None
        self.samples: dict[int, list[dict]] = {}
        self.statistics: dict[str, float] | None = None

    def key_parts(self, reference_hash: str, goals: list[int]) -> dict:
        """Everything the stage-1 rewards of ``goals`` depend on (the cache key's parts).

        β1 is not a part: the cache stores the N rewards per goal, and V* is recomputed from them for the β1 a run
        asks for. The sampler is a part: its backend, and with vLLM its dtype (the "hf" decoder samples π_ref in the
        dtype its weights were loaded in, which ``reference_hash`` covers). The env, prompt and reward settings are
        parts, every one of them (with the env's ``vary_wording`` the draws derive from the run seed, a part).
        """
        return {
            "reference": reference_hash,
            "goals": list(goals),
            "data": str(self.env.shop().data_dir.resolve()),
            "env": self.env.key_parts(),
            "chat": self.chat.key_parts(),
            "reward": self.reward.key_parts(),
            "num_samples": self.settings.num_samples,
            "temperature": self.settings.temperature,
            "max_new_tokens": self.rollout.max_new_tokens,
            "valid_clicks": self.rollout.valid_clicks,
            "backend": self.rollout.backend,
            **({"dtype": self.rollout.vllm.dtype} if self.rollout.backend == "vllm" else {}),
            "seed": self.seed,
        }

    def sample_rewards(self, model, tokenizer, goals: list[int], purpose: str, rank: int = 0, world_size: int = 1,
                       keep: dict[int, list[dict]] | None = None, backend=None) -> dict[int, list[float]]:
        """N sampled trajectory rewards per goal under ``model`` (π_ref).

        Rank ``rank`` samples every ``world_size``-th goal with a seed derived from the run seed, ``purpose`` and
        its rank; the parts are gathered, so every rank returns all goals. With ``keep``, the trajectories are
        gathered into it too, goal id -> the N records of ``rollout.trajectory.regression_record``. With the env's
        ``vary_wording`` every sample shows its own drawn instruction, seeded by (run seed, ``purpose``, rank).
        With ``rollout.backend`` "vllm", ``backend`` (this process's server, holding ``model``'s weights) samples.
        """
        share = goals[rank::world_size]
        # π_ref's own distribution at vstar.temperature
        sampler = replace(self.rollout, temperature=self.settings.temperature, top_p=1.0)
        engine = sampler.engine(model, tokenizer, self.chat, self.reward, backend=backend)
        repeated = [g for g in share for _ in range(self.settings.num_samples)]
        make_envs = (partial(self.env.training_envs, seed=derive_seed(self.seed, purpose, rank, "wording"))
                     if self.env.vary_wording else None)
        trajectories = rollout_goals(engine, self.env.shop(), repeated, self.settings.batch_size,
                                     seed=derive_seed(self.seed, purpose, rank),
                                     observation_mode=self.env.observation_mode, max_steps=self.env.max_steps,
                                     progress=rank == 0, description=f"{purpose} samples (rank 0)",
                                     make_envs=make_envs)
        rewards: dict[int, list[float]] = {g: [] for g in share}
        samples: dict[int, list[dict]] = {g: [] for g in share}
        for t in trajectories:
            rewards[t.goal_index].append(t.reward)
            if keep is not None:
                samples[t.goal_index].append(regression_record(t))
        if world_size > 1:
            gathered: list = [None] * world_size
            torch.distributed.all_gather_object(gathered, (rewards, samples if keep is not None else {}))
            rewards = {goal: r for part, _ in gathered for goal, r in part.items()}
            samples = {goal: s for _, part in gathered for goal, s in part.items()}
        if keep is not None:
            keep.update(samples)
        return rewards

    def load(self, reference_policy: Callable[[], AbstractContextManager], tokenizer, reference_sha256: str,
             goals: list[int], rank: int = 0, world_size: int = 1, backend=None) -> VStarTable:
        """Stage 1: the V* table of ``goals`` from the cache, or sampled with π_ref (every rank its share) and saved.

        All ranks look the key up before any of them samples, and sampling ends in a collective, so they agree on
        hit or miss. With ``reuse``, the stage-1 trajectories are kept as well (``samples``); a cached table
        without them is sampled again (the same seeds give the same rewards).

        Args:
            reference_policy: a context manager factory that yields π_ref as a model to sample from, where it is
                (the module's ``reference_policy``).
            tokenizer: π_ref's tokenizer.
            reference_sha256: the hash of π_ref's weights (the module's ``reference_sha256``, which its checkpoints
                record): a part of the cache key.
            goals: the training goals.
            rank, world_size: this process among the run's.
            backend: with ``rollout.backend`` "vllm", this process's server, which samples π_ref.
        """
        reuse = bool(self.settings.reuse)
        key_parts = self.key_parts(reference_sha256, goals)
        cache = VStarCache(self.settings.cache_dir)
        key = cache.key(key_parts)
        stored = cache.load_samples(key) if reuse else None
        sampled: dict[int, list[dict]] = {}

        def compute_fn() -> dict[int, list[float]]:
            if backend is not None:
                backend.use_reference()
            with reference_policy() as model:
                return self.sample_rewards(model, tokenizer, goals, "stage1", rank, world_size,
                                           keep=sampled if reuse else None, backend=backend)

        table = cache.get_or_compute(key_parts, compute_fn, self.settings.beta1, recompute=reuse and stored is None)
        if reuse:
            if stored is None:
                stored = sampled
                if rank == 0:
                    cache.save_samples(key, stored)
            self.samples = stored
        self.table = table
        self.statistics = sample_statistics(table.rewards)
        log.info("stage 1: %s", ", ".join(f"{k} {v:.4g}" for k, v in self.statistics.items()))
        return table

    def v_star(self, goals: list[int]) -> torch.Tensor:
        """V* of each goal, (B,) float32 (``VStarTable.lookup``).

        Raises:
            RuntimeError: before :meth:`load`.
            KeyError: a goal outside the table.
        """
        if self.table is None:
            raise RuntimeError("V* was asked for before stage 1 ran (Stage1.load)")
        return self.table.lookup(goals)

    def reused(self, shard: list[int], rank: int, batch_number: int) -> list[Trajectory]:
        """``reuse`` stage-1 trajectories for training batch ``batch_number``, drawn without replacement from the
        samples of ``shard`` (this rank's goals) with a seed derived from (run seed, rank, batch number); empty
        without ``reuse``."""
        if not self.settings.reuse:
            return []
        candidates = [(g, record) for g in shard for record in self.samples[g]]
        rng = random.Random(derive_seed(self.seed, "reuse", rank, batch_number))
        chosen = rng.sample(candidates, min(self.settings.reuse, len(candidates)))
        return [regression_trajectory(g, record) for g, record in chosen]
