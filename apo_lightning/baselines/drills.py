"""Turn drills: a short course that teaches a from-scratch tiny decoder to copy from its context.

Every WebShop action copies something the model has read: the search query from the instruction, an ASIN from
the results page, an option value from the instruction. A decoder of a few million parameters trained from random
weights directly on whole oracle episodes does not discover copying in a CPU budget: it memorises training
instructions instead (measured: 0 % success after 1,350 SFT steps of 4 demonstrations). Copying needs an
*induction* circuit (Olsson et al., 2022, "In-context learning and induction heads"), which forms quickly when
copying is most of the loss and memorising cannot pay. Abstract drills (repeat one of several labelled lines)
did not transfer (0 % exact copies after 600 batches); content-cued copies in the real layout do.

A turn drill is one turn of an oracle episode shown alone: the system and task messages and that turn's page, and
the oracle's reply as the target (only the reply's tokens are in the loss). Three kinds of turn are drawn, the
three copies an episode needs: the search page (copy the instruction up to its price clause), the first results
page (copy the ASIN of the product that matches the instruction, or page on) and the first turn on the item page
(copy an option value named in the instruction, or buy). Half of the search drills show a *spliced* instruction,
the start of one training instruction joined to the end of another, so that the query cannot be recalled from
memory and must be copied.

A *value-swap* item-page drill (``swap``) answers the other way a small policy avoids copying: it remembers each
product's option values and clicks one that another goal of the product asked for (measured on the quick start's
reference: 85 of its 86 wrong option clicks on test goals). The drill replaces the clicked value in the instruction, on
the page's option button and in the reply by a value of the same option from another product that this page does not
offer: a product that never existed, whose value can only be copied from the instruction.

An *ASIN-swap* results-page drill (``asin_swap``) answers the same for the product click: the quick start's reference
never copies an ASIN from the page, it recalls the ASIN it remembers for the instruction (measured on a catalog of
the same generator with another seed: 0 % success, 198 of 198 product clicks on ASINs that are not on the page, 41 of
them ASINs of the catalog it was trained on). The drill replaces the clicked ASIN on the page, in the list of
available actions and in the reply by a new random ASIN that no product of the catalog has, so the click can only be
copied from the page.

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
from ..webshop.synthetic import new_asin
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
        asin_swap: probability that a results-page drill whose reply clicks a product swaps its ASIN for a new one
            (module docstring).
    """

    def __init__(self, shop: WebShop, chat: ChatFormat, tokenizer, goal_indices: Sequence[int],
                 splice: float = 0.5, max_steps: int = 15, swap: float = 0.0, asin_swap: float = 0.0) -> None:
        if not goal_indices:
            raise ValueError("turn drills need at least one goal")
        self.shop, self.chat, self.tokenizer = shop, chat, tokenizer
        self.goal_indices = list(goal_indices)
        self.splice = splice
        self.swap = swap
        self.asin_swap = asin_swap
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

    @cached_property
    def catalog_asins(self) -> frozenset[str]:
        """Every ASIN of the catalog, upper-case (a swapped-in ASIN is none of them)."""
        return frozenset(product["asin"].upper() for product in self.shop.products)

    def draw(self, rng: random.Random, kind: str | None = None, splice: bool | None = None,
             swap: bool | None = None, asin_swap: bool | None = None) -> dict[str, list[int]]:
        """One drill: ``{"input_ids": [...], "gen_mask": [...]}``, the mask 1 exactly on the reply's tokens.

        Args:
            kind: the page kind (one of ``DRILL_PAGES``), or None for a random one.
            splice: force or forbid a spliced instruction on a search drill (None: with probability ``splice``).
            swap: force or forbid a value swap on an item-page drill (None: with probability ``swap``; only when
                the reply clicks an option whose value the instruction names word for word, as synthetic goals
                do, and the catalog has another value of that option to swap in).
            asin_swap: force or forbid an ASIN swap on a results-page drill (None: with probability ``asin_swap``;
                only when the reply clicks a product).
        """
        goal_index = rng.choice(self.goal_indices)
        turns = self._first_turns(goal_index)
        kind = kind if kind in turns else rng.choice(sorted(turns))
        turn, observation, available, reply, option = turns[kind]
        goal = self.shop.goals[goal_index]
        instruction = goal["instruction_text"]
        user = self.chat.turn_message(turn + 1, self.env.max_steps - turn if self.env.max_steps else None,
                                      observation, available)
        if kind == "index" and (rng.random() < self.splice if splice is None else splice):
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
        if kind == "search_results":
            if asin_swap is None:  # as for swap: no draw when ASIN swaps are off
                asin_swap = self.asin_swap > 0 and rng.random() < self.asin_swap
            if asin_swap:
                user, reply = self._swap_asin(rng, user, reply)
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

    def _swap_asin(self, rng: random.Random, user: str, reply: str) -> tuple[str, str]:
        """``(user message, reply)`` with the ASIN the reply clicks replaced, case-insensitively, by a new ASIN
        (module docstring); unchanged when the reply does not click an ASIN shown on the page."""
        match = re.search(r"click\[([^\]]+)\]", reply)
        if match is None or match.group(1).upper() not in self.catalog_asins or not re.search(
                re.escape(match.group(1)), user, re.IGNORECASE):
            return user, reply
        new = new_asin(rng, self.catalog_asins)
        old = re.compile(re.escape(match.group(1)), re.IGNORECASE)

        def same_case(found: re.Match) -> str:
            return new if found.group(0).isupper() else new.lower()

        return old.sub(same_case, user), old.sub(same_case, reply)


@torch.no_grad()
def copy_accuracy(model, drills: TurnDrills, per_kind: int = 16, seed: int = 1,
                  swapped: bool = False) -> dict[str, float]:
    """Fraction of drills (no splicing) whose reply the model reproduces exactly with greedy decoding, per page kind.

    Args:
        swapped: every results-page drill with its ASIN swapped and every item-page drill with its option value
            swapped (where the drill allows it), instead of none: copies of what the model cannot have remembered.

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
            drill = drills.draw(rng, kind=kind, splice=False, swap=swapped, asin_swap=swapped)
            first = drill["gen_mask"].index(1)
            prompt = torch.tensor([drill["input_ids"][:first]], device=device)
            target = drill["input_ids"][first:]
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(target),
                                 do_sample=False, pad_token_id=pad_id)
            correct += out[0, first:].tolist() == target
        accuracy[kind] = correct / per_kind
    model.train(was_training)
    return accuracy
