"""A trained policy on an instruction a person types: one greedy episode over the catalog, shown turn by turn.

    python -m apo_lightning.eval ask --model models/webshop-1k-ref "I want a grey throw pillow cover, under 30 dollars"

The typed text becomes the instruction of a goal with no product behind it (``webshop.goals.instruction_goal``),
so the env lets the policy search, open products, click options and buy, but scores nothing. When the text is
exactly the instruction of one of the catalog's goals (``--goals``, ``--catalog-seed``), that goal is played
instead and the purchase gets its WebShop score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..rollout.chat import ChatFormat
from ..rollout.settings import RolloutSettings
from ..rollout.trajectory import Trajectory
from ..webshop import WebShop, WebShopEnv
from ..webshop.goals import instruction_goal

#: Characters of each page shown per turn.
EXCERPT_CHARS = 240


@dataclass
class Answer:
    """What the policy did with a typed instruction.

    Attributes:
        trajectory: the episode (its turns: page, thought, action).
        goal_index: the catalog goal whose instruction the text is exactly; None for any other text.
        asin: the ASIN bought (None: nothing was bought).
        title: the bought product's title (None without a purchase).
        options: the options clicked before Buy Now, option name -> value.
        score: the WebShop score (0…1; 0 without a purchase), only for a known goal (else None).
    """

    trajectory: Trajectory
    goal_index: int | None
    asin: str | None
    title: str | None
    options: dict[str, str]
    score: float | None


def check_instruction(instruction: str) -> None:
    """Raise ValueError for an empty (or all-space) instruction."""
    if not instruction.strip():
        raise ValueError("the instruction is empty: type what to buy, e.g. \"a grey throw pillow cover under 30 "
                         "dollars\"")


def known_goal(shop: WebShop, instruction: str) -> int | None:
    """The index of the first goal whose instruction is ``instruction`` (surrounding spaces ignored), else None."""
    text = instruction.strip()
    return next((i for i, goal in enumerate(shop.goals) if goal["instruction_text"].strip() == text), None)


def page_excerpt(observation: str, instruction: str, chars: int = EXCERPT_CHARS) -> str:
    """A page without its header (the "WebShop" and "Instruction:" nodes and the instruction itself), its nodes
    joined by " | " and cut to ``chars`` characters (an ellipsis marks a cut)."""
    separator = " [SEP] " if " [SEP] " in observation else "\n"
    nodes = [n.strip() for n in observation.split(separator)]
    nodes = [n for n in nodes if n and n not in ("WebShop", "Instruction:", instruction.strip())]
    text = " | ".join(nodes)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def ask(model, tokenizer, shop: WebShop, instruction: str, rollout: RolloutSettings = RolloutSettings(),
        chat: ChatFormat = ChatFormat(), observation_mode: str = "text", max_steps: int = 15) -> Answer:
    """Play ``model`` greedily on ``instruction`` over ``shop``'s catalog, one episode.

    Args:
        model, tokenizer: the policy (``models.loading.load_policy``).
        shop: the catalog; its goals decide whether ``instruction`` is a known goal (:func:`known_goal`).
        instruction: the text the policy is given.
        rollout: reply length and ``valid_clicks`` (greedy decoding whatever its temperature).
        chat: the prompt format the policy was trained with.
        observation_mode, max_steps: the env's settings.

    Returns:
        The :class:`Answer`.

    Raises:
        ValueError: ``instruction`` is empty.
    """
    check_instruction(instruction)
    goal_index = known_goal(shop, instruction)
    played = shop if goal_index is not None else shop.with_goals([instruction_goal(instruction.strip())])
    engine = rollout.engine(model, tokenizer, chat, greedy=True)
    env = WebShopEnv(played, observation_mode, max_steps=max_steps)
    trajectory = engine.rollout([env], [goal_index if goal_index is not None else 0], seed=0)[0]
    purchased = trajectory.purchased
    asin = purchased["asin"].upper() if purchased is not None else None
    product = shop.product_by_asin.get(asin) if asin is not None else None
    return Answer(trajectory=trajectory, goal_index=goal_index, asin=asin,
                  title=product["Title"] if product is not None else None,
                  options=dict(purchased["options"]) if purchased is not None else {},
                  score=trajectory.score if goal_index is not None else None)


def print_answer(answer: Answer, excerpt_chars: int = EXCERPT_CHARS, out: Callable[[str], None] = print) -> None:
    """Print each turn (page excerpt, or "(the same page)" when the last action changed nothing; thought; action or
    why there was none) and the purchase: ASIN, title, options, and the score for a known goal."""
    t = answer.trajectory
    where = f"goal {answer.goal_index} of the catalog" if answer.goal_index is not None else "not a catalog goal"
    out(f"instruction ({where}): {t.instruction}")
    for number, turn in enumerate(t.turns, 1):
        out(f"\nturn {number}")
        same = number > 1 and turn.observation == t.turns[number - 2].observation
        out(f"  page:    {'(the same page)' if same else page_excerpt(turn.observation, t.instruction, excerpt_chars)}")
        out(f"  thought: {turn.thought.strip() or '(none)'}")
        action = turn.action if turn.action is not None else f"(no action: {turn.format_error})"
        refused = "" if turn.valid_action or turn.action is None else "  (not on this page: nothing happened)"
        out(f"  action:  {action}{refused}")
    out("")
    if answer.asin is None:
        reason = "the step limit ended the episode" if t.truncated else "the episode ended"
        out(f"bought nothing: {reason} after {len(t.turns)} turns")
    else:
        options = ", ".join(f"{k}: {v}" for k, v in answer.options.items()) or "none clicked"
        out(f"bought {answer.asin}: {answer.title}")
        out(f"options: {options}")
    if answer.score is not None:
        out(f"score: {answer.score:.3f} (the WebShop score of goal {answer.goal_index}; 1.0 = success)")
