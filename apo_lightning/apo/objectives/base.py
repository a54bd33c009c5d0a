"""The objective interface: what the RL module and data module ask an objective, and the batch it sees.

An objective is a small frozen dataclass whose fields are its settings (``APO(beta2=0.05)``): it says whether it
needs V* (stage 1), how many rollouts it needs per goal, and turns a :class:`PackedBatch` into ``(loss, stats)``
by calling its pure tensor loss function. The module and the data module ask the objective; they never branch on
its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import ClassVar

import torch
from torch import Tensor


@dataclass
class PackedBatch:
    """One training batch, one row per trajectory, generated tokens only (``logprobs.pack_generated``); L is the
    largest number of generated tokens of a trajectory in the batch.

    Attributes:
        logp: (B, L) float32, log π(y_t|·) of each generated token under the current policy, with gradients.
        ref_logp: (B, L) float32, the same under the frozen reference π_ref.
        old_logp: (B, L) float32, the same under the policy that sampled the trajectory (recorded at rollout; the
            trainer's own, detached, when vLLM sampled).
        mask: (B, L) float32, 1 on generated tokens, 0 on padding.
        reward: (B,) float32, the trajectory reward r(x, y) (score or success plus format penalties).
        v_star: (B,) float32, V*(x) of each trajectory's goal (0 when the objective needs no V*).
        group: (B,) int64, the same id for the trajectories of one goal (GRPO's groups).
        entropy: (B, L) float32, the policy's entropy at each generated position (nats), with gradients; 0 on padding.
    """

    logp: Tensor
    ref_logp: Tensor
    old_logp: Tensor
    mask: Tensor
    reward: Tensor
    v_star: Tensor
    group: Tensor
    entropy: Tensor | None = None

    def head(self, rows: int) -> PackedBatch:
        """The first ``rows`` rows (views, gradients kept)."""
        return PackedBatch(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[:rows]
                              for f in fields(self)})


class Objective(ABC):
    """A training objective. Each subclass is a frozen dataclass whose fields are the objective's settings, so its
    ``repr`` (``APO(beta2=0.05)``) names it and its settings, and two objectives are equal when
    their class and settings are.

    Attributes:
        name: the objective's name: the method in the results (``model.method_name`` by default) and in logs.
        needs_v_star: whether stage 1 (V* from reference samples) must run before training.
    """

    name: ClassVar[str]
    needs_v_star: ClassVar[bool] = True

    @property
    def rollouts_per_goal(self) -> int:
        """Trajectories sampled per goal in a training batch (1 unless the objective compares a goal's rollouts)."""
        return 1

    @abstractmethod
    def loss(self, batch: PackedBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``(loss 0-d float32 with gradients into batch.logp, stats {name: detached 0-d float32})``."""


def k3_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(π‖π_ref) per token, ``exp(ref − logp) − (ref − logp) − 1`` ≥ 0, 0 off-mask.

    ("Approximating KL divergence", 2020, http://joschu.net/blog/kl-approx.html.) Differentiable in ``logp``.

    Args:
        logp, ref_logp: (B, L) float32 per-token log-probabilities.
        mask: (B, L), non-zero on generated tokens.

    Returns:
        (B, L) float32.
    """
    d = torch.where(mask.bool(), ref_logp.detach().float() - logp.float(), torch.zeros((), device=logp.device))
    return torch.exp(d) - d - 1.0


def masked_token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` (B, L) over the positions where ``mask`` is non-zero (0 when there are none)."""
    mask = mask.bool()
    return torch.where(mask, values.float(), 0.0).sum() / mask.sum().clamp(min=1)


def kl_statistics(batch: PackedBatch) -> dict[str, Tensor]:
    """The policy's distance from π_ref on a batch, the same quantities for every objective (``train/...``).

    Returns:
        Detached 0-d float32 tensors: ``kl``, the mean over trajectories of ``Σ_t k3`` (:func:`k3_kl`; the KL of a
        whole trajectory, nats, ≥ 0); ``log_ratio``, the mean of ``Σ_t (log π − log π_ref)`` (the k1 estimator of
        the same, unbiased but noisy, can be < 0); and ``entropy``, the policy's mean entropy per generated token
        (when the batch has it).
    """
    with torch.no_grad():
        mask = batch.mask.bool()
        k3 = k3_kl(batch.logp.detach(), batch.ref_logp, mask).sum(dim=-1)  # (B,)
        k1 = torch.where(mask, batch.logp.detach().float() - batch.ref_logp.float(), 0.0).sum(dim=-1)  # (B,)
        stats = {"kl": k3.mean(), "log_ratio": k1.mean()}
        if batch.entropy is not None:
            stats["entropy"] = masked_token_mean(batch.entropy.detach(), mask)
        return stats
