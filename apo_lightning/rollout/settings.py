"""How rollouts sample replies (``RolloutSettings``), and the engine those settings build."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal, get_args

from .chat import ChatFormat
from .engine import RolloutEngine

Prefill = Literal["batched", "per_row"]


def check_settings(prefix: str, rules: Iterable[tuple[str, Any, bool, str]]) -> None:
    """Raise a ValueError for the first rule ``(setting, value, ok, allowed)`` whose ``ok`` is False, as
    ``"{prefix}{setting} must be {allowed}, got {value}"`` (e.g. ``rollout.temperature must be > 0, got 0``)."""
    for name, value, ok, allowed in rules:
        if not ok:
            shown = f"{value:g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else value
            raise ValueError(f"{prefix}{name} must be {allowed}, got {shown}")


@dataclass
class RolloutSettings:
    """How rollouts sample replies.

    Args:
        temperature: sampling temperature (> 0). The losses always read the untempered log π and log π_ref, so a
            sharper sampler (T < 1, nearer the greedy policy that is evaluated) changes which trajectories are
            regressed on, not the regression target.
        top_p: nucleus sampling mass, in (0, 1] (1.0 = off).
        max_new_tokens: reply token limit per turn.
        valid_clicks: constrain every click argument to the page's clickables (``rollout.constrained``), greedy and
            sampled alike (off: the policy writes what it writes).
        prefill: how the engine encodes a turn's new tokens: "batched" (one left-padded batch) or "per_row" (each
            episode on its own: no compute on padding; the same samples).
        pack_weights: on a CPU, decode with oneDNN-packed copies of the linear weights, made afresh for each rollout
            (``rollout.packed``; the samples equal plain decoding's up to float rounding). No effect elsewhere.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    valid_clicks: bool = False
    prefill: Prefill = "batched"
    pack_weights: bool = False

    def check(self, prefix: str = "") -> None:
        """Raise ValueError naming the first setting out of range, as ``{prefix}{setting}``."""
        check_settings(prefix, [("temperature", self.temperature, self.temperature > 0, "> 0"),
                                ("top_p", self.top_p, 0 < self.top_p <= 1, "in (0, 1]"),
                                ("max_new_tokens", self.max_new_tokens, self.max_new_tokens >= 1, ">= 1"),
                                ("prefill", self.prefill, self.prefill in get_args(Prefill),
                                 f"one of {get_args(Prefill)}")])

    def engine(self, model, tokenizer, chat: ChatFormat, greedy: bool = False) -> RolloutEngine:
        """A :class:`RolloutEngine` for ``model`` that samples as these settings say (``greedy``: argmax instead).

        Raises:
            ValueError: as :class:`RolloutEngine` does (``temperature`` ≤ 0, ``top_p`` outside (0, 1], ...).
        """
        return RolloutEngine(model, tokenizer, chat, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                             top_p=self.top_p, greedy=greedy, prefill=self.prefill, valid_clicks=self.valid_clicks,
                             pack_weights=self.pack_weights)
