"""Collation: trajectories (or any token sequences with a mask) into right-padded training tensors."""

from __future__ import annotations

from typing import Sequence

import torch

from .trajectory import Trajectory


def pad_batch(examples: list[dict], pad_id: int, per_token: Sequence[str] = ("gen_mask",)) -> dict[str, torch.Tensor]:
    """Right-pad examples of token lists to ``input_ids/attention_mask (B, T) int64`` and one ``(B, T) float32``
    tensor per key in ``per_token`` (0 after each example's end).

    Args:
        examples: dicts with ``"input_ids"`` (a list of ints) and, per key in ``per_token``, a list of floats of the
            same length.
        pad_id: token id written after each example's end.
        per_token: the float per-token keys to pad (default: the generated-token mask).
    """
    width = max(len(e["input_ids"]) for e in examples)
    shape = (len(examples), width)
    batch = {"input_ids": torch.full(shape, pad_id, dtype=torch.long),
             "attention_mask": torch.zeros(shape, dtype=torch.long)}
    batch.update({key: torch.zeros(shape, dtype=torch.float32) for key in per_token})
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        batch["input_ids"][i, :n] = torch.tensor(e["input_ids"], dtype=torch.long)
        batch["attention_mask"][i, :n] = 1
        for key in per_token:
            batch[key][i, :n] = torch.tensor(e[key], dtype=torch.float32)
    return batch


def collate_trajectories(trajectories: Sequence[Trajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded training tensors for a batch of trajectories.

    Returns:
        ``input_ids (S, T) int64``, ``attention_mask (S, T) int64``, ``gen_mask (S, T) float32`` (1 on sampled
        tokens), ``old_logp (S, T) float32`` (log π at sampling time, 0 elsewhere), ``traj_index (S,) int64``
        (which trajectory each segment belongs to), and per trajectory ``reward (B,)``, ``score (B,)``,
        ``success (B,)`` float32 and ``goal_index (B,)`` int64. S ≥ B: a trajectory has one segment, and one more each time its context outgrew ``chat.context_budget``.
    """
    segments = [(i, s) for i, t in enumerate(trajectories) for s in t.segments]
    batch = pad_batch([{"input_ids": s.token_ids, "gen_mask": s.gen_mask, "old_logp": s.old_logp} for _, s in segments],
                      pad_id, per_token=("gen_mask", "old_logp"))
    batch["traj_index"] = torch.tensor([i for i, _ in segments], dtype=torch.long)
    batch["reward"] = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)
    batch["score"] = torch.tensor([t.score for t in trajectories], dtype=torch.float32)
    batch["success"] = torch.tensor([float(t.success) for t in trajectories], dtype=torch.float32)
    batch["goal_index"] = torch.tensor([t.goal_index for t in trajectories], dtype=torch.long)
    return batch
