"""The RL data module: goals, splits, V* (A*-PO stage 1 and its refresh) and the batches of fresh trajectories.

The data path is one-way: the data module owns the goals, V* and batch assembly, and asks the LightningModule only
for its current policy (``rollout_policy()``). Which objective trains, and so whether V* is needed and how many
rollouts a goal gets, reaches it as linked arguments (``lit.cli``), not by reading the module.

Stage 1 (``setup``, once, cached; under DDP every rank samples its share of the goals with its own seed): for each
training goal, N trajectories from the frozen reference policy and ``V*(x) = β1 · (logsumexp_i(r_i/β1) − log N)``
(Brantley et al. 2025, §3), stored under ``data/vstar`` with a key covering the reference weights, goals, N,
sampling, run seed, env, reward and prompt settings.

Stage 2 (``train_dataloader``): a sized, resumable stream (``streams.StepStream``); batch ``k`` is rolled out when
training step ``k`` asks for it, so with the parameters after ``k`` updates. Its goals and sampling seed are pure
functions of (run seed, rank, k), and ``k`` is saved in every checkpoint, so a resumed run makes the same batches.
Every rank yields the same number of batches. Validation and test batches are greedy trajectories of the current
policy on the split's goals, rolled out as Lightning asks for them.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import asdict, dataclass
from typing import Literal, get_args

import torch

from ..apo.objectives import OBJECTIVES, Algorithm
from ..apo.vstar import VStarCache, VStarTable
from ..eval.metrics import sample_statistics
from ..models.loading import load_policy, resolve_device
from ..models.tiny import TinyPolicySpec
from ..rollout.chat import ChatFormat
from ..rollout.collate import collate_trajectories, pad_batch
from ..rollout.engine import RolloutEngine, rollout_goals
from ..rollout.relabel import OptionRelabeler
from ..rollout.trajectory import Trajectory, regression_record, regression_trajectory
from ..utils.hashing import hash_state_dict
from ..utils.seeds import derive_seed
from .demos import demonstration_cache, load_demonstrations
from .settings import EnvConfig, RolloutSettings, WebShopDataModule, ensure_policy
from .streams import ChunkStream, StepStream

log = logging.getLogger(__name__)

AnchorGoals = Literal["pool", "train"]  # whose demonstrations the anchor draws from (WebShopRLDataModule)


@dataclass
class VStarConfig:
    """Stage-1 settings.

    Args:
        num_samples: N reference trajectories per goal (paper default 8).
        beta1: the V* temperature β1 (paper default 0.5); small → max reward, large → mean reward. Measured
            (docs/experiments.md, issue 15): at the paper's 0.5, V* sits near the best of the N samples, above the
            policy's mean reward, so most advantages r − V* are negative and each step pushes down what was sampled;
            on the quick start's reference this learned a third as fast as GRPO per trajectory at lr 1e-4 and ran
            away (KL 951 nats, validation 7 %) from the real-data reference at lr 1e-4. β1 100 (V* ≈ the samples'
            mean) with the success reward learned as fast as GRPO (+13.5 against +14.0 points in 960 trajectories).
        temperature: sampling temperature of the reference rollouts.
        top_p: nucleus sampling mass of the reference rollouts (1.0 = off). Equal to the training rollouts'
            ``RolloutSettings.top_p``, V* estimates π_ref's value under stage 2's sampler; measured in the learning
            sanity setting (``tests/test_learning.py``), that higher V* made one of six goals collapse at both run seeds
            tried, where stage 1 at plain temperature 1 learned every goal.
        batch_size: episodes per rollout batch.
        goal_filter: which of the stage-1 goals stage 2 trains on: "all"; "nonzero", those where some reference
            sample earned a reward above 0 (the A*-PO authors drop the rest); "informative", those whose N rewards
            are not all equal (RAGEN's StarPO-S keeps the high-variance prompts). Measured on the real 1k data with
            the two-hour recipe (``configs/webshop_1k_2h.yaml``, run seed 0): "nonzero" drops 27.6 % of 1,024 goals
            and gains +2.4 points on the test against +4.4 for "all" (docs/experiments.md, "Thirteenth session").
        refresh_every: re-estimate V* with the current policy every K training batches (0 = never).
        reuse: stage-1 reference trajectories added to every training batch (per process) as extra regression rows,
            0 = none (the paper's stage 2: fresh trajectories only). A*-PO's regression target holds for a
            trajectory from any policy that covers it: π* satisfies ``β2 · log π*(y|x)/π_ref(y|x) = r(x, y) −
            V*(x)`` for every y (Brantley et al. 2025, §3), so π_ref's stage-1 samples, already paid for, are
            valid rows. They are drawn from this process's share of the goal pool, afresh for every batch (a pure
            function of the run seed, rank and batch number), and kept beside the V* table
            (``<key>.samples.pt``). Only for objectives that use V*. They also keep stage 2 stable: on π_ref's
            samples the mean log-ratio is −KL(π_ref‖π) ≤ 0, the sign the policy's own rows lack (8 per process kept 192
            quick-start steps below 0.7 nats, where without them the KL passed 3 nats at step 104;
            docs/experiments.md).
        cache_dir: where V* tables are cached.
        device: where the stage-1 rollouts run: "auto" (CUDA when available, else CPU), "cpu" or "cuda". Not a
            part of the cache key: samples drawn on either device estimate the same V*.
    """

    num_samples: int = 8
    beta1: float = 0.5
    temperature: float = 1.0
    top_p: float = 1.0
    batch_size: int = 32
    goal_filter: Literal["all", "nonzero", "informative"] = "all"
    refresh_every: int = 0
    reuse: int = 0
    cache_dir: str = "data/vstar"
    device: str = "auto"


class WebShopRLDataModule(WebShopDataModule):
    """Goals, splits, V* and batches of fresh trajectories for RL on WebShop.

    Args:
        env: WebShop data and episode settings.
        chat: the prompt format.
        model_name_or_path: π_ref, the frozen reference policy (stage 1 samples it), which is also where the
            policy starts (linked from the module's ``model_name_or_path``).
        tiny: build a fresh tiny policy into ``model_name_or_path`` if it is missing (smoke tests only; a real run
            starts from an SFT-warm-started reference).
        seed: the run seed (linked from ``seed_everything``): goal order, rollout sampling and stage-1 sampling
            derive theirs from it, per rank and purpose. Separate from the catalog seed ``env.seed``.
        algorithm: the objective being trained (linked from the module): whether stage 1 runs.
        rollouts_per_goal: trajectories per goal in a training batch (linked: 1 for A*-PO, G for GRPO).
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
        rollout: how training rollouts sample (and the reply token limit of every rollout).
        vstar: stage-1 settings.
        anchor_demos: oracle demonstrations of training goals attached to every training batch (per process) for
            the module's demonstration anchor (``model.anchor_weight``); 0 = none.
        anchor_goals: whose demonstrations the anchor draws from: "pool" (the training pool's goals, stage 1's) or
            "train" (every goal of the train split, as the reference's SFT did).
        demo_cache_dir: where those demonstrations are cached.
        relabel: hindsight option relabeling (``rollout.relabel``): each fresh trajectory that bought its goal's
            product is also replayed under a sibling training goal of that product (the goal whose options it
            bought, or, for a success, another one), and the replay joins the batch as an extra regression row
            with the original goal's V*. Only for objectives that use V*, and for synthetic goals (the default on
            both catalogs), whose options are a dict. Measured on the quick start (docs/experiments.md,
            "Twenty-ninth session"): no gain in 24 steps (test −1.0 and −1.5 points at run seeds 0 and 1; −1.0 with
            the success reward, as without it), and on the longer recipe (256 goals, 96 steps) the run ran away
            (KL above 1 nat at every step from 66, 104 at step 94; test −5.5 points) where the same run without it
            did not (median KL of the last 30 steps 0.79 nats).
    """

    def __init__(self, env: EnvConfig = EnvConfig(), chat: ChatFormat = ChatFormat(),
                 model_name_or_path: str = "data/models/tiny-sft", tiny: TinyPolicySpec | None = None, seed: int = 0,
                 algorithm: Algorithm = "apo", rollouts_per_goal: int = 1, batch_size: int = 16, train_goals: int = 0,
                 train_goal_indices: list[int] | None = None, steps_per_epoch: int = 50, val_goals: int = 64,
                 train_eval_goals: int = 0, test_goals: int = 0, eval_batch_size: int = 32,
                 rollout: RolloutSettings = RolloutSettings(), vstar: VStarConfig = VStarConfig(),
                 anchor_demos: int = 0, anchor_goals: AnchorGoals = "pool",
                 demo_cache_dir: str = "data/sft", relabel: bool = False):
        super().__init__()
        if anchor_goals not in get_args(AnchorGoals):
            raise ValueError(f"anchor_goals must be one of {get_args(AnchorGoals)}, got {anchor_goals!r}")
        if batch_size < 1 or steps_per_epoch < 1 or rollouts_per_goal < 1:
            raise ValueError("batch_size, steps_per_epoch and rollouts_per_goal must be >= 1")
        self.env = env
        self.chat = chat
        self.reference_model = model_name_or_path
        self.tiny = tiny
        self.seed = seed
        self.objective = OBJECTIVES[algorithm]
        self.rollouts_per_goal = rollouts_per_goal
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
        self.anchor_demos = anchor_demos
        self.anchor_goals = anchor_goals
        self.demo_cache_dir = demo_cache_dir
        self.relabel = relabel
        self.relabeler: OptionRelabeler | None = None
        self.demos: list[dict] = []
        self.reference_samples: dict[str, list[dict]] = {}  # stage-1 trajectories, with vstar.reuse
        self.v_star: VStarTable | None = None
        self.refreshed_at: int | None = None  # the batch whose start last refreshed V* (checkpointed with the table)
        self.goal_pool: list[int] = []
        self.stream: StepStream | None = None
        self._stage1_to_log: dict[str, float] | None = None

    # ------------------------------------------------------------------------------------------------ stage 1
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

    def vstar_key_parts(self, reference_hash: str) -> dict:
        """Everything the stage-1 reward samples depend on (the cache key).

        β1 is deliberately not a part: the cache stores the N rewards per goal and V* is recomputed from them
        (exactly, in microseconds) for whatever β1 a run asks for, so changing β1 never re-samples.
        """
        return {
            "reference": reference_hash,
            "goals": self.pool(),
            "data": str(self.shop.data_dir.resolve()),
            "env": asdict(self.env),
            "chat": self.chat.key_parts(),
            "num_samples": self.vstar.num_samples,
            "temperature": self.vstar.temperature,
            **({"top_p": self.vstar.top_p} if self.vstar.top_p != 1.0 else {}),  # keeps the older tables' keys
            "max_new_tokens": self.rollout.max_new_tokens,
            **({"valid_clicks": True} if self.rollout.valid_clicks else {}),  # keeps the older tables' keys
            **({"click_choice": self.rollout.click_choice}
               if self.rollout.valid_clicks and self.rollout.click_choice != "token" else {}),
            "seed": self.seed,
            "version": 2,
        }

    def sample_rewards(self, model, tokenizer, goals: list[int], purpose: str,
                       keep: dict[str, list[dict]] | None = None) -> dict[str, list[float]]:
        """N sampled trajectory rewards per goal under ``model`` (π_ref, or the current policy on a refresh), the
        work split across ranks: each samples every ``world_size``-th goal with its own seed (derived from the run
        seed, ``purpose`` and its rank), and the parts are gathered so that every rank returns all of them. With
        ``keep``, the trajectories themselves are gathered into it too, goal id -> the N
        records of ``rollout.trajectory.regression_record``."""
        share = goals[self.rank::self.world_size]
        engine = RolloutEngine(model, tokenizer, self.chat, max_new_tokens=self.rollout.max_new_tokens,
                               temperature=self.vstar.temperature, top_p=self.vstar.top_p,
                               valid_clicks=self.rollout.valid_clicks,
                               click_choice=self.rollout.click_choice)
        repeated = [g for g in share for _ in range(self.vstar.num_samples)]
        trajectories = rollout_goals(engine, self.shop, repeated, self.vstar.batch_size,
                                     seed=derive_seed(self.seed, purpose, self.rank),
                                     observation_mode=self.env.observation_mode, max_steps=self.env.max_steps,
                                     progress=self.rank == 0, description=f"{purpose} samples (rank 0)")
        rewards: dict[str, list[float]] = {str(g): [] for g in share}
        samples: dict[str, list[dict]] = {str(g): [] for g in share}
        for t in trajectories:
            rewards[str(t.goal_index)].append(t.reward)
            if keep is not None:
                samples[str(t.goal_index)].append(regression_record(t))
        if self.world_size > 1:
            gathered: list = [None] * self.world_size
            torch.distributed.all_gather_object(gathered, (rewards, samples if keep is not None else {}))
            rewards = {goal: r for part, _ in gathered for goal, r in part.items()}
            samples = {goal: s for _, part in gathered for goal, s in part.items()}
        if keep is not None:
            keep.update(samples)
        return rewards

    def _stage1_device(self) -> str:
        """Where this rank's stage-1 rollouts run: ``vstar.device``, on this rank's own GPU under a trainer."""
        device = resolve_device(self.vstar.device)
        root = self.trainer.strategy.root_device if self.trainer is not None else None
        return str(root) if root is not None and root.type == device else device

    def _load_vstar(self) -> VStarTable:
        """Stage 1: the V* table from the cache, or sampled with π_ref (every rank its share of the goals) and saved.

        All ranks look the key up before any of them samples, and sampling ends in a collective, so they agree
        on hit or miss; every rank then holds the whole table.

        With ``vstar.reuse``, the stage-1 trajectories are kept as well (``reference_samples``); a cached table
        without them is sampled again (the same seeds give the same rewards).
        """
        model, tokenizer = load_policy(self.reference_model)
        key_parts = self.vstar_key_parts(hash_state_dict(model.state_dict()))
        cache = VStarCache(self.vstar.cache_dir)
        key = cache.key(key_parts)
        stored = cache.load_samples(key) if self.vstar.reuse else None
        sampled: dict[str, list[dict]] = {}

        def compute_fn() -> dict[str, list[float]]:
            model.to(self._stage1_device())
            return self.sample_rewards(model, tokenizer, self.pool(), "stage1",
                                       keep=sampled if self.vstar.reuse else None)

        table = cache.get_or_compute(key_parts, compute_fn, self.vstar.beta1,
                                     recompute=bool(self.vstar.reuse) and stored is None)
        if self.vstar.reuse:
            if stored is None:
                stored = sampled
                if self.rank == 0:
                    cache.save_samples(key, stored)
            self.reference_samples = stored
        return table

    def _set_v_star(self, table: VStarTable, what: str) -> None:
        self.v_star = table
        self._stage1_to_log = sample_statistics(table.rewards)
        log.info("%s: %s", what, ", ".join(f"{k} {v:.4g}" for k, v in self._stage1_to_log.items()))

    def _demonstrations(self):
        return demonstration_cache(self.demo_cache_dir, self.env, self.chat, self.reference_model,
                                   {"train": self.pool() if self.anchor_goals == "pool" else self.env.split("train")},
                                   self.rollout.max_new_tokens)

    def prepare_data(self) -> None:
        """Once per machine: build the (untrained) tiny policy if the config asks for one and it is missing, and the
        anchor's demonstrations if asked for."""
        ensure_policy(self.reference_model, self.tiny, self.env, self.chat)
        if self.anchor_demos:
            self._demonstrations()

    def setup(self, stage: str | None = None) -> None:
        if stage not in ("fit", None):
            return
        pool = self.pool()
        if self.vstar.reuse and not self.objective.needs_v_star:
            raise ValueError(f"vstar.reuse adds stage-1 samples with their V*; the {self.objective.name} objective "
                             "has no stage 1: set vstar.reuse to 0")
        if self.relabel and not self.objective.needs_v_star:
            raise ValueError(f"relabel adds replays with their goal's V*; the {self.objective.name} objective has no "
                             "stage 1: set relabel to false")
        if self.relabel:
            self.relabeler = OptionRelabeler(self.shop, self.env.split("train"))
            if not self.relabeler.siblings:
                raise ValueError("relabel needs goals whose options are a dict (synthetic goals); this catalog's "
                                 "training goals have none")
        if self.objective.needs_v_star and self.v_star is None:
            self._set_v_star(self._load_vstar(), "stage 1")
            if self.vstar.goal_filter != "all":
                table = self.v_star
                dropped = table.drop_all_zero() if self.vstar.goal_filter == "nonzero" else table.all_equal()
                pool = [g for g in pool if str(g) not in dropped]
                log.info("goal_filter %s: %d of %d goals kept", self.vstar.goal_filter, len(pool), len(self.pool()))
        if len(pool) < self.world_size:
            raise ValueError(f"{len(pool)} training goals cannot be shared by {self.world_size} processes")
        self.goal_pool = pool
        if self.anchor_demos:
            self.demos = load_demonstrations(self._demonstrations())["train"]
            if not self.demos:
                raise ValueError(f"the demonstration anchor has no demonstrations: the oracle succeeded on none of the "
                                 f"{self.anchor_goals} goals within env.max_steps {self.env.max_steps} and "
                                 f"rollout.max_new_tokens {self.rollout.max_new_tokens}")

    # ------------------------------------------------------------------------------------------------ stage 2
    def goals_for_batch(self, batch_number: int) -> list[int]:
        """This rank's goals for training batch ``batch_number``: its shard of the pool, reshuffled every pass with
        a seed derived from the run seed."""
        shard = self.goal_pool[self.rank::self.world_size]
        start = batch_number * self.batch_size
        goals = []
        for position in range(start, start + self.batch_size):
            epoch, index = divmod(position, len(shard))
            order = list(shard)
            random.Random(derive_seed(self.seed, "goal-order", self.rank, epoch)).shuffle(order)
            goals.append(order[index])
        return goals

    def _policy(self):
        """The LightningModule's current policy and tokenizer: all the data module asks of it."""
        return self.trainer.lightning_module.rollout_policy()

    def _rollout_context(self):
        return self.trainer.precision_plugin.forward_context()

    def _refresh_v_star(self, batch_number: int) -> None:
        """Re-estimate V* for the goal pool with the current policy (every rank its share), before batch
        ``batch_number``; the table goes into the checkpoints, so a resumed run uses the same one."""
        model, tokenizer = self._policy()
        with self._rollout_context():
            rewards = self.sample_rewards(model, tokenizer, self.goal_pool, f"refresh-{batch_number}")
        self._set_v_star(VStarTable.from_rewards(f"refresh-{batch_number}", rewards, self.vstar.beta1),
                         f"V* refreshed before batch {batch_number}")
        self.refreshed_at = batch_number

    def reused_samples(self, batch_number: int) -> list[Trajectory]:
        """``vstar.reuse`` stage-1 reference trajectories for batch ``batch_number``, drawn without replacement from
        the samples of this rank's share of the goal pool with a seed derived from (run seed, rank, batch number);
        empty without ``vstar.reuse``."""
        if not self.vstar.reuse:
            return []
        shard = self.goal_pool[self.rank::self.world_size]
        candidates = [(g, record) for g in shard for record in self.reference_samples[str(g)]]
        rng = random.Random(derive_seed(self.seed, "reuse", self.rank, batch_number))
        chosen = rng.sample(candidates, min(self.vstar.reuse, len(candidates)))
        return [regression_trajectory(g, record) for g, record in chosen]

    def relabeled(self, trajectories: list[Trajectory], batch_number: int, engine: RolloutEngine
                  ) -> tuple[list[Trajectory], list[int]]:
        """With ``relabel``: the fresh trajectories replayed under a sibling training goal
        (``rollout.relabel.OptionRelabeler``; the choice among siblings seeded by (run seed, rank, batch number)),
        and for each kept replay the goal whose V* it takes (the original's). Empty without ``relabel``."""
        if self.relabeler is None:
            return [], []
        rng = random.Random(derive_seed(self.seed, "relabel", self.rank, batch_number))
        chosen = [(t, self.relabeler.target(t, rng)) for t in trajectories]
        chosen = [(t, g) for t, g in chosen if g is not None]
        replays = self.relabeler.replay(engine, self.env.envs(len(chosen)), [t for t, _ in chosen],
                                        [g for _, g in chosen])
        kept = [(r, t.goal_index) for r, (t, _) in zip(replays, chosen) if r is not None]
        return [r for r, _ in kept], [g for _, g in kept]

    def train_batch(self, batch_number: int) -> dict:
        """Training batch ``batch_number``: ``rollouts_per_goal`` fresh trajectories of the current policy for each
        of this rank's goals, then ``vstar.reuse`` stage-1 reference trajectories (``reused_samples``), then with
        ``relabel`` the fresh ones' replays under sibling goals (``relabeled``), collated
        (``rollout.collate.collate_trajectories``; rows in that order), with per row ``v_star`` (B,) float32 (0
        without V*; a replay's is its original goal's) and ``group`` (B,) int64 (the goal's position in the batch;
        each reused or replayed row its own), and
        ``trajectories`` (the fresh ones only, R ≤ B), ``rollout_seconds``, ``batch_number``, ``stage1`` (the sample
        statistics of a V* table made since the last batch, else None), and with ``anchor_demos`` a ``demos`` batch
        (``pad_batch``)."""
        refresh = self.vstar.refresh_every
        if refresh and batch_number and batch_number % refresh == 0 and self.refreshed_at != batch_number:
            self._refresh_v_star(batch_number)
        goals = self.goals_for_batch(batch_number)
        goal_list = [g for g in goals for _ in range(self.rollouts_per_goal)]
        model, tokenizer = self._policy()
        engine = RolloutEngine(model, tokenizer, self.chat, max_new_tokens=self.rollout.max_new_tokens,
                               temperature=self.rollout.temperature, top_p=self.rollout.top_p,
                               prefill=self.rollout.prefill, sampled_turn_prob=self.rollout.sampled_turn_prob,
                               valid_clicks=self.rollout.valid_clicks,
                               click_choice=self.rollout.click_choice)
        start = time.perf_counter()
        with self._rollout_context():
            trajectories = engine.rollout(self.env.envs(len(goal_list)), goal_list,
                                          seed=derive_seed(self.seed, "rollout", self.rank, batch_number))
        reused = self.reused_samples(batch_number)
        replays, replay_goals = self.relabeled(trajectories, batch_number, engine)
        rows = trajectories + reused + replays
        batch = collate_trajectories(rows, tokenizer.pad_token_id)
        v_star_goals = [t.goal_index for t in trajectories + reused] + replay_goals
        batch["v_star"] = (self.v_star.lookup(v_star_goals) if self.objective.needs_v_star
                           else torch.zeros(len(v_star_goals)))
        batch["group"] = torch.cat([torch.arange(len(goals)).repeat_interleave(self.rollouts_per_goal),
                                    len(goals) + torch.arange(len(reused) + len(replays))])
        if self.relabeler is not None:
            batch["replays"] = replays
        batch.update(trajectories=trajectories, rollout_seconds=time.perf_counter() - start,
                     batch_number=batch_number, stage1=self._stage1_to_log)
        if self.anchor_demos:
            rng = random.Random(derive_seed(self.seed, "anchor", self.rank, batch_number))
            demos = rng.sample(self.demos, min(self.anchor_demos, len(self.demos)))
            batch["demos"] = pad_batch(demos, tokenizer.pad_token_id)
        self._stage1_to_log = None
        return batch

    def train_dataloader(self) -> StepStream:
        if self.stream is None:  # one stream per run: its cursor is the run's position
            self.stream = StepStream(self.steps_per_epoch, self.train_batch)
        return self.stream

    # ------------------------------------------------------------------------------------------------ evaluation
    def eval_batch(self, goals: list[int]) -> dict:
        """Greedy trajectories of the current policy on ``goals``: ``{"trajectories": [...]}``."""
        model, tokenizer = self._policy()
        engine = RolloutEngine(model, tokenizer, self.chat, max_new_tokens=self.rollout.max_new_tokens, greedy=True,
                               prefill=self.rollout.prefill, valid_clicks=self.rollout.valid_clicks,
                               click_choice=self.rollout.click_choice)
        with self._rollout_context():
            return {"trajectories": engine.rollout(self.env.envs(len(goals)), goals, seed=0)}

    def _eval_loader(self, goals: list[int], limit: int) -> ChunkStream:
        goals = goals[:limit] if limit else goals
        return ChunkStream(goals[self.rank::self.world_size], self.eval_batch_size, self.eval_batch)

    def val_dataloader(self) -> ChunkStream | list[ChunkStream]:
        """The validation goals; with ``train_eval_goals`` also the training pool's first goals (loader 1)."""
        val = self._eval_loader(self.env.split("val"), self.val_goals)
        if not self.train_eval_goals:
            return val
        return [val, self._eval_loader(self.pool(), self.train_eval_goals)]

    def test_dataloader(self) -> ChunkStream:
        return self._eval_loader(self.env.split("test"), self.test_goals)

    # ------------------------------------------------------------------------------------------------ resume
    def state_dict(self) -> dict:
        """A V* table refreshed during training (the stage-1 table is cached on disk and found by its key)."""
        if self.refreshed_at is None:
            return {}
        return {"refreshed_at": self.refreshed_at, "v_star_rewards": self.v_star.rewards}

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict.get("refreshed_at") is not None:
            self.refreshed_at = int(state_dict["refreshed_at"])
            self.v_star = VStarTable.from_rewards(f"refresh-{self.refreshed_at}", state_dict["v_star_rewards"],
                                                  self.vstar.beta1)
