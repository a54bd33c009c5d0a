"""Advantage-weighted SFT: supervised learning on the policy's own trajectories, each weighted by its advantage.

The diagnosis document's ("TinyZero") form, with the A*-PO value as baseline:

    adv_b  = r_b − V*(x_b);   â_b = clamp( (adv_b − mean(adv)) / (std(adv) + ε), −3, 3 )     (over the batch)
    w_b    = clamp( â_b + 1, 0.1, 5 )                                                          ("linear")
    L      = mean_b( w_b · CE_b ) + kl_coef · KL(π‖π_ref)

with CE_b the mean token cross-entropy of trajectory b's generated tokens and the KL Schulman's k3 estimator per
generated token, averaged over the batch's generated tokens. ``weighting="exp"`` uses the exponential weights of
AWR (Peng et al. 2019, "Advantage-Weighted Regression", Eq. 11): ``w_b = min(exp(adv_b / τ), max_weight)``.
Weights are constants (detached). Every weight is positive, so no trajectory is pushed down: a bad one is only
imitated less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor

from ..checks import masked, require_batch_vector, require_ndim, require_positive_finite, require_same_shape
from ...utils.settings import check_settings
from .base import Objective, PackedBatch, k3_kl

NORM_CLIP, WEIGHT_MIN, WEIGHT_MAX, EPS = 3.0, 0.1, 5.0, 1e-8


def awr_weights(advantage: Tensor, weighting: str = "linear", tau: float = 1.0, max_weight: float = 20.0) -> Tensor:
    """Per-trajectory weights from advantages ``r − V*`` (module docstring).

    Args:
        advantage: (B,) float.

    Returns:
        (B,) float32, detached, in [0.1, 5] ("linear") or (0, max_weight] ("exp").

    Raises:
        ValueError: an unknown ``weighting``, or ``tau``/``max_weight`` not > 0.
    """
    adv = advantage.detach().float()
    if weighting == "linear":
        normalised = (adv - adv.mean()) / (adv.std(correction=0) + EPS)  # (B,) population std: B = 1 gives 0
        return (normalised.clamp(-NORM_CLIP, NORM_CLIP) + 1.0).clamp(WEIGHT_MIN, WEIGHT_MAX)
    if weighting == "exp":
        tau = require_positive_finite("tau", tau)
        max_weight = require_positive_finite("max_weight", max_weight)
        return torch.exp(adv / tau).clamp(max=max_weight)
    raise ValueError(f"weighting must be 'linear' or 'exp', got {weighting!r}")


def awr_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, reward: Tensor, v_star: Tensor, weighting: str = "linear",
             tau: float = 1.0, max_weight: float = 20.0, kl_coef: float = 0.01) -> tuple[Tensor, dict[str, Tensor]]:
    """The advantage-weighted SFT loss (module docstring).

    Args:
        logp: (B, L) float, log π of the generated tokens (with gradients).
        ref_logp: (B, L) float, log π_ref of the same tokens.
        mask: (B, L), non-zero on generated tokens.
        reward: (B,) float. v_star: (B,) float.

    Returns:
        ``(loss 0-d float32, stats)``: ``weighted_ce`` (the first term), ``kl_penalty``, ``weight_mean``,
        ``weight_max``, ``advantage_mean``. A row with no generated token has CE = 0.

    Raises:
        ValueError: shapes disagree, a bad ``weighting``/``tau``/``max_weight``, or ``kl_coef`` < 0.
    """
    logp = require_ndim("logp", logp, 2, "(B, L)")
    ref_logp = require_same_shape("ref_logp", ref_logp, "logp", logp)
    mask = require_same_shape("mask", mask, "logp", logp).bool()
    reward = require_batch_vector("reward", reward, logp.shape[0])
    v_star = require_batch_vector("v_star", v_star, logp.shape[0])
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    advantage = reward.detach().float() - v_star.detach().float()  # (B,)
    weights = awr_weights(advantage, weighting, tau, max_weight)  # (B,)
    lp = masked(logp, mask)  # (B, L)
    tokens = mask.float().sum(dim=-1)  # (B,)
    ce = -lp.sum(dim=-1) / tokens.clamp(min=1.0)  # (B,) mean token cross-entropy of each trajectory
    weighted_ce = (weights * ce).mean()
    kl = k3_kl(lp, masked(ref_logp.detach(), mask), mask).sum() / tokens.sum().clamp(min=1.0)
    loss = weighted_ce + kl_coef * kl
    with torch.no_grad():
        stats = {"weighted_ce": weighted_ce.detach(), "kl_penalty": kl.detach(), "weight_mean": weights.mean(),
                 "weight_max": weights.max(), "advantage_mean": advantage.mean()}
    return loss, stats


@dataclass(frozen=True)
class AWR(Objective):
    """Advantage-weighted SFT on the policy's own trajectories, with the A*-PO V* as baseline.

    The module docstring gives the weights; :func:`awr_loss` the loss.

    Args:
        weighting: "linear" (``clamp(â + 1, 0.1, 5)`` of the batch-normalised advantage, the seed project's form)
            or "exp" (AWR, Peng et al. 2019, Eq. 11: ``min(exp(adv / τ), max_weight)``).
        tau: τ > 0 of the exponential weights.
        max_weight: the cap of the exponential weights, > 0 (AWR's 20).
        kl_coef: the weight of the per-token KL to π_ref, >= 0.

    Raises:
        ValueError: an unknown ``weighting``, ``tau`` or ``max_weight`` not > 0, or ``kl_coef`` < 0.
    """

    name: ClassVar[str] = "awr"
    weighting: Literal["linear", "exp"] = "linear"
    tau: float = 1.0
    max_weight: float = 20.0
    kl_coef: float = 0.01

    def __post_init__(self) -> None:
        check_settings("", [("weighting", self.weighting, self.weighting in ("linear", "exp"), "'linear' or 'exp'"),
                            *((name, value, math.isfinite(value) and value > 0, "a finite number > 0")
                              for name, value in (("tau", self.tau), ("max_weight", self.max_weight))),
                            ("kl_coef", self.kl_coef, self.kl_coef >= 0, ">= 0")])

    def loss(self, batch: PackedBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """:func:`awr_loss` on the batch."""
        return awr_loss(batch.logp, batch.ref_logp, batch.mask, batch.reward, batch.v_star, self.weighting,
                        self.tau, self.max_weight, self.kl_coef)
