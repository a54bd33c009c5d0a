"""The RAGEN chat format for WebShop: prompts from environment states, actions from model replies.

One trajectory is one chat (RAGEN, Wang et al. 2025, §3 and its WebShop env config): a system message, a task
message with the instruction and the answer format, then per turn a user message with the current page and the
available actions, and the model's reply ``<think>…</think><answer>ACTION</answer>``. Rendering goes through the
tokenizer's chat template, so the same code serves the tiny model, SmolLM2 and Qwen2.5.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from ..utils.settings import check_settings

DEFAULT_SYSTEM_PROMPT = "You are a shopping agent. You browse an online shop to buy the product a customer asks for."
DEFAULT_TASK_PROMPT = (
    "Buy the product that best matches this instruction.\n"
    "Instruction: {instruction}\n"
    "Search first, open a matching product, click its options (such as size and color) named in the "
    "instruction, then click buy now. Reply with <think>your reasoning</think><answer>one action</answer>, "
    "where the action is search[query] or click[item] with an item shown in brackets."
)
#: Where a reply's answer opens (``parse_reply``; ``constrained`` finds the click being typed after it).
ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)(?:</think>|<answer>|$)", re.IGNORECASE | re.DOTALL)
_RICH_BUTTON = re.compile(r"^\[(clicked )?button\] (.*) \[(?:clicked )?button_\]$")
_ACTION = re.compile(r"\b(search|click)\s*\[([^\[\]\n]+)\]", re.IGNORECASE)
#: Why a reply gave no action (counted in metrics).
NO_ANSWER_TAG, NO_ACTION_IN_ANSWER, EMPTY_REPLY = "no_answer_tag", "no_action_in_answer", "empty_reply"
#: How a page identical to the previous turn's is shown (``ChatFormat.repeat_pages``).
RepeatPages = Literal["full", "short"]


@dataclass(frozen=True)
class ParsedReply:
    """A model reply, parsed.

    Attributes:
        thought: the text inside <think>…</think> (or before <answer> when there is no think tag), stripped.
        action: ``search[...]`` or ``click[...]`` to send to the env, or None when the reply has none.
        error: None, or why there is no action (``no_answer_tag``, ``no_action_in_answer``, ``empty_reply``).
        num_actions: how many actions the answer held (the first is taken; more than one is counted).
    """

    thought: str
    action: str | None
    error: str | None
    num_actions: int = 0


def parse_reply(reply: str) -> ParsedReply:
    """Parse a reply leniently.

    Rules, in order: the answer is the text after the first ``<answer>`` (any case) up to the next ``</answer>``,
    or to the end when the tag is unclosed (a reply cut by the token limit); the action is the first
    ``search[...]``/``click[...]`` in it, name lower-cased, brackets not nested and on one line, argument
    stripped. No ``<answer>`` tag, or no action inside it, gives ``action=None`` and an ``error``, which the
    rollout turns into a no-op step and the format penalty.
    """
    if not reply.strip():
        return ParsedReply("", None, EMPTY_REPLY)
    think = _THINK.search(reply)
    opening = ANSWER_OPEN.search(reply)
    if think:
        thought = think.group(1)
    else:
        thought = reply[: opening.start()] if opening else reply
    if opening is None:
        return ParsedReply(thought.strip(), None, NO_ANSWER_TAG)
    closing = _ANSWER_CLOSE.search(reply, opening.end())
    answer = reply[opening.end(): closing.start() if closing else len(reply)]
    actions = _ACTION.findall(answer)
    if not actions:
        return ParsedReply(thought.strip(), None, NO_ACTION_IN_ANSWER)
    name, arg = actions[0]
    return ParsedReply(thought.strip(), f"{name.lower()}[{arg.strip()}]", None, len(actions))


def observation_lines(observation: str) -> list[str]:
    """The page content of an env observation without the instruction (shown once, in the task message).

    Works for both observation modes: ``text`` nodes are split at ' [SEP] ', ``text_rich`` at newlines, with its
    ``[button] X [button_]`` markup reduced to ``X`` and a selected option to ``X (clicked)``.
    """
    parts = observation.split(" [SEP] ") if " [SEP] " in observation else observation.split("\n")
    parts = [_RICH_BUTTON.sub(lambda m: m.group(2) + (" (clicked)" if m.group(1) else ""), p.strip()) for p in parts]
    if "Instruction:" in parts:
        i = parts.index("Instruction:")
        parts = parts[:i] + parts[i + 2:]
    return [p for p in parts if p and p != "WebShop"]


def render_page(observation: str, available_actions: dict[str, Any]) -> str:
    """The page compactly: one node per line, clickable nodes in brackets (``[Next >]``, ``[B07HRFSNL4]``).

    Marking the clickables in place lists the available clicks without repeating them (an item page can have 50
    option values); 'search' on the start page is not marked because the env refuses to click it.
    """
    clickables = set(available_actions["clickables"]) - {"search"}
    lines = []
    for line in observation_lines(observation):
        text, clicked = (line[:-10], " (clicked)") if line.endswith(" (clicked)") else (line, "")
        lines.append(f"[{text}]{clicked}" if text.lower() in clickables else line)
    return "\n".join(lines)


def render_actions(available_actions: dict[str, Any]) -> str:
    """The kinds of action available: ``search[<query>]`` and/or a click on a bracketed item."""
    pieces = []
    if available_actions["has_search_bar"]:
        pieces.append("search[<query>]")
    if set(available_actions["clickables"]) - {"search"}:
        pieces.append("click[<an item in brackets>]")
    return " or ".join(pieces) if pieces else "none"


@dataclass
class ChatFormat:
    """Settings of the prompt format (what a finished episode earns is ``webshop.settings.RewardSettings``).

    Args:
        system_prompt: the system message.
        task_prompt: the task message; ``{instruction}`` is replaced by the goal's instruction.
        context_budget: maximum prompt + reply length in tokens. The whole trajectory is one chat (RAGEN); when the
            next turn would not fit, the context is rebuilt from the system and task messages plus as many of the
            most recent turns as fit (oldest dropped first); if the current page alone does not fit, its middle is
            cut (``…``).
        rebuild_fill: the share of the budget (0 < f <= 1) that a rebuilt context may fill with earlier turns. At 1
            it holds as many turns as fit, so in a long episode every later turn overflows again and its whole
            context is encoded anew (no KV-cache reuse); below 1 the next turns are appended to the rebuilt context
            until it fills, at the cost of fewer earlier turns in view.
        max_observation_chars: cut any single page to this many characters first (0 = no cut).
        repeat_pages: "full" shows every page in full (RAGEN); "short" replaces a page identical to the previous
            turn's by one line (saves hundreds of tokens per option click).
    """

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    task_prompt: str = DEFAULT_TASK_PROMPT
    context_budget: int = 4096
    rebuild_fill: float = 1.0
    max_observation_chars: int = 0
    repeat_pages: RepeatPages = "short"

    def __post_init__(self) -> None:
        """Raise ValueError naming the first setting out of range, as ``chat.<setting>`` (``check_settings``)."""
        check_settings("chat.", [
            ("repeat_pages", self.repeat_pages, self.repeat_pages in get_args(RepeatPages),
             f"one of {get_args(RepeatPages)}"),
            ("max_observation_chars", self.max_observation_chars, self.max_observation_chars >= 0, ">= 0 (0 = no cut)"),
            ("context_budget", self.context_budget, self.context_budget >= 64, ">= 64 (tokens)"),
            ("rebuild_fill", self.rebuild_fill, 0 < self.rebuild_fill <= 1, "in (0, 1] (a share of context_budget)")])

    def key_parts(self) -> dict[str, Any]:
        """Every setting, for cache keys (stage-1 V* tables, demonstrations)."""
        return asdict(self)

    def turn_message(self, turn: int, turns_left: int | None, observation: str, available_actions: dict[str, Any],
                     previous_observation: str | None = None, last_action: str | None = None) -> str:
        """The user message of turn ``turn`` (1-based): the page and the actions.

        With ``repeat_pages="short"``, a page identical to the previous turn's (an option click re-renders the same
        item page in text mode) is shown as one line naming the last action instead of in full.
        """
        if self.repeat_pages == "short" and observation == previous_observation:
            page = f"(the same page as before; you did {last_action})" if last_action else "(the same page as before)"
        else:
            page = render_page(observation, available_actions)
            if self.max_observation_chars and len(page) > self.max_observation_chars:
                page = cut_middle(page, self.max_observation_chars)
        left = f" ({turns_left} action{'' if turns_left == 1 else 's'} left)" if turns_left is not None else ""
        return f"Turn {turn}{left}:\n{page}\nActions: {render_actions(available_actions)}"

    def task_message(self, instruction: str) -> str:
        """The task message for a goal's instruction."""
        return self.task_prompt.format(instruction=instruction)

    def messages(self, instruction: str, turns: list[tuple[str, str | None]]) -> list[dict[str, str]]:
        """Chat messages for ``turns`` = [(user turn message, reply or None for the current turn), ...].

        The task message is prepended to the first listed turn's user message.
        """
        messages = [{"role": "system", "content": self.system_prompt}]
        for i, (user, reply) in enumerate(turns):
            content = f"{self.task_message(instruction)}\n\n{user}" if i == 0 else user
            messages.append({"role": "user", "content": content})
            if reply is not None:
                messages.append({"role": "assistant", "content": reply})
        return messages


def cut_middle(text: str, max_chars: int) -> str:
    """Keep the first and last parts of ``text`` around an ellipsis so that it has at most ``max_chars`` chars."""
    if len(text) <= max_chars:
        return text
    if max_chars < 1:
        return ""
    head = max(0, (max_chars - 1) // 2)
    tail = max(0, max_chars - 1 - head)
    return text[:head] + "…" + (text[-tail:] if tail else "")
