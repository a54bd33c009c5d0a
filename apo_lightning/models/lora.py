"""LoRA adapters (``peft``) for the training modules: the settings, the policy a run trains, and the frozen
reference adapter.

A run starts from ``model_name_or_path``, a plain model or an adapter folder (``models.loading.load_policy`` opens
one as its base with the adapter applied, unmerged). :func:`load_for_training` makes of it what the run trains:

============================  ==========================================================================
starting model, ``rank``      trained policy
============================  ==========================================================================
plain model, 0                the model itself (full fine-tuning)
plain model, > 0              the model with a fresh adapter ``default`` (B = 0: it starts equal to the base)
adapter folder, 0             the base with the adapter merged into it (full fine-tuning of the adapted model)
adapter folder, > 0           the base with the folder's adapter, frozen, as ``reference``, and a trainable copy of
                              it as ``policy``, the active adapter (it starts equal to the adapted model);
                              ``keep_reference=False`` (SFT) drops ``reference``
============================  ==========================================================================

With two adapters one copy of the base serves both models: :func:`adapter_active` runs the network as the reference
(the ``reference`` adapter active), and an exported policy (its active adapter) applies over the base alone, like
the folder it started from.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..utils.hashing import hash_state_dict
from ..utils.settings import check_settings
from .hub import ADAPTER_CONFIG, adapter_base
from .loading import load_policy

#: the frozen adapter of an adapter folder a run starts from, and its trainable copy (:func:`load_for_training`)
REFERENCE_ADAPTER, POLICY_ADAPTER = "reference", "policy"


@dataclass
class LoraSettings:
    """LoRA adapters through ``peft`` (rank 0 = full fine-tuning).

    Starting from an adapter folder, ``rank``, ``alpha`` and ``target_modules`` must be the folder's (its
    ``adapter_config.json``), and ``dropout`` is that of the trained copy.

    Args:
        rank: adapter rank r (>= 0; 0 = full fine-tuning).
        alpha: scaling α.
        dropout: adapter dropout.
        target_modules: module names to adapt.
    """

    rank: int = 0
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def __post_init__(self) -> None:
        check_settings("lora.", [("rank", self.rank, self.rank >= 0, ">= 0")])


class LoraMismatch(ValueError):
    """LoRA settings that differ from those of the adapter folder a run starts from."""


class TrainingStart(NamedTuple):
    """What :func:`load_for_training` returns.

    Attributes:
        policy: the model to train (``peft.PeftModel`` with an adapter, else a plain model), in eval mode.
        tokenizer: its tokenizer (``load_policy``'s: left padding, a pad token).
        start_sha256: the first 16 hex digits of ``utils.hashing.hash_state_dict`` of the starting model as
            ``load_policy`` loads it (for an adapter folder: the base and the adapter, before any merge or copy): the
            weights the policy starts equal to, and the reference a loss compares it with.
    """

    policy: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    start_sha256: str


def load_for_training(model_name_or_path: str, lora: LoraSettings, dtype: str = "float32",
                      keep_reference: bool = True) -> TrainingStart:
    """Load ``model_name_or_path`` and prepare the policy a run trains (the module docstring's table).

    Args:
        model_name_or_path: a plain model or an adapter folder, as ``load_policy`` takes it. For a fresh adapter
            (plain model, rank > 0) it becomes the adapter's ``base_model_name_or_path``, so write it as a later
            ``load_policy`` should find it (``smollm2-135m-instruct``, a model directory, a hub id).
        lora: the LoRA settings.
        dtype: the dtype of every weight (``load_policy``'s).
        keep_reference: from an adapter folder with rank > 0, keep its frozen adapter as ``reference`` beside the
            trained ``policy`` (A*-PO's π_ref); False deletes it (SFT trains on from the folder).

    Raises:
        LoraMismatch: starting from an adapter folder with rank > 0 and ``lora``'s rank, alpha or target modules
            differing from the folder's (the message names its ``adapter_config.json`` and both settings).
        ValueError: what ``load_policy`` raises.
        FileNotFoundError: what ``load_policy`` raises.
    """
    policy, tokenizer = load_policy(model_name_or_path, dtype=dtype, adapter_name=REFERENCE_ADAPTER)
    start_sha256 = hash_state_dict(policy.state_dict())[:16]
    from_adapter = adapter_base(model_name_or_path) is not None
    if from_adapter and lora.rank == 0:
        policy = policy.merge_and_unload()
    elif from_adapter:
        saved = adapter_settings(policy, REFERENCE_ADAPTER)
        if (saved.rank, saved.alpha, set(saved.target_modules)) != (lora.rank, lora.alpha, set(lora.target_modules)):
            raise LoraMismatch(
                f"the LoRA settings (rank {lora.rank}, alpha {lora.alpha}, target_modules "
                f"{sorted(lora.target_modules)}) differ from those of the adapter that {model_name_or_path}/"
                f"{ADAPTER_CONFIG} holds (rank {saved.rank}, alpha {saved.alpha}, target_modules "
                f"{sorted(saved.target_modules)}): set them to the adapter's, or rank 0 to fine-tune it merged")
        policy = add_trainable_copy(policy, REFERENCE_ADAPTER, POLICY_ADAPTER, lora.dropout)
        if not keep_reference:
            policy.delete_adapter(REFERENCE_ADAPTER)
    elif lora.rank > 0:
        from peft import LoraConfig, get_peft_model

        policy = get_peft_model(policy, LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                   target_modules=list(lora.target_modules)))
        policy.peft_config[policy.active_adapter].base_model_name_or_path = model_name_or_path  # as asked for
    return TrainingStart(policy.eval(), tokenizer, start_sha256)


def adapter_settings(model, name: str) -> LoraSettings:
    """The LoRA settings of the adapter ``name`` of the ``peft`` model ``model`` (a regular expression as
    ``target_modules`` stays a one-element tuple)."""
    config = model.peft_config[name]
    targets = config.target_modules
    targets = (targets,) if isinstance(targets, str) else tuple(sorted(targets))
    return LoraSettings(rank=config.r, alpha=config.lora_alpha, dropout=config.lora_dropout, target_modules=targets)


def add_trainable_copy(model, source: str, name: str, dropout: float):
    """Add to the ``peft`` model ``model`` a trainable adapter ``name`` equal to its adapter ``source`` (the same
    settings but ``dropout``, the same weights) and make it the active adapter; ``source`` stays, frozen.

    Returns:
        ``model``; its trainable parameters are exactly the new adapter's.
    """
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    config = replace(model.peft_config[source], lora_dropout=dropout, inference_mode=False)
    model.add_adapter(name, config)
    weights = get_peft_model_state_dict(model, adapter_name=source, save_embedding_layers=False)
    set_peft_model_state_dict(model, weights, adapter_name=name)
    model.set_adapter(name)  # trainable; every other adapter frozen
    return model


@contextmanager
def adapter_active(model, name: str) -> Iterator[None]:
    """Run the ``peft`` model ``model`` with its adapter ``name`` active, frozen, and in eval mode (no dropout),
    then restore the active adapter, which adapter is trainable, and the training mode."""
    active, training = model.active_adapter, model.training
    trainable = any(p.requires_grad for n, p in model.named_parameters() if f".{active}." in n)
    model.set_adapter(name, inference_mode=True)
    model.eval()
    try:
        yield
    finally:
        model.set_adapter(active, inference_mode=not trainable)
        model.train(training)
