"""Trajectories: one WebShop episode as the policy lived it, turn by turn, with the token ids it sampled.

Names used throughout the project: a **turn** is one model reply and the env step it caused; the **score** is
WebShop's 0…1 reward at Buy Now (0 without a purchase); the **reward** is what the objective sees, the score (or
success, ``webshop.settings.RewardSettings``) plus the format penalty per reply without an action.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class Turn:
    """One turn: the page the model saw, its reply, the parsed action and what the env returned.

    Attributes:
        observation: the page (env observation) the reply answered.
        reply: the reply text as decoded.
        thought: the text of its ``<think>`` part.
        action: the action sent to the env (None: no parseable action; the step was a no-op).
        format_error: why there was no action (None when there was one).
        num_actions: how many actions the answer held (the first is taken).
        score: the env's reward for this step: the WebShop score at Buy Now, else 0.
        done: the episode ended at this turn.
        valid_action: the env executed the action.
        generated_tokens: tokens sampled for the reply.
        stop: why the reply ended: "answer" (``</answer>``), "eos" or "length".
    """

    observation: str
    reply: str
    thought: str
    action: str | None
    format_error: str | None
    num_actions: int
    score: float
    done: bool
    valid_action: bool
    generated_tokens: int
    stop: str


@dataclass
class Segment:
    """A token sequence of one trajectory: ids (T,), gen_mask (T,) 1 on sampled tokens, old_logp (T,) the sampling
    policy's log-probability of each sampled token (the old log π of PPO-style ratios), 0 elsewhere."""

    token_ids: list[int]
    gen_mask: list[int]
    old_logp: list[float]
    first_turn: int  # index of the first turn whose reply was sampled in this segment

    def append(self, ids: Sequence[int], generated: bool, old_logp: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.gen_mask.extend([1 if generated else 0] * len(ids))
        self.old_logp.extend(old_logp if old_logp is not None else [0.0] * len(ids))


@dataclass
class Trajectory:
    """One episode.

    Attributes:
        goal_index: the WebShop goal.
        instruction: its instruction text.
        turns: every turn in order.
        segments: the token sequences (one with full history; none for a scripted policy).
        score: the WebShop score at Buy Now (0…1), 0 without a purchase.
        reward: the RL reward r(x, y): score (or success) + format penalty × format errors
            (``webshop.settings.RewardSettings``).
        success: score == 1.0.
        reward_info: the env's verbose reward info at Buy Now (None without a purchase).
        purchased: ``{"asin", "options"}`` of the purchase (None without one).
        truncated: the step limit ended the episode.
    """

    goal_index: int
    instruction: str
    turns: list[Turn] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    score: float = 0.0
    reward: float = 0.0
    success: bool = False
    reward_info: dict | None = None
    purchased: dict | None = None
    truncated: bool = False

    @property
    def format_errors(self) -> int:
        """Replies without a parseable action."""
        return sum(t.format_error is not None for t in self.turns)

    @property
    def invalid_actions(self) -> int:
        """Parsed actions the env refused (no-op steps that were not format errors)."""
        return sum(t.action is not None and not t.valid_action for t in self.turns)

    @property
    def generated_tokens(self) -> int:
        """Tokens the policy sampled over the whole episode."""
        return sum(sum(s.gen_mask) for s in self.segments)

    def finish(self, score: float, info: dict, reward: float) -> None:
        """Record the end of the episode from the env's last ``info`` and the objective's ``reward``."""
        self.score = score
        self.success = score == 1.0
        self.reward_info = info.get("reward_info")
        self.truncated = info["truncated"]
        if "asin" in info:
            self.purchased = {"asin": info["asin"], "options": dict(info["options"])}
        self.reward = reward


def regression_record(trajectory: Trajectory) -> dict:
    """What a loss needs of a trajectory, as plain lists and numbers (storable with ``torch.save`` and loadable
    with ``weights_only=True``): its segments, score, reward and success; the turns' text is dropped."""
    return {"segments": [{"token_ids": list(s.token_ids), "gen_mask": list(s.gen_mask), "old_logp": list(s.old_logp),
                          "first_turn": s.first_turn} for s in trajectory.segments],
            "score": trajectory.score, "reward": trajectory.reward, "success": trajectory.success}


def regression_trajectory(goal_index: int, record: dict) -> Trajectory:
    """The :class:`Trajectory` of a :func:`regression_record` (no turns, no instruction text)."""
    return Trajectory(goal_index=goal_index, instruction="", segments=[Segment(**s) for s in record["segments"]],
                      score=record["score"], reward=record["reward"], success=bool(record["success"]))
