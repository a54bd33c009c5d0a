"""Valid clicks: constrained decoding of a reply's ``click[...]`` argument to the items on the current page.

A policy that misspells or misremembers an ASIN writes clicks the env refuses, and each refused click wastes a turn
(docs/experiments.md, "The reference recalls, it does not read"). Inside the answer's click argument this decoder
lets through only the tokens that keep the argument a prefix of a clickable of the page (case-insensitively, as the
env matches clicks), and the closing ``]`` only after a whole clickable, so every click the policy writes is one the
env executes. The mask follows the policy token by token: a click the policy means off the page goes wherever its
first allowed letters lead. Nothing else of the reply is constrained, the environment and its action format are
unchanged (the action is still ``click[B0…]`` text), and the log-probabilities a rollout records stay those of the
unconstrained policy: for A\*-PO's least squares the constrained sampler is another sampling distribution (its
minimiser holds for any, Brantley et al. 2025, §3), for the policy-gradient objectives it makes the rollouts
off-policy. The same idea as grammar-constrained decoding (``prefix_allowed_tokens_fn`` of ``transformers``'
``generate``), for the engine's own decoding loop.
"""

from __future__ import annotations

import re
from typing import Sequence

import torch

from .chat import ANSWER_OPEN

_ACTION_NAME = re.compile(r"\b(search|click)\b", re.IGNORECASE)


def open_click(reply: str) -> str | None:
    """What a partial reply has typed of its click after the word ``click``: ``""`` right after it, ``"[B0N"``
    inside the argument; None when the reply is not inside its answer's first action, or that action is a search,
    or its argument is closed. (Tokens such as ``[B`` or ``[buy`` join the bracket to the argument, so the
    constraint starts at the bracket.)"""
    answer = ANSWER_OPEN.search(reply)
    if answer is None:
        return None
    action = _ACTION_NAME.search(reply, answer.end())
    if action is None or action.group(1).lower() != "click":
        return None
    typed = reply[action.end():].lstrip(" ")
    if typed and (not typed.startswith("[") or "]" in typed or "[" in typed[1:] or "\n" in typed):
        return None
    return typed


class ClickConstraint:
    """Which next tokens keep a reply's click argument on the page.

    Args:
        tokenizer: the policy's tokenizer; each token's text is its ``decode([id])``.
        vocab_size: width of the model's logits; rows beyond the tokenizer's vocabulary are never allowed.
    """

    def __init__(self, tokenizer, vocab_size: int):
        self.token_text = [tokenizer.decode([i]).lower() for i in range(min(len(tokenizer), vocab_size))]
        self.vocab_size = vocab_size
        self._closing = [i for i, text in enumerate(self.token_text) if "]" in text]
        self._masks: dict[tuple[str, tuple[str, ...]], torch.Tensor | None] = {}

    def clear(self) -> None:
        """Forget the masks computed so far (kept per argument typed and page; the engine clears them per rollout)."""
        self._masks.clear()

    def allowed(self, reply: str, clickables: Sequence[str]) -> torch.Tensor | None:
        """The allowed next tokens of a partial reply, or None where nothing is constrained.

        Args:
            reply: the reply decoded so far.
            clickables: the current page's clickables (``env.available_actions()["clickables"]``).

        Returns:
            ``(vocab_size,) bool``, True for a token that extends what follows ``click`` to a prefix of some
            ``"[" + clickable + "]"``, or completes one (anything may follow the ``]``); None when the reply is not
            inside a click (``open_click``), or when no token can continue it (what is typed matches no clickable:
            the click goes to the env as written and is refused there).
        """
        typed = open_click(reply)
        if typed is None:
            return None
        targets = tuple(sorted({c.lower() for c in clickables if c and c.lower() != "search"}))
        key = (typed.lower(), targets)
        if key not in self._masks:
            self._masks[key] = self._mask(*key)
        return self._masks[key]

    def _mask(self, typed: str, targets: tuple[str, ...]) -> torch.Tensor | None:
        clicks = ["[" + t + "]" for t in targets]
        prefixes = {c[:n] for c in clicks for n in range(1, len(c) + 1)}
        mask = torch.zeros(self.vocab_size, dtype=torch.bool)
        for i, text in enumerate(self.token_text):
            extended = typed + (text.lstrip(" ") if not typed else text)  # a space may precede the bracket
            if extended and extended in prefixes:
                mask[i] = True
        for i in self._closing:  # a token that closes the argument and goes on past the bracket
            extended = typed + (self.token_text[i].lstrip(" ") if not typed else self.token_text[i])
            if any(extended.startswith(c) for c in clicks):
                mask[i] = True
        return mask if bool(mask.any()) else None
