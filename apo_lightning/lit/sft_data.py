"""The SFT data module: turn drills, then oracle demonstrations, as one course of training batches (the WebShop
paper's IL stage, preceded by the drills a from-scratch tiny decoder needs).

One training epoch is the whole course: ``drills.steps`` batches of turn drills (``baselines.drills``; each rank
draws its own, seeded by the run seed, its rank and the batch number), then ``demo_epochs`` passes over the oracle
demonstrations in length-grouped batches (each pass reshuffled with a seed derived from the run seed; each rank
takes every ``world_size``-th batch). Like the RL stream, the course is a ``streams.StepStream``: sized, made as
Lightning asks, and resumable from any checkpoint.

The demonstrations are built in ``setup`` (``lit.demos``), rendered and tokenized by the same rollout engine that RL
samples with, so the token layout is identical, and cached under ``cache_dir``. Validation:
the loss on held-out demonstrations, greedy episodes on validation goals, and (with drills) exact-copy accuracy on
drills of held-out goals, each from its own loader.

With ``env.vary_wording`` (training that reads) every training demonstration and drill shows its goal's instruction
drawn afresh (``webshop.wording.drawn_goal``: the training family of phrasings or, a share ``env.original_share`` of
the time, the generator's words): each demonstration pass is its own set, built and cached with its own draw
(``demos.demonstration_cache``'s ``draw``), and each drill draws with the drill's seed. Validation shows
``env.wording``, as evaluation does.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import torch
from transformers import AutoTokenizer
from transformers.trainer_pt_utils import LengthGroupedSampler

from ..baselines.drills import DRILL_PAGES, TurnDrills
from ..models.loading import tokenizer_folder
from ..rollout.chat import ChatFormat
from ..rollout.collate import pad_batch
from ..rollout.engine import RolloutEngine
from ..utils.seeds import derive_seed
from ..utils.settings import check_settings
from ..webshop.settings import EnvConfig
from .demos import DemoNoise, demonstration_cache, load_demonstrations
from .settings import SettingError, WebShopDataModule
from .streams import ChunkStream, StepStream

log = logging.getLogger(__name__)


@dataclass
class DrillSettings:
    """Turn drills before the demonstrations (``baselines.drills``): single turns whose reply copies from the
    context, which teach a from-scratch decoder to copy before it sees whole episodes.

    Args:
        steps: drill batches at the start of the course (0 = none; for a pretrained model).
        batch_size: drills per batch per process.
        held_out_goals: the last N training goals are never drilled (at most a tenth of the training goals, at
            least 1); validation measures exact copies on them.
        checks_per_kind: drills per page kind in that validation check (0 = no check).
        kinds: the page kinds to drill (``DRILL_PAGES``); None = any kind a goal's episode shows.
        swap_values: probability that an item-page drill swaps the clicked option value for another product's
            (``baselines.drills``: a value that can only be copied, not remembered; measured in docs/experiments.md,
            "References built further").

    Raises:
        ValueError: a setting out of its range.
    """

    steps: int = 0
    batch_size: int = 32
    held_out_goals: int = 64
    checks_per_kind: int = 16
    kinds: list[str] | None = None
    swap_values: float = 0.0

    def __post_init__(self) -> None:
        unknown = set(self.kinds or ()) - set(DRILL_PAGES)
        check_settings("drills.", [*((name, getattr(self, name), getattr(self, name) >= 0, ">= 0")
                                     for name in ("steps", "held_out_goals", "checks_per_kind")),
                                   ("batch_size", self.batch_size, self.batch_size >= 1, ">= 1"),
                                   ("kinds", self.kinds, not unknown and self.kinds != [],
                                    f"a non-empty list of {DRILL_PAGES}"),
                                   ("swap_values", self.swap_values, 0.0 <= self.swap_values <= 1.0, "in [0, 1]")])


class SFTDataModule(WebShopDataModule):
    """Turn drills and oracle demonstrations in the chat format.

    Args:
        env: WebShop data and episode settings.
        chat: the prompt format (must match the one RL uses later).
        model_name_or_path: the policy to fine-tune, as ``models.loading.load_policy`` takes it (its tokenizer,
            ``models.loading.tokenizer_folder``, tokenizes everything; linked from the module).
        seed: the run seed (linked from ``seed_everything``): drill draws and demonstration order.
        drills: turn drills at the start of the course.
        num_demos: demonstrations from the first training goals (only successful ones are kept).
        demo_epochs: passes over the demonstrations after the drills.
        num_val_demos: demonstrations from validation goals, for the validation loss.
        batch_size: demonstrations per batch per process.
        val_goals: validation goals played greedily at each validation (``val/success_rate``, ``val/score``);
            0 turns this off.
        eval_batch_size: episodes per rollout batch in that evaluation.
        max_new_tokens: reply token limit, as in RL (a longer oracle reply would be cut there).
        demo_noise: DART noise in the training demonstrations (:class:`~apo_lightning.lit.demos.DemoNoise`); none
            by default. Validation demonstrations are the plain oracle's.
        cache_dir: where tokenized demonstrations are cached, keyed by everything they depend on (with
            ``env.vary_wording``, a file per demonstration pass: each pass shows its own draw of the instructions).
        recorded_demos: a sessions file recorded by people (``python -m apo_lightning.webshop serve --split train
            --record FILE``); each session is one more training demonstration, its replies worded as the oracle's
            (``baselines.demonstrations.recorded_demonstrations``). None: the oracle's only.
    """

    def __init__(self, env: EnvConfig = EnvConfig(), chat: ChatFormat = ChatFormat(),
                 model_name_or_path: str = "data/models/tiny-init", seed: int = 0,
                 drills: DrillSettings = DrillSettings(), num_demos: int = 2000, demo_epochs: int = 1,
                 num_val_demos: int = 64, batch_size: int = 4, val_goals: int = 32, eval_batch_size: int = 32,
                 max_new_tokens: int = 64, demo_noise: DemoNoise = DemoNoise(), cache_dir: str = "data/sft",
                 recorded_demos: str | None = None):
        super().__init__()
        least = (("num_demos", num_demos, 0), ("demo_epochs", demo_epochs, 0), ("num_val_demos", num_val_demos, 0),
                 ("batch_size", batch_size, 1), ("val_goals", val_goals, 0), ("eval_batch_size", eval_batch_size, 1),
                 ("max_new_tokens", max_new_tokens, 1))
        check_settings("", [(name, value, value >= bound, f">= {bound}") for name, value, bound in least])
        self.env = env
        self.chat = chat
        self.model_name_or_path = model_name_or_path
        self.seed = seed
        self.drills = drills
        self.num_demos = num_demos
        self.demo_epochs = demo_epochs
        self.num_val_demos = num_val_demos
        self.batch_size = batch_size
        self.val_goals = val_goals
        self.eval_batch_size = eval_batch_size
        self.max_new_tokens = max_new_tokens
        self.demo_noise = demo_noise
        self.cache_dir = Path(cache_dir)
        self.recorded_demos = recorded_demos
        self.train_passes: list[list[dict]] = []
        self.train_examples: list[dict] = []
        self.val_examples: list[dict] = []
        self.stream: StepStream | None = None
        self.tokenizer = None

    # ------------------------------------------------------------------------------------------------ build
    @cached_property
    def tokenizer_dir(self) -> str:
        """The folder of the policy's tokenizer: a model directory, an adapter folder or its base
        (``models.loading.tokenizer_folder``; resolved once, after the module's ``prepare_data`` made the policy)."""
        return tokenizer_folder(self.model_name_or_path)

    def _demonstrations(self) -> tuple[list[Path], Path]:
        """The cache files of the training demonstrations (one per pass with ``env.vary_wording``, else one for
        every pass) and of the validation demonstrations (in ``env.wording``, as evaluation shows it)."""
        tokenizer = self.tokenizer_dir
        draws = range(max(1, self.demo_epochs)) if self.env.vary_wording else range(1)
        train = [demonstration_cache(self.cache_dir, self.env, self.chat, tokenizer,
                                     {"train": self.env.split("train")[: self.num_demos]}, self.max_new_tokens,
                                     self.demo_noise, self.seed, self.recorded_demos, draw=draw) for draw in draws]
        val = demonstration_cache(self.cache_dir, replace(self.env, vary_wording=False), self.chat, tokenizer,
                                  {"val": self.env.split("val")[: self.num_val_demos]}, self.max_new_tokens)
        return train, val

    def setup(self, stage: str | None = None) -> None:
        """The demonstrations (built, or found in the cache: ``_demonstrations``), the policy's tokenizer and the
        drill sources. Every process builds a missing demonstration file itself, the same file (atomic writes), so
        none waits on another; they are tokenized with the policy's tokenizer, which exists only after the module's
        ``prepare_data`` (a fresh tiny policy)."""
        train, val = self._demonstrations()
        self.train_passes = [sets["train"] + sets.get("recorded", []) for sets in map(load_demonstrations, train)]
        self.train_examples = self.train_passes[0]  # the first pass's (every pass's without env.vary_wording)
        self.val_examples = load_demonstrations(val)["val"]
        self.tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_dir)
        train = self.env.split("train")
        held_out = max(1, min(self.drills.held_out_goals, len(train) // 10))
        self.drill_source = TurnDrills(self.shop, self.chat, self.tokenizer, train[:-held_out],
                                       max_steps=self.env.max_steps, swap=self.drills.swap_values,
                                       original_share=self.env.original_share if self.env.vary_wording else None)
        self.drill_checks = TurnDrills(self.shop, self.chat, self.tokenizer, train[-held_out:],
                                       max_steps=self.env.max_steps)

    # ------------------------------------------------------------------------------------------------ train
    def demo_batches_per_epoch(self) -> int:
        """Demonstration batches each rank trains on per pass (every rank and every pass the same number: that of
        the pass with the fewest demonstrations, when passes differ in how many of their draws the oracle won)."""
        fewest = min(map(len, self.train_passes)) if self.train_passes else 0
        return (fewest + self.batch_size - 1) // self.batch_size // self.world_size

    def course_length(self) -> int:
        """Batches in one course (one Lightning epoch): drills, then the demonstration passes."""
        return self.drills.steps + self.demo_epochs * self.demo_batches_per_epoch()

    def _pass_examples(self, demo_epoch: int) -> list[dict]:
        """The demonstrations of pass ``demo_epoch`` (counted over courses): with ``env.vary_wording``, pass ``k``
        of every course shows draw ``k``."""
        return self.train_passes[demo_epoch % len(self.train_passes)]

    def _demo_order(self, demo_epoch: int) -> list[list[int]]:
        """This rank's batches of one pass (indices into :meth:`_pass_examples`): length-grouped
        (``LengthGroupedSampler``), shuffled by the run seed."""
        generator = torch.Generator().manual_seed(derive_seed(self.seed, "sft-order", demo_epoch) % 2**63)
        examples = self._pass_examples(demo_epoch)
        sampler = LengthGroupedSampler(self.batch_size, lengths=[len(e["input_ids"]) for e in examples],
                                       generator=generator)
        order = list(sampler)
        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return batches[self.rank::self.world_size][: self.demo_batches_per_epoch()]

    def train_batch(self, batch_number: int) -> dict:
        """Course batch ``batch_number``: a drill batch or a demonstration batch (``pad_batch`` tensors), with
        ``phase`` "drills" or "demos"."""
        position = batch_number % self.course_length()
        if position < self.drills.steps:
            rng = random.Random(derive_seed(self.seed, "drills", self.rank, batch_number))
            kinds = self.drills.kinds
            examples = [self.drill_source.draw(rng, kind=rng.choice(kinds) if kinds else None)
                        for _ in range(self.drills.batch_size)]
            phase = "drills"
        else:
            demo_epoch, index = divmod(position - self.drills.steps, self.demo_batches_per_epoch())
            demo_epoch += batch_number // self.course_length() * self.demo_epochs
            examples = [self._pass_examples(demo_epoch)[i] for i in self._demo_order(demo_epoch)[index]]
            phase = "demos"
        batch = pad_batch(examples, self.tokenizer.pad_token_id)
        batch["phase"] = phase
        return batch

    def train_dataloader(self) -> StepStream:
        if self.stream is None:
            if self.course_length() < 1:
                raise ValueError("the SFT course is empty: set drills.steps or demonstrations and demo_epochs")
            self.stream = StepStream(self.course_length(), self.train_batch)
        return self.stream

    # ------------------------------------------------------------------------------------------------ validation
    def _rollout_batch(self, goals: list[int]) -> dict:
        """Greedy episodes of the current policy on ``goals``."""
        model, tokenizer = self.trainer.lightning_module.rollout_policy()
        engine = RolloutEngine(model, tokenizer, self.chat, max_new_tokens=self.max_new_tokens, greedy=True)
        with self.trainer.precision_plugin.forward_context():
            return {"trajectories": engine.rollout(self.env.envs(len(goals)), goals, seed=0)}

    def _drill_check_batch(self, kinds: list[str]) -> dict:
        """Drills (no splicing) of held-out goals, one list per page kind, for the exact-copy check."""
        rng = random.Random(derive_seed(self.seed, "drill-checks"))
        return {"drill_checks": {kind: [self.drill_checks.draw(rng, kind=kind, splice=False)
                                        for _ in range(self.drills.checks_per_kind)] for kind in kinds}}

    def val_dataloader(self) -> list:
        """Loader 0: held-out demonstrations (loss); 1: greedy episodes on validation goals; 2: drill checks.

        Raises:
            SettingError: some but not all processes would get a batch of demonstrations or a validation goal (a
                process with an empty loader would stop the others), named by the setting that is too small.
        """
        demos = [self.val_examples[i:i + self.batch_size] for i in range(0, len(self.val_examples), self.batch_size)]
        goals = self.env.split("val")[: self.val_goals]
        if 0 < len(demos) < self.world_size:
            raise SettingError(f"data.num_val_demos must give each of the {self.world_size} processes a batch (more "
                               f"than {(self.world_size - 1) * self.batch_size} successful demonstrations at "
                               f"data.batch_size {self.batch_size}), got {self.num_val_demos} goals with "
                               f"{len(self.val_examples)} successful demonstrations")
        loaders: list = [ChunkStream(demos[self.rank::self.world_size], 1,
                                     lambda chunk: pad_batch(chunk[0], self.tokenizer.pad_token_id)),
                         ChunkStream(self.goal_share(goals, "val_goals", zero_is_off=True), self.eval_batch_size,
                                     self._rollout_batch)]
        if self.drills.steps and self.drills.checks_per_kind:
            loaders.append(ChunkStream([list(DRILL_PAGES)], 1, lambda chunk: self._drill_check_batch(chunk[0])))
        return loaders

