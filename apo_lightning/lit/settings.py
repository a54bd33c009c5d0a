"""What the Lightning classes share: the data module base class, making sure the policy exists, and
``SettingError`` (a setting refused by name, which the command line prints as one line)."""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.trainer.states import TrainerFn

from ..baselines.corpus import ensure_tiny_policy
from ..models.hub import looks_local
from ..models.lora import LoraMismatch, LoraSettings, TrainingStart, load_for_training
from ..models.tiny import TinyPolicySpec
from ..rollout.chat import ChatFormat
from ..webshop import WebShop
from ..webshop.settings import EnvConfig


class SettingError(ValueError):
    """A setting the command line or one of its classes refused, named as a config key (``data.batch_size must be
    >= 1, got 0``); ``cli.main`` prints it as one line, without a traceback."""


def refuse_other_setup(saved: dict[str, str] | None, current: dict[str, str], checks: dict[str, str],
                       checkpoint_path) -> None:
    """Refuse to resume a checkpoint trained under another setup, or one without the record.

    Args:
        saved: the checkpoint's ``training_setup`` record (None: the checkpoint has none).
        current: this run's record.
        checks: what to compare: the name shown in the message -> the record's key that must be equal (a weights
            hash, say, where the message shows the path and the hash).
        checkpoint_path: the checkpoint, for the message.

    Raises:
        SettingError: the checkpoint has no record, or some checked key differs; the message names each difference,
            what the checkpoint was trained with and what this run asks for.
    """
    if saved is None:
        raise SettingError(f"checkpoint {checkpoint_path} has no training_setup record (it was not written by this "
                           "version of apo_lightning): start afresh with another run_name")
    differ = [what for what, key in checks.items() if saved.get(key) != current[key]]
    if differ:
        was = " and ".join(f"{what} {saved.get(what)}" for what in differ)
        now = " and ".join(f"{what} {current[what]}" for what in differ)
        raise SettingError(f"checkpoint {checkpoint_path} was trained with {was}; this run asks for {now}: resume it "
                           f"with the same {' and '.join(differ)} or start afresh with another run_name")


class CheckedResume:
    """A Lightning module mixin: every checkpoint records what a resume must start from (``training_setup``), and
    ``fit`` refuses a checkpoint recorded under another setup before it trains (:func:`refuse_other_setup`).
    Evaluation (``validate``/``test``) loads the weights under any setup.

    A LoRA run's checkpoint holds only the weights it trains (and their optimizer state): the frozen ones (the base
    model, π_ref's adapter) are listed under ``reloaded_weights`` and taken, on loading, from the model that
    ``configure_model`` loaded, whose hash the record holds; loading one under another start is refused in
    ``validate``/``test`` too (the checks named in ``START_CHECKS``).

    A subclass sets ``RESUME_CHECKS`` (the name shown in a refusal -> the ``training_setup`` key that must be equal),
    implements ``training_setup`` and ``configure_model`` (which loads what the record hashes), and holds its LoRA
    settings as ``lora_config``.
    """

    RESUME_CHECKS: dict[str, str]
    START_CHECKS: tuple[str, ...]  # the RESUME_CHECKS that fix the frozen weights: checked before they are reloaded

    def training_setup(self) -> dict[str, str]:
        raise NotImplementedError

    def frozen_weight_names(self) -> list[str]:
        """The ``state_dict`` keys of a LoRA policy's frozen parameters (tied ones under each name), sorted; empty
        under full fine-tuning (LoRA rank 0), where π_ref is held apart from the state dict."""
        if self.lora_config.rank == 0:
            return []
        return sorted(name for name, p in self.named_parameters(remove_duplicate=False) if not p.requires_grad)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["training_setup"] = self.training_setup()
        frozen = self.frozen_weight_names()
        for name in frozen:
            del checkpoint["state_dict"][name]
        if frozen:
            checkpoint["reloaded_weights"] = frozen

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """In ``fit``, refuse another setup; put back the frozen weights a LoRA checkpoint left out (from the
        loaded model, after checking that it is the start the checkpoint records).

        Raises:
            SettingError: another setup (in ``fit``), or another start than the one whose frozen weights a LoRA
                checkpoint left out (in any stage).
            ValueError: a left-out weight that this module does not have (another architecture).
        """
        path = self.trainer.ckpt_path if self._trainer is not None else None
        saved = checkpoint.get("training_setup")
        fitting = self._trainer is not None and self.trainer.state.fn == TrainerFn.FITTING
        reloaded = checkpoint.get("reloaded_weights", [])
        if fitting or reloaded:
            self.refuse_other_setup(saved, path, only=None if fitting else self.START_CHECKS)
        if not reloaded:
            return
        own = self.state_dict()
        unknown = [name for name in reloaded if name not in own]
        if unknown:
            raise ValueError(f"checkpoint {path} leaves out weights this model does not have: {unknown[:3]}")
        checkpoint["state_dict"].update({name: own[name] for name in reloaded})

    def refuse_other_setup(self, saved: dict[str, str] | None, checkpoint_path,
                           only: tuple[str, ...] | None = None) -> None:
        """Check that a checkpoint's ``training_setup`` is this run's before resuming it; loads the policy first
        (``configure_model``) to hash it. Paths alone may differ (the same weights elsewhere); a checkpoint without
        the record is refused. The CLI calls this before the Trainer starts, so a refused run writes nothing.
        ``only``: the names of ``RESUME_CHECKS`` to check (default all).

        Raises:
            SettingError: the checkpoint has no record, or a checked part of the setup differs; the message names
                each difference and ``checkpoint_path``.
        """
        if saved is None:
            refuse_other_setup(saved, {}, {}, checkpoint_path)
        self.configure_model()
        current = self.training_setup()
        checks = self.RESUME_CHECKS if only is None else {what: self.RESUME_CHECKS[what] for what in only}
        refuse_other_setup(saved, current, checks, checkpoint_path)


def load_start(model_name_or_path: str, lora: LoraSettings, dtype: str, keep_reference: bool = True,
               gradient_checkpointing: bool = False) -> TrainingStart:
    """``models.lora.load_for_training``, with LoRA settings other than an adapter folder's refused as a
    ``SettingError`` on ``model.lora`` (printed by the CLI as one line), and with ``gradient_checkpointing`` the
    policy's decoder layers recomputed in the backward pass (``transformers``' ``activation_checkpointing_enable``,
    non-reentrant: the modules' ``gradient_checkpointing`` setting)."""
    try:
        start = load_for_training(model_name_or_path, lora, dtype, keep_reference=keep_reference)
    except LoraMismatch as error:
        raise SettingError(f"model.lora: {error}") from error
    if gradient_checkpointing:
        start.policy.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return start


class WebShopDataModule(LightningDataModule):
    """What every data module of this project shares: its rank and world size, the catalog, each process's share of
    the evaluation goals, and moving a batch dict to the device (trajectories and other Python objects stay as they
    are). Subclasses set ``self.env`` and ``self.chat``."""

    env: EnvConfig
    chat: ChatFormat

    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    @property
    def shop(self) -> WebShop:
        """The catalog (goals, products, prices) the episodes run in."""
        return self.env.shop()

    def goal_share(self, goals: list[int], setting: str, zero_is_off: bool = False) -> list[int]:
        """This process's share of ``goals`` (every ``world_size``-th, from its rank).

        Raises:
            SettingError: fewer goals than processes (a process with no goals would stop the others; with
                ``zero_is_off``, no goals at all are allowed: the setting at 0 turns the loader off), named by
                ``setting`` (printed by the CLI as one line).
        """
        if len(goals) < self.world_size and not (zero_is_off and not goals):
            zero = "0 or " if zero_is_off else ""
            raise SettingError(f"data.{setting} must be {zero}at least the number of processes ({self.world_size}), "
                               f"got {len(goals)} goals")
        return goals[self.rank::self.world_size]

    def transfer_batch_to_device(self, batch, device, dataloader_idx: int):
        if isinstance(batch, dict):
            return {k: self.transfer_batch_to_device(v, device, dataloader_idx) if isinstance(v, dict) else
                    (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
        return batch


#: the one folder a fresh tiny policy is built into (``tiny``): a cache folder, like the rest of ``data/``
TINY_POLICY_ROOT = Path("data") / "models"


def check_policy(model_name_or_path: str, tiny: TinyPolicySpec | None) -> None:
    """Refuse a policy that ``ensure_policy`` could neither find nor build, before anything is built or loaded.

    With ``tiny`` set, ``model_name_or_path`` is a folder: one that exists, or a new one under ``data/models/``
    (relative to the working directory), where a fresh tiny policy is built; anywhere else a missing folder is an
    error, so a mistyped path never becomes an untrained policy. Without it, a local path (absolute, or whose parent
    folder exists, or a name ``models.hub.looks_local`` takes for a path) must exist; a hub id is left to the loader.

    Raises:
        FileNotFoundError: the path does not exist and may not be built; the message says how to make it.
    """
    path = Path(model_name_or_path).expanduser()
    parent = path.parent
    local = tiny is not None or looks_local(model_name_or_path) or (str(parent) not in ("", ".") and parent.is_dir())
    if not local or path.exists():
        return
    if tiny is None:
        raise FileNotFoundError(
            f"model_name_or_path {model_name_or_path} does not exist: train it first (`python cli.py fit "
            "--config configs/sft_tiny.yaml` exports data/models/tiny-sft, configs/sft_quickstart.yaml "
            "models/quickstart-ref) or give an existing model directory or hub id")
    root = (Path.cwd() / TINY_POLICY_ROOT).resolve()
    if not path.resolve().is_relative_to(root):
        raise FileNotFoundError(
            f"model_name_or_path {model_name_or_path} does not exist, and model.tiny builds a fresh (untrained) tiny "
            f"policy only into a new folder under {TINY_POLICY_ROOT}/: give an existing model directory, or "
            f"{TINY_POLICY_ROOT}/<name> to build one there")


def ensure_policy(model_name_or_path: str, tiny: TinyPolicySpec | None, data: WebShopDataModule | None) -> None:
    """Make sure the policy directory exists: with ``tiny`` set, build the (untrained) tiny policy into a missing
    folder under ``data/models/`` (or check that an existing one is that tiny build, ``ensure_tiny_policy``); its
    tokenizer learns the catalog and prompt format of ``data``, the run's data module (read only with ``tiny``).

    Raises:
        FileNotFoundError: see :func:`check_policy`.
        ValueError: the folder holds a tiny build with other settings (``ensure_tiny_policy``).
    """
    check_policy(model_name_or_path, tiny)
    if tiny is not None:
        ensure_tiny_policy(Path(model_name_or_path), tiny, data.shop, data.chat, data.env.split("train"))
