"""Turn drills: a short course that teaches a from-scratch tiny decoder to copy from its context.

Every WebShop action copies something the model has read: the search query from the instruction, an ASIN from
the results page, an option value from the instruction. Copying needs an *induction* circuit (Olsson et al., 2022,
"In-context learning and induction heads"), which forms quickly when copying is most of the loss and memorising
cannot pay; a small decoder trained from random weights on whole oracle episodes tends to memorise the training
instructions instead (docs/experiments.md, "The tiny reference policies").

A turn drill is one turn of an oracle episode shown alone: the system and task messages and that turn's page, and
the oracle's reply as the target (only the reply's tokens are in the loss). Three kinds of turn are drawn, the
three copies an episode needs: the search page (copy the instruction up to its price clause), the first results
page (copy the ASIN of the product that matches the instruction, or page on) and the first turn on the item page
(copy an option value named in the instruction, or buy). A share ``splice`` of the search drills (half by
default) shows a *spliced* instruction, the start of one training instruction joined to the end of another, so that
the query cannot be recalled from memory and must be copied.

A *value-swap* item-page drill (``swap``) targets a policy that remembers each product's option values and clicks
one that another goal of the product asked for. The drill replaces the clicked value in the instruction, on the
page's option button and in the reply by a value of the same option from another product that this page does not
offer: a product that never existed, whose value can only be copied from the instruction (docs/experiments.md,
"References built further").

With ``original_share`` set (training that reads, ``EnvConfig.vary_wording``) every drill shows its goal's
instruction drawn afresh (``webshop.wording.drawn_goal``: the training family of phrasings, or the generator's words
with that probability) wherever the turn shows it, and a search drill's reply searches with the drawn instruction's
words (``scripted.OraclePolicy.queries_for``); only a drill in the generator's words may be spliced.

Drills are training data: the SFT run trains on them through the Trainer before the demonstrations
(``lit.sft_data``); this module only draws them and measures how well a model copies.
"""

from __future__ import annotations

import random
import re
from functools import cached_property
from typing import Sequence

import torch

from ..rollout.chat import ChatFormat
from ..webshop import WebShop, WebShopEnv
from ..webshop.wording import drawn_goal
from .demonstrations import reply_for
from .scripted import OraclePolicy, scripted_steps, strip_price

#: The page kinds a drill is drawn from, in episode order.
DRILL_PAGES = ("index", "search_results", "item_page")


def option_value_pool(shop: WebShop) -> dict[str, list[str]]:
    """Every value each option name takes in the catalog (lower-case, sorted): ``{"color": ["black", ...], ...}``."""
    pool: dict[str, set[str]] = {}
    for product in shop.products:
        for name, values in (product.get("options") or {}).items():
            pool.setdefault(name.lower(), set()).update(v.lower() for v in values)
    return {name: sorted(values) for name, values in pool.items()}


def _whole(value: str) -> re.Pattern:
    """``value`` as a whole phrase (not inside a longer word), case-insensitive."""
    return re.compile(rf"(?<![\w-]){re.escape(value)}(?![\w-])", re.IGNORECASE)


def splice_instructions(rng: random.Random, first: str, second: str) -> str:
    """The words of ``first`` up to a random cut, then the words of ``second`` from a random cut on.

    The result keeps ``second``'s last six words whole (its price clause, ", and price lower than X dollars"), so
    it reads like an instruction.
    """
    a, b = first.split(), second.split()
    return " ".join(a[: rng.randint(1, max(1, len(a) - 1))] + b[rng.randint(1, max(1, len(b) - 6)):])


class TurnDrills:
    """Draws turn drills from oracle episodes on ``goal_indices`` (see the module docstring).

    Args:
        shop: the catalog and goals.
        chat: the chat format (the drills render exactly as rollouts do).
        tokenizer: a tokenizer with a chat template.
        goal_indices: goals to draw from (the training goals).
        splice: probability that a search drill shows a spliced instruction.
        max_steps: the env's step limit (shown as "actions left").
        swap: probability that an item-page drill whose reply clicks an option swaps that value for another
            product's (module docstring).
        original_share: draw every drill's instruction afresh, keeping the generator's words with this probability
            (module docstring); None: the instruction as ``shop`` words it.

    Raises:
        ValueError: no goal, or ``splice``, ``swap`` or ``original_share`` outside [0, 1].
    """

    def __init__(self, shop: WebShop, chat: ChatFormat, tokenizer, goal_indices: Sequence[int],
                 splice: float = 0.5, max_steps: int = 15, swap: float = 0.0,
                 original_share: float | None = None) -> None:
        if not goal_indices:
            raise ValueError("goal_indices must hold at least one goal, got none")
        for name, value in (("splice", splice), ("swap", swap), ("original_share", original_share)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        self.shop, self.chat, self.tokenizer = shop, chat, tokenizer
        self.goal_indices = list(goal_indices)
        self.splice = splice
        self.swap = swap
        self.original_share = original_share
        self.env = WebShopEnv(shop, max_steps=max_steps)
        self.oracle = OraclePolicy()
        self._turns: dict[int, dict[str, tuple[int, str, dict, str, tuple[str, str] | None]]] = {}

    @cached_property
    def value_pool(self) -> dict[str, list[str]]:
        """:func:`option_value_pool` of the shop, built at the first swap."""
        return option_value_pool(self.shop)

    def _first_turns(self, goal_index: int) -> dict[str, tuple[int, str, dict, str, tuple[str, str] | None]]:
        """``page kind -> (turn, observation, available actions, oracle reply, (option, value) clicked or None)``
        for each kind's first turn (the oracle is deterministic, so each goal's episode is played once and
        remembered)."""
        if goal_index in self._turns:
            return self._turns[goal_index]
        turns = {}
        for step in scripted_steps(self.env, self.oracle, goal_index):
            kind = self.env.page.kind
            if kind in DRILL_PAGES and kind not in turns:
                value = step.action[len("click["):-1].lower()
                clicked = self.env.page.clickables.get(value)
                option = (clicked.option.lower(), value) if clicked is not None and clicked.option else None
                turns[kind] = (self.env.num_steps, step.observation, step.available_actions,
                               reply_for(step.action, self.env), option)
        self._turns[goal_index] = turns
        return turns

    def draw(self, rng: random.Random, kind: str | None = None, splice: bool | None = None,
             swap: bool | None = None) -> dict[str, list[int]]:
        """One drill: ``{"input_ids": [...], "gen_mask": [...]}``, the mask 1 exactly on the reply's tokens.

        Args:
            kind: the page kind (one of ``DRILL_PAGES``), or None for a random one.
            splice: force or forbid a spliced instruction on a search drill (None: with probability ``splice``);
                only an instruction in the generator's words is spliced (its price clause ends it).
            swap: force or forbid a value swap on an item-page drill (None: with probability ``swap``; only when
                the reply clicks an option whose value the instruction names word for word, as synthetic goals
                do, and the catalog has another value of that option to swap in).
        """
        goal_index = rng.choice(self.goal_indices)
        turns = self._first_turns(goal_index)
        kind = kind if kind in turns else rng.choice(sorted(turns))
        turn, observation, available, reply, option = turns[kind]
        goal = self.shop.goals[goal_index]
        instruction = goal["instruction_text"]
        user = self.chat.turn_message(turn + 1, self.env.max_steps - turn if self.env.max_steps else None,
                                      observation, available)
        if self.original_share is not None:  # no draw without it: the drills of a run without it stay as they were
            drawn = drawn_goal(goal, rng, self.original_share)
            if drawn["instruction_text"] != instruction:
                user = user.replace(instruction, drawn["instruction_text"])
                if kind == "index":
                    reply = reply.replace(OraclePolicy.queries_for(goal)[0], OraclePolicy.queries_for(drawn)[0])
                goal, instruction = drawn, drawn["instruction_text"]
        generators_words = goal.get("original_instruction_text", instruction) == instruction  # splicing keeps its end
        if kind == "index" and generators_words and (rng.random() < self.splice if splice is None else splice):
            other = self.shop.goals[rng.choice(self.goal_indices)]["instruction_text"]
            spliced = splice_instructions(rng, instruction, other)
            user = user.replace(instruction, spliced)
            reply = reply.replace(OraclePolicy.queries_for(goal)[0], strip_price(spliced))
            instruction = spliced
        if kind == "item_page" and option is not None:
            if swap is None:  # no draw when swaps are off: the drills of a run without them stay as they were
                swap = self.swap > 0 and rng.random() < self.swap
            if swap:
                instruction, user, reply = self._swap_value(rng, option, instruction, user, reply)
        messages = self.chat.messages(instruction, [(user, None)])
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        reply_ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        return {"input_ids": prompt_ids + reply_ids, "gen_mask": [0] * len(prompt_ids) + [1] * len(reply_ids)}

    def _swap_value(self, rng: random.Random, option: tuple[str, str], instruction: str, user: str,
                    reply: str) -> tuple[str, str, str]:
        """``(instruction, user message, reply)`` with the clicked ``(option, value)`` swapped for another product's
        value of that option (module docstring); unchanged when the instruction does not name the value word for
        word or the catalog has no value this page does not show."""
        name, value = option
        if not _whole(value).search(instruction):
            return instruction, user, reply
        others = [v for v in self.value_pool.get(name, ()) if not _whole(v).search(user)]
        if not others:
            return instruction, user, reply
        new = rng.choice(others)
        swapped = _whole(value).sub(new, instruction)
        user = user.replace(instruction, swapped).replace(f"[{value}]", f"[{new}]")
        return swapped, user, reply.replace(value, new)


@torch.no_grad()
def copy_accuracy(model, drills: TurnDrills, per_kind: int = 16, seed: int = 1,
                  swapped: bool = False) -> dict[str, float]:
    """Fraction of drills (no splicing) whose reply the model reproduces exactly with greedy decoding, per page kind.

    Args:
        swapped: every item-page drill with its option value swapped (where the drill allows it), instead of none:
            copies of what the model cannot have remembered.

    Returns:
        ``{"index": acc, "search_results": acc, "item_page": acc}`` (index: the search page), each in [0, 1].
    """
    rng = random.Random(seed)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    pad_id = drills.tokenizer.pad_token_id
    accuracy = {}
    for kind in DRILL_PAGES:
        correct = 0
        for _ in range(per_kind):
            drill = drills.draw(rng, kind=kind, splice=False, swap=swapped)
            first = drill["gen_mask"].index(1)
            prompt = torch.tensor([drill["input_ids"][:first]], device=device)
            target = drill["input_ids"][first:]
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(target),
                                 do_sample=False, pad_token_id=pad_id)
            correct += out[0, first:].tolist() == target
        accuracy[kind] = correct / per_kind
    model.train(was_training)
    return accuracy
