"""Turn drills: a short pretraining that teaches a from-scratch tiny decoder to copy from its context.

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
"""

from __future__ import annotations

import random
import sys
from typing import Sequence

import torch
from tqdm import tqdm

from ..webshop import WebShop, WebShopEnv
from .chat import ChatFormat
from .demonstrations import reply_for
from .logprobs import generated_nll
from .rollout import pad_batch
from .scripted import OraclePolicy, strip_price

#: The page kinds a drill is drawn from, in episode order.
DRILL_PAGES = ("index", "search_results", "item_page")


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
    """

    def __init__(self, shop: WebShop, chat: ChatFormat, tokenizer, goal_indices: Sequence[int],
                 splice: float = 0.5, max_steps: int = 15) -> None:
        if not goal_indices:
            raise ValueError("turn drills need at least one goal")
        self.shop, self.chat, self.tokenizer = shop, chat, tokenizer
        self.goal_indices = list(goal_indices)
        self.splice = splice
        self.env = WebShopEnv(shop, max_steps=max_steps)
        self.oracle = OraclePolicy()

    def _first_turns(self, goal_index: int) -> dict[str, tuple[int, str, dict, str]]:
        """``page kind -> (turn, observation, available actions, oracle reply)`` for each kind's first turn."""
        env = self.env
        observation = env.reset(goal_index)
        self.oracle.reset(env.goal)
        turns, done = {}, False
        while not done:
            available = env.available_actions()
            action = self.oracle.act(observation, available)
            kind = env.page.kind
            if kind in DRILL_PAGES and kind not in turns:
                turns[kind] = (env.num_steps, observation, available, reply_for(action, env))
            observation, _, done, _ = env.step(action)
        return turns

    def draw(self, rng: random.Random, kind: str | None = None, splice: bool | None = None) -> dict[str, list[int]]:
        """One drill: ``{"input_ids": [...], "gen_mask": [...]}``, the mask 1 exactly on the reply's tokens.

        Args:
            kind: the page kind (one of ``DRILL_PAGES``), or None for a random one.
            splice: force or forbid a spliced instruction on a search drill (None: with probability ``splice``).
        """
        goal_index = rng.choice(self.goal_indices)
        turns = self._first_turns(goal_index)
        kind = kind if kind in turns else rng.choice(sorted(turns))
        turn, observation, available, reply = turns[kind]
        instruction = self.env.goal["instruction_text"]
        user = self.chat.turn_message(turn + 1, self.env.max_steps - turn if self.env.max_steps else None,
                                      observation, available)
        if kind == "index" and (rng.random() < self.splice if splice is None else splice):
            other = self.shop.goals[rng.choice(self.goal_indices)]["instruction_text"]
            spliced = splice_instructions(rng, instruction, other)
            user = user.replace(instruction, spliced)
            reply = reply.replace(self.oracle.queries[0], strip_price(spliced))
            instruction = spliced
        messages = self.chat.messages(instruction, [(user, None)])
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        reply_ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        return {"input_ids": prompt_ids + reply_ids, "gen_mask": [0] * len(prompt_ids) + [1] * len(reply_ids)}


@torch.no_grad()
def copy_accuracy(model, drills: TurnDrills, per_kind: int = 16, seed: int = 1) -> dict[str, float]:
    """Fraction of drills (no splicing) whose reply the model reproduces exactly with greedy decoding, per page kind.

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
            drill = drills.draw(rng, kind=kind, splice=False)
            first = drill["gen_mask"].index(1)
            prompt = torch.tensor([drill["input_ids"][:first]], device=device)
            target = drill["input_ids"][first:]
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=len(target),
                                 do_sample=False, pad_token_id=pad_id)
            correct += out[0, first:].tolist() == target
        accuracy[kind] = correct / per_kind
    model.train(was_training)
    return accuracy


def copy_pretrain(model, drills: TurnDrills, steps: int = 400, batch_size: int = 32, learning_rate: float = 2e-3,
                  seed: int = 0) -> list[float]:
    """Train ``model`` in place on ``steps`` batches of turn drills (AdamW, linear warm-up then constant).

    Returns:
        The loss of every step (mean cross-entropy per reply token, nats).
    """
    rng = random.Random(seed)
    model.train()
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    warmup = max(1, steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    losses = []
    for _ in tqdm(range(steps), desc="turn drills", file=sys.stderr):
        batch = pad_batch([drills.draw(rng) for _ in range(batch_size)], drills.tokenizer.pad_token_id)
        batch = {k: v.to(device) for k, v in batch.items()}
        loss = generated_nll(model, batch["input_ids"], batch["attention_mask"], batch["gen_mask"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses
