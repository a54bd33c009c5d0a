"""A*-PO stage 2 (Brantley et al. 2025, "Accelerating RL for LLM Reasoning with Optimal Advantage Regression",
arXiv:2505.20686, §3): least-squares regression of the implicit advantage ``β2 · log π/π_ref`` of one on-policy
trajectory per goal onto the optimal advantage ``r − V*(x)`` estimated in stage 1. Authors' code:
github.com/ZhaolinGao/A-PO, ``verl/trainer/apo/core_algos.py::compute_policy_loss``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ..checks import masked, require_batch_vector, require_ndim, require_positive_finite, require_same_shape
from ...utils.settings import check_settings
from .base import Objective, PackedBatch


def apo_loss(
    logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    reward: Tensor,
    v_star: Tensor,
    beta2: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """A*-PO stage-2 least-squares regression loss (one on-policy trajectory per goal).

    ``L = mean_b ( β2 · Σ_{t∈gen} [log π(y_t|·) − log π_ref(y_t|·)] − (r_b − V̂*(x_b)) )²``

    Brantley et al. 2025 (arXiv:2505.20686), §3 "Stage 2": regress the implicit advantage ``β2 ln π/π_ref`` of the
    sampled trajectory onto the estimated optimal advantage ``r(x, y) − V̂*(x)`` (Eq. (4) of v1). As in the authors'
    ``compute_policy_loss``: the log-ratio is a **sum** over generated tokens (not a mean), there is no clipping, no
    importance ratio, no critic and no advantage normalisation; the squared residuals are averaged over the batch.

    Gradient flows into ``logp`` only: ``ref_logp``, ``reward`` and ``v_star`` are detached.

    Args:
        logp: (B, L) float32, log-probabilities of the sampled tokens under the current policy π (with grad).
        ref_logp: (B, L) float, the same under the frozen reference π_ref.
        mask: (B, L), non-zero on model-generated tokens.
        reward: (B,) float, trajectory reward r(x, y).
        v_star: (B,) float, V̂*(x) of each trajectory's goal (see :func:`v_star_from_rewards`).
        beta2: stage-2 KL temperature, a finite float > 0 (paper default 1e-3).

    Returns:
        ``(loss, stats)``: ``loss`` a 0-d float32 tensor; ``stats`` a dict of detached 0-d float32 tensors:

        * ``beta2_log_ratio``: mean over the batch of ``β2 · Σ_t (logp − ref_logp)``;
        * ``advantage_mean`` / ``advantage_std``: mean and population std (``correction=0``, so ``B = 1`` gives 0,
          not nan) of ``r − V*``.

        The KL to π_ref is logged for every objective alike (``base.kl_statistics``).

    Raises:
        ValueError: on any shape mismatch, or if ``beta2`` is not a finite number > 0.
    """
    logp = require_ndim("logp", logp, 2, "(B, L)")
    ref_logp = require_same_shape("ref_logp", ref_logp, "logp", logp)
    mask = require_same_shape("mask", mask, "logp", logp).bool()
    batch = logp.shape[0]
    reward = require_batch_vector("reward", reward, batch)
    v_star = require_batch_vector("v_star", v_star, batch)
    beta2 = require_positive_finite("beta2", beta2)

    lp = masked(logp, mask)  # (B, L), 0 off the generated tokens
    ref = masked(ref_logp.detach(), mask)  # (B, L)
    log_ratio = (lp - ref).sum(dim=-1)  # (B,)  Σ_t log π/π_ref over generated tokens
    advantage = reward.detach().float() - v_star.detach().float()  # (B,)  r − V*
    residual = beta2 * log_ratio - advantage  # (B,)
    loss = residual.pow(2).mean()

    with torch.no_grad():
        stats = {
            "beta2_log_ratio": (beta2 * log_ratio.detach()).mean(),
            "advantage_mean": advantage.mean(),
            "advantage_std": advantage.std(correction=0),
        }
    return loss, stats


@dataclass(frozen=True)
class APO(Objective):
    """A*-PO stage 2 (Brantley et al. 2025): ``β2 · log π/π_ref`` regressed onto ``r − V*``, one trajectory a goal.

    :func:`apo_loss` on the batch.

    Args:
        beta2: the stage-2 KL temperature β2, a finite number > 0 (paper default 1e-3). The regression target of a
            trajectory's summed log-ratio is ``(r − V*) / β2``: a larger β2 keeps the policy nearer π_ref. The
            paper's 1e-3 goes with its learning rate 1e-6; at the learning rates of this project's configs (1e-4) the
            configs use 0.05 to 0.1 (docs/experiments.md measures both).

    Raises:
        ValueError: ``beta2`` is not a finite number > 0.
    """

    name: ClassVar[str] = "apo"
    beta2: float = 1e-3

    def __post_init__(self) -> None:
        check_settings("", [("beta2", self.beta2, math.isfinite(self.beta2) and self.beta2 > 0,
                             "a finite number > 0")])

    def loss(self, batch: PackedBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """:func:`apo_loss` on the batch; ``stats`` adds ``v_star_mean``."""
        loss, stats = apo_loss(batch.logp, batch.ref_logp, batch.mask, batch.reward, batch.v_star, self.beta2)
        stats["v_star_mean"] = batch.v_star.mean()
        return loss, stats
