"""Prompt segmentation: how an episode's chat becomes token sequences under a context budget.

The whole history is one chat (RAGEN): a trajectory is a single segment, each turn's delta (end of the reply, next
user message, generation prompt) appended to the previous tokens, so the KV cache of the last turn stays valid. A new
segment starts only when the context budget would be exceeded and the context is rebuilt. Earlier replies re-rendered
as context in a new segment are text, masked 0; only tokens sampled in a segment carry mask 1 there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .chat import ChatFormat, cut_middle
from .trajectory import Segment, Trajectory

_SENTINEL = "\x00APO_REPLY\x00"


@dataclass
class ChatHistory:
    """What an episode's prompt is built from.

    Attributes:
        message: the current turn's user message (a page identical to the previous one shortened to one line).
        full_message: the same with the page always in full.
        turn_messages: the user message of every completed turn.
        full_turn_messages: the same with pages in full.
        replies: every completed turn's reply.
        history_start: the first turn whose messages are in the current segment.
    """

    message: str = ""
    full_message: str = ""
    turn_messages: list[str] = field(default_factory=list)
    full_turn_messages: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    history_start: int = 0

    def complete_turn(self, reply: str) -> None:
        """Move the current turn's messages into the history with its reply."""
        self.turn_messages.append(self.message)
        self.full_turn_messages.append(self.full_message)
        self.replies.append(reply)


class PromptSegmenter:
    """Renders an episode's chat through the tokenizer's chat template into segments.

    Args:
        tokenizer: a tokenizer with a chat template.
        chat: the prompt format (context budget).
        max_new_tokens: room kept for the reply in every context.
        eos_ids: token ids that end a reply (a reply ended by one is not closed twice).

    Raises:
        ValueError: the context budget leaves no room for a prompt.
    """

    def __init__(self, tokenizer, chat: ChatFormat, max_new_tokens: int, eos_ids: set[int]):
        if chat.context_budget <= max_new_tokens + 16:
            raise ValueError(f"context_budget {chat.context_budget} leaves no room for a prompt when "
                             f"max_new_tokens is {max_new_tokens}")
        self.tokenizer, self.chat, self.max_new_tokens, self.eos_ids = tokenizer, chat, max_new_tokens, eos_ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens added."""
        # verbose=False: ``new_segment`` measures candidate contexts longer than the model's limit on purpose (then
        # drops turns until one fits), which would otherwise log transformers' "longer than the specified maximum
        # sequence length" warning although no such input ever reaches the model.
        return self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]

    def _render(self, instruction: str, turns: list[tuple[str, str | None]]) -> str:
        messages = self.chat.messages(instruction, turns)
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    @staticmethod
    def _turns(history: ChatHistory, start: int, current: str) -> list[tuple[str, str | None]]:
        """(user message, reply) of turns ``start``… and then ``current``. The first turn in the context shows its
        page in full even if it repeated the page before it, so a shortened page always has its full copy above."""
        turn = len(history.replies)
        pairs: list[tuple[str, str | None]] = [
            (history.full_turn_messages[i] if i == start else history.turn_messages[i], history.replies[i])
            for i in range(start, turn)]
        return pairs + [(current, None)]

    def new_segment(self, trajectory: Trajectory, history: ChatHistory) -> Segment:
        """Render the context from scratch (system, task and the most recent turns the budget allows) as a new
        segment of ``trajectory``, and return it.

        Raises:
            ValueError: the budget cannot hold even the task message with the current page cut short.
        """
        turn = len(history.replies)
        start = 0
        budget = self.chat.context_budget - self.max_new_tokens
        with_earlier_turns = int(budget * self.chat.rebuild_fill)  # room left for the next turns' deltas
        cut: str | None = None  # the current message, cut to fit
        while True:
            current = cut if cut is not None else (history.full_message if start == turn else history.message)
            ids = self.encode(self._render(trajectory.instruction, self._turns(history, start, current)))
            if len(ids) <= (with_earlier_turns if start < turn else budget):
                break
            if start < turn:
                start += 1  # drop the oldest turn
                continue
            # the current page alone does not fit: cut its middle, proportionally to the excess
            keep = int(len(current) * budget / len(ids)) - 16
            if keep < 32:
                raise ValueError(f"context_budget {self.chat.context_budget} cannot hold the task message")
            cut = cut_middle(current, keep)
        history.history_start = start
        segment = Segment([], [], [], first_turn=turn)
        segment.append(ids, generated=False)
        trajectory.segments.append(segment)
        return segment

    def next_turn(self, trajectory: Trajectory, history: ChatHistory, last_token: int) -> bool:
        """Prepare the next turn's prompt: append its delta to the current segment, or start a new segment when
        the budget would be exceeded.

        Returns:
            True when a new segment was started (its context must be encoded from scratch).
        """
        segment = trajectory.segments[-1]
        # delta = what the template puts after the assistant's reply: end of turn, next user message, prompt
        turns = self._turns(history, history.history_start, history.message)
        turns[-2] = (turns[-2][0], _SENTINEL)
        delta_text = self._render(trajectory.instruction, turns).split(_SENTINEL, 1)[1]
        if last_token in self.eos_ids:  # the model closed its turn itself: don't close it twice
            eos_text = self.tokenizer.decode([last_token])
            if delta_text.startswith(eos_text):
                delta_text = delta_text[len(eos_text):]
        delta = self.encode(delta_text)
        if len(segment.token_ids) + len(delta) + self.max_new_tokens > self.chat.context_budget:
            self.new_segment(trajectory, history)
            return True
        segment.append(delta, generated=False)
        return False
