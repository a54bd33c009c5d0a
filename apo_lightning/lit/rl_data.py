"""The RL data module: goals, splits and the batches of fresh trajectories.

The data path is one-way: the data module owns the goals, V* (``stage1``), the sampler (``sampler.Sampler``, built
once and handed the module's policy once) and batch assembly. The module's objective, built once, reaches it as a
linked argument (``lit.cli``), which it asks whether stage 1 runs and how many rollouts a goal gets.

A training step, read top to bottom: ``train_batch`` (this file: goals, ``Sampler.training_trajectories``, reused
stage-1 rows, ``Stage1.v_star``, ``Sampler.collate`` into a :class:`TrainingBatch`), then
``WebShopRLModule.training_step`` (``rl_module``: log π and log π_ref at the generated tokens, packed one row per
trajectory, and the objective's loss).

Stage 1 (once, cached, when ``fit`` first asks for the training batches: the module's π_ref is loaded and on its
device by then): V* of every training goal from N samples of the module's reference policy
(:class:`~apo_lightning.lit.stage1.Stage1`), its sample statistics logged as ``stage1/*``.

Stage 2 (``train_dataloader``): a sized, resumable stream (``streams.StepStream``); batch ``k`` is rolled out when
training step ``k`` asks for it, so with the parameters after ``k`` updates. Its goals and sampling seed are pure
functions of (run seed, rank, k), and ``k`` is saved in every checkpoint, so a resumed run makes the same batches.
Every rank yields the same number of batches. Validation and test batches are greedy trajectories of the current
policy on the split's goals, rolled out as Lightning asks for them.

With ``env.vary_wording`` (training that reads) every training rollout shows its goal's instruction drawn afresh
(``EnvConfig.training_envs``, seeded by run seed, rank and batch number), from the distribution stage 1 sampled V*
under (:class:`~apo_lightning.lit.stage1.Stage1`, the same ``env``); validation and test show ``env.wording``.
"""

from __future__ import annotations

import random
from typing import TypedDict

import torch

from ..apo.objectives import APO, Objective
from ..rollout.chat import ChatFormat
from ..rollout.settings import RolloutSettings
from ..rollout.trajectory import Trajectory
from ..rollout.vllm_backend import VLLMBackend
from ..utils.seeds import derive_seed
from ..utils.settings import check_settings
from ..webshop.settings import EnvConfig, RewardSettings
from .sampler import Sampler
from .settings import WebShopDataModule
from .stage1 import Stage1, VStarConfig
from .streams import ChunkStream, StepStream

__all__ = ["TrainingBatch", "VStarConfig", "WebShopRLDataModule"]


class TrainingBatch(TypedDict):
    """One training batch of this process: B trajectories (the R fresh ones of the current policy, then any reused
    stage-1 ones) in S ≥ B segments (``collate_trajectories``), right-padded to T tokens.

    Keys:
        input_ids, attention_mask: (S, T) int64.
        gen_mask: (S, T) float32, 1 on sampled tokens.
        old_logp: (S, T) float32, the sampler's log π of each sampled token, 0 elsewhere.
        traj_index: (S,) int64, the trajectory each segment belongs to.
        reward: (B,) float32, r(x, y) (``webshop.settings.RewardSettings``).
        score, success: (B,) float32, WebShop's score (0…1) and whether it is 1.
        goal_index: (B,) int64.
        v_star: (B,) float32, V*(x) of each row's goal (stage 1's table; 0 when the objective needs no V*).
        group: (B,) int64, the goal's position in the batch (GRPO's groups); each reused row its own.
        trajectories: the R fresh trajectories (metrics and text samples).
        rollout_seconds: wall time of the fresh rollouts.
        sampled_by: ``rollout.backend`` ("hf" or "vllm").
        batch_number: the batch's number in the run (0, 1, …).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    gen_mask: torch.Tensor
    old_logp: torch.Tensor
    traj_index: torch.Tensor
    reward: torch.Tensor
    score: torch.Tensor
    success: torch.Tensor
    goal_index: torch.Tensor
    v_star: torch.Tensor
    group: torch.Tensor
    trajectories: list[Trajectory]
    rollout_seconds: float
    sampled_by: str
    batch_number: int


class WebShopRLDataModule(WebShopDataModule):
    """Goals, splits, V* and batches of fresh trajectories for RL on WebShop.

    Args:
        env: WebShop data and episode settings.
        chat: the prompt format.
        reward: what a finished episode earns, r(x, y), in stage 1, training, validation and test alike.
        seed: the run seed (linked from ``seed_everything``): goal order, rollout sampling and stage-1 sampling
            derive theirs from it, per rank and purpose. Separate from the catalog seed ``env.seed``.
        objective: the module's objective, as the module built it (linked): whether stage 1 runs and the batches
            carry each row's V* (``needs_v_star``; without, ``v_star`` is 0) and how many trajectories a goal gets
            in a training batch (``rollouts_per_goal``: 1 for A*-PO, G for GRPO).
        batch_size: goals per training batch per process.
        train_goals: use the first N training goals (0 = all); stage 1 runs on exactly these.
        train_goal_indices: train on exactly these goals instead (indices into the catalog's goals, each in the
            train split; ``train_goals`` is then ignored). For small fixed settings such as the learning sanity test.
        steps_per_epoch: training batches per epoch (validation runs at epoch ends).
        val_goals: validation goals rolled out greedily each validation (first N of the val split; 0 = all).
        train_eval_goals: also roll out the first N goals of the training pool greedily at each validation (a
            second validation loader; the module logs ``train_goals/success_rate`` and ``train_goals/score``): what
            the policy learned on the goals it trains on, beside the held-out validation goals; 0 = off.
        test_goals: test goals for ``cli.py test`` (first N of the test split; 0 = all).
        eval_batch_size: episodes per evaluation rollout batch.
        rollout: how training rollouts sample, and the reply token limit and ``valid_clicks`` of every rollout
            (stage 1, training, validation and test).
        vstar: stage-1 settings.

    Raises:
        ValueError: a setting out of range, named as its config key (``batch_size must be >= 1, got 0``), or
            ``vstar.reuse`` set while the objective needs no V*.
    """

    def __init__(self, env: EnvConfig = EnvConfig(), chat: ChatFormat = ChatFormat(),
                 reward: RewardSettings = RewardSettings(), seed: int = 0, objective: Objective = APO(),
                 batch_size: int = 16, train_goals: int = 0,
                 train_goal_indices: list[int] | None = None, steps_per_epoch: int = 50, val_goals: int = 64,
                 train_eval_goals: int = 0, test_goals: int = 0, eval_batch_size: int = 32,
                 rollout: RolloutSettings = RolloutSettings(), vstar: VStarConfig = VStarConfig()):
        super().__init__()
        check_settings("", [("batch_size", batch_size, batch_size >= 1, ">= 1"),
                            ("steps_per_epoch", steps_per_epoch, steps_per_epoch >= 1, ">= 1"),
                            ("eval_batch_size", eval_batch_size, eval_batch_size >= 1, ">= 1"),
                            ("train_goals", train_goals, train_goals >= 0, ">= 0 (0 = all)"),
                            ("val_goals", val_goals, val_goals >= 0, ">= 0 (0 = all)"),
                            ("train_eval_goals", train_eval_goals, train_eval_goals >= 0, ">= 0 (0 = off)"),
                            ("test_goals", test_goals, test_goals >= 0, ">= 0 (0 = all)")])
        if not objective.needs_v_star:  # stage-1 settings that would otherwise be ignored
            check_settings("vstar.", [(name, value, value == off, f"{off!r} when needs_v_star is false (no stage 1)")
                                      for name, value, off in (("reuse", vstar.reuse, 0),)])
        self.env = env
        self.chat = chat
        self.reward = reward
        self.seed = seed
        self.needs_v_star = objective.needs_v_star
        self.rollouts_per_goal = objective.rollouts_per_goal
        self.batch_size = batch_size
        self.train_goals = train_goals
        self.train_goal_indices = list(train_goal_indices) if train_goal_indices else None
        self.steps_per_epoch = steps_per_epoch
        self.val_goals = val_goals
        self.train_eval_goals = train_eval_goals
        self.test_goals = test_goals
        self.eval_batch_size = eval_batch_size
        self.rollout = rollout
        self.vstar = vstar
        self.stage1 = Stage1(vstar, env, chat, reward, rollout, seed)
        self._vllm: VLLMBackend | None = None
        self.sampler: Sampler | None = None  # built on first use (_sampler)
        self.goal_pool: list[int] = []
        self.shard: list[int] = []  # this process's share of the pool (setup)
        self.stream: StepStream | None = None

    # ------------------------------------------------------------------------------------------------ goals
    def pool(self) -> list[int]:
        """The training goals stage 1 covers: ``train_goal_indices`` if given, else the first ``train_goals`` of the
        train split.

        Raises:
            ValueError: a ``train_goal_indices`` entry is not a goal of the train split.
        """
        goals = self.env.split("train")
        if self.train_goal_indices:
            outside = sorted(set(self.train_goal_indices) - set(goals))
            if outside:
                raise ValueError(f"train_goal_indices {outside} are not in the train split "
                                 f"(goal indices {min(goals)}…{max(goals)} of this catalog's split)")
            return list(self.train_goal_indices)
        return goals[: self.train_goals] if self.train_goals else goals

    def setup(self, stage: str | None = None) -> None:
        """For ``fit``: the goal pool stage 2 trains on.

        Raises:
            ValueError: fewer training goals than processes.
        """
        if stage not in ("fit", None):
            return
        pool = self.pool()
        if len(pool) < self.world_size:
            raise ValueError(f"{len(pool)} training goals cannot be shared by {self.world_size} processes")
        self.goal_pool = pool
        self.shard = pool[self.rank::self.world_size]

    def goals_for_batch(self, batch_number: int) -> list[int]:
        """This rank's goals for training batch ``batch_number``: its shard of the pool, reshuffled every pass with
        a seed derived from the run seed."""
        shard = self.shard
        start = batch_number * self.batch_size
        goals = []
        for position in range(start, start + self.batch_size):
            epoch, index = divmod(position, len(shard))
            order = list(shard)
            random.Random(derive_seed(self.seed, "goal-order", self.rank, epoch)).shuffle(order)
            goals.append(order[index])
        return goals

    # ------------------------------------------------------------------------------------------------ stage 2
    def _sampler(self) -> Sampler:
        """The run's sampler: built, and handed the module's policy (``rollout_policy()``) and the Trainer's precision
        context, on first use."""
        if self.sampler is None:
            self.sampler = Sampler(self.env, self.chat, self.reward, self.rollout, self.seed, self.rank, self.backend())
            policy, tokenizer = self.trainer.lightning_module.rollout_policy()
            self.sampler.attach(policy, tokenizer, self.trainer.precision_plugin.forward_context)
        return self.sampler

    def backend(self) -> VLLMBackend | None:
        """This process's vLLM server (``rollout.backend: vllm``; started on its first request, stopped in
        ``teardown``), or None for the "hf" backend."""
        if self.rollout.backend != "vllm":
            return None
        if self._vllm is None:
            start = self.trainer.lightning_module.hparams.model_name_or_path  # π_ref, where the policy starts
            self._vllm = VLLMBackend(self.rollout.vllm, start, self.rank, self.trainer.strategy.root_device.type)
        return self._vllm

    def teardown(self, stage: str | None = None) -> None:
        if self._vllm is not None:
            self._vllm.close()
            self._vllm = None

    def run_stage1(self) -> None:
        """Stage 1 (with ``needs_v_star``, once per process): the V* table of the goal pool, sampled with the
        module's π_ref (``reference_policy``, in its own dtype: outside the Trainer's autocast) or found
        in the cache, and its sample statistics logged as ``stage1/*`` at the current step."""
        if not self.needs_v_star or self.stage1.table is not None:
            return
        module = self.trainer.lightning_module
        self.stage1.load(module.reference_policy, module.tokenizer, module.reference_sha256, self.goal_pool,
                         self.rank, self.world_size, backend=self.backend())
        if self.trainer.logger is not None and self.trainer.is_global_zero:
            self.trainer.logger.log_metrics({f"stage1/{k}": v for k, v in self.stage1.statistics.items()},
                                            step=self.trainer.global_step)

    def train_batch(self, batch_number: int) -> TrainingBatch:
        """Training batch ``batch_number``: ``rollouts_per_goal`` fresh trajectories of the current policy for each
        of this rank's goals, then ``vstar.reuse`` stage-1 reference trajectories (``Stage1.reused``), collated
        (``rollout.collate.collate_trajectories``; rows in that order), with each row's V* and group."""
        goals = self.goals_for_batch(batch_number)
        sampler = self._sampler()
        trajectories, seconds = sampler.training_trajectories([g for g in goals for _ in range(self.rollouts_per_goal)],
                                                              batch_number, self.trainer.global_step)
        reused = self.stage1.reused(self.shard, sampler.rank, batch_number)
        rows = [t.goal_index for t in trajectories + reused]
        return TrainingBatch(
            **sampler.collate(trajectories + reused),
            v_star=self.stage1.v_star(rows) if self.needs_v_star else torch.zeros(len(rows)),
            group=torch.cat([torch.arange(len(goals)).repeat_interleave(self.rollouts_per_goal),
                             len(goals) + torch.arange(len(reused))]),
            trajectories=trajectories, rollout_seconds=seconds, sampled_by=self.rollout.backend,
            batch_number=batch_number)

    def train_dataloader(self) -> StepStream:
        """The training batches (``train_batch``), after stage 1 (``run_stage1``)."""
        self.run_stage1()
        if self.stream is None:  # one stream per run: its cursor is the run's position
            self.stream = StepStream(self.steps_per_epoch, self.train_batch)
        return self.stream

    # ------------------------------------------------------------------------------------------------ evaluation
    def eval_batch(self, goals: list[int]) -> dict:
        """Greedy trajectories of the current policy on ``goals``: ``{"trajectories": [...]}``."""
        return {"trajectories": self._sampler().greedy_trajectories(goals, self.trainer.global_step)}

    def _eval_loader(self, goals: list[int], limit: int, setting: str) -> ChunkStream:
        """This rank's share (``goal_share``) of the first ``limit`` of ``goals`` (0 = all).

        Raises:
            SettingError: fewer goals than processes, named by ``setting`` (``goal_share``).
        """
        goals = goals[:limit] if limit else goals
        return ChunkStream(self.goal_share(goals, setting), self.eval_batch_size, self.eval_batch)

    def val_dataloader(self) -> ChunkStream | list[ChunkStream]:
        """The validation goals; with ``train_eval_goals`` also the training pool's first goals (loader 1)."""
        val = self._eval_loader(self.env.split("val"), self.val_goals, "val_goals")
        if not self.train_eval_goals:
            return val
        return [val, self._eval_loader(self.pool(), self.train_eval_goals, "train_eval_goals")]

    def test_dataloader(self) -> ChunkStream:
        return self._eval_loader(self.env.split("test"), self.test_goals, "test_goals")
