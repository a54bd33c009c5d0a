"""KL-anchored policy gradient: the objective of the minimal-PyTorch RAGEN + A*PO seed project.

A REINFORCE-style update on the **length-normalised** sequence log-probability, with the A*-PO value as baseline and
the KL to π_ref both inside the advantage and as a penalty:

    A_b = clamp( r_b + β · log(π_ref(y_b|x)/π(y_b|x)) − V*(x_b), −c, c )          (detached)
    L   = −mean_b( A_b · ℓ_b ) + λ · KL(π‖π_ref),     ℓ_b = (1/|y_b|) Σ_t log π(y_b,t|·)

where the KL is Schulman's k3 estimator per generated token, averaged over the batch's generated tokens. The seed
project trained it with the gradient norm clipped at 0.5 (``configs/objective/kl_pg.yaml`` sets the Trainer so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ..checks import masked, require_batch_vector, require_ndim, require_positive_finite, require_same_shape
from ...utils.settings import check_settings
from .base import Objective, PackedBatch, k3_kl


def kl_pg_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, reward: Tensor, v_star: Tensor, beta: float,
               kl_coef: float, clip: float) -> tuple[Tensor, dict[str, Tensor]]:
    """The KL-anchored policy-gradient loss (module docstring).

    Args:
        logp: (B, L) float, log π of the generated tokens (with gradients).
        ref_logp: (B, L) float, log π_ref of the same tokens.
        mask: (B, L), non-zero on generated tokens.
        reward: (B,) float, r(x, y).
        v_star: (B,) float, V*(x) of each trajectory's goal.
        beta, kl_coef: ≥ 0. clip: > 0.

    Returns:
        ``(loss 0-d float32, stats)``: ``policy_loss`` (the −mean A·ℓ term), ``kl_penalty`` (the per-token KL the
        loss weighs by λ), ``advantage_mean``, ``advantage_std`` (after clamping), ``clip_fraction`` (share of
        trajectories whose advantage was clamped). A row with no generated token has ℓ = 0 and adds no KL.

    Raises:
        ValueError: shapes disagree, ``beta``/``kl_coef`` < 0 or ``clip`` ≤ 0.
    """
    logp = require_ndim("logp", logp, 2, "(B, L)")
    ref_logp = require_same_shape("ref_logp", ref_logp, "logp", logp)
    mask = require_same_shape("mask", mask, "logp", logp).bool()
    reward = require_batch_vector("reward", reward, logp.shape[0])
    v_star = require_batch_vector("v_star", v_star, logp.shape[0])
    clip = require_positive_finite("clip", clip)
    if beta < 0 or kl_coef < 0:
        raise ValueError(f"beta and kl_coef must be >= 0, got beta={beta}, kl_coef={kl_coef}")

    lp = masked(logp, mask)  # (B, L)
    ref = masked(ref_logp.detach(), mask)  # (B, L)
    tokens = mask.float().sum(dim=-1)  # (B,)
    seq_mean_logp = lp.sum(dim=-1) / tokens.clamp(min=1.0)  # (B,) ℓ_b, length-normalised
    log_ratio = (lp.detach() - ref).sum(dim=-1)  # (B,) log π/π_ref of the whole trajectory
    raw = reward.detach().float() - beta * log_ratio - v_star.detach().float()  # (B,) r + β log(π_ref/π) − V*
    advantage = raw.clamp(-clip, clip)
    policy_loss = -(advantage * seq_mean_logp).mean()
    kl_tok = k3_kl(lp, ref, mask)  # (B, L), 0 off-mask
    kl = kl_tok.sum() / tokens.sum().clamp(min=1.0)  # mean over the batch's generated tokens
    loss = policy_loss + kl_coef * kl
    with torch.no_grad():
        stats = {"policy_loss": policy_loss.detach(), "kl_penalty": kl.detach(), "advantage_mean": advantage.mean(),
                 "advantage_std": advantage.std(correction=0),
                 "clip_fraction": (raw.abs() > clip).float().mean()}
    return loss, stats


@dataclass(frozen=True)
class KLPG(Objective):
    """The seed project's KL-anchored policy gradient, with the A*-PO V* as baseline.

    The objective of the minimal-PyTorch RAGEN + A*PO seed project (module docstring, :func:`kl_pg_loss`).

    Args:
        beta: β >= 0, the weight of the sequence log-ratio log(π_ref/π) inside the advantage (the KL-regularised
            reward).
        kl_coef: λ >= 0, the weight of the per-token KL penalty in the loss.
        clip: c > 0, advantages are clamped to [−c, c].

    Raises:
        ValueError: ``beta`` or ``kl_coef`` < 0, or ``clip`` not a finite number > 0.
    """

    name: ClassVar[str] = "kl_pg"
    beta: float = 0.05
    kl_coef: float = 0.01
    clip: float = 5.0

    def __post_init__(self) -> None:
        check_settings("", [("beta", self.beta, self.beta >= 0, ">= 0"),
                            ("kl_coef", self.kl_coef, self.kl_coef >= 0, ">= 0"),
                            ("clip", self.clip, math.isfinite(self.clip) and self.clip > 0, "a finite number > 0")])

    def loss(self, batch: PackedBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """:func:`kl_pg_loss` on the batch."""
        return kl_pg_loss(batch.logp, batch.ref_logp, batch.mask, batch.reward, batch.v_star, self.beta,
                          self.kl_coef, self.clip)
