"""GRPO (Shao et al. 2024, "DeepSeekMath", arXiv:2402.03300, Eq. (3) and (4), §4.1.2 outcome supervision): G
rollouts per goal, advantages normalised within each goal's group, the clipped ratio and an optional k3 KL to
π_ref. The baseline the A*-PO paper compares against; TRL's ``GRPOTrainer`` for the conventions noted per function.
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


def grpo_advantages(
    reward: Tensor,
    groups: int | Tensor,
    eps: float = 1e-6,
) -> Tensor:
    """GRPO outcome-supervision advantages, normalised within each group of rollouts of the same goal.

    ``Â_i = (r_i − mean(r_group)) / (std(r_group) + eps)`` (DeepSeekMath, §4.1.2).

    **Std convention:** the *sample* (Bessel-corrected, ``N − 1``) standard deviation, i.e. ``torch.std``'s default —
    the paper does not specify it, and TRL's ``GRPOTrainer`` and verl both use ``torch.std``, so we match them for
    comparable numbers. Edge cases, chosen so they never produce nan:

    * a group whose rewards are all equal has std 0 and gets advantage exactly 0 (``0 / eps``);
    * a group of size 1 has no relative signal; its std is taken as 0 and its advantage is 0 (TRL would give nan,
      verl passes the raw reward through).

    Args:
        reward: (B,) float, one scalar reward per rollout.
        groups: either an int ``G`` — rollouts come in consecutive groups of ``G`` (``B % G == 0``), the layout of
            repeating each goal ``G`` times — or a (B,) integer tensor of group ids (any values, any order).
        eps: added to the std before dividing, > 0 recommended (default 1e-6, verl's value; TRL uses 1e-4).

    Returns:
        (B,) float32 advantages, detached (they are constants for the policy loss).

    Raises:
        ValueError: if ``reward`` is not 1-D, ``G`` does not divide ``B`` or is < 1, group ids are not a (B,) integer
            tensor, or ``eps`` is negative.
    """
    reward = require_ndim("reward", reward, 1, "(B,)")
    batch = reward.shape[0]
    if eps < 0 or not math.isfinite(eps):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if isinstance(groups, Tensor):
        if groups.shape != (batch,) or groups.is_floating_point() or groups.is_complex():
            raise ValueError(
                f"group ids must be an integer tensor of shape (B,) = ({batch},), "
                f"got dtype {groups.dtype} and shape {tuple(groups.shape)}"
            )
        _, inverse = torch.unique(groups.to(reward.device), return_inverse=True)  # (B,) in [0, n_groups)
    elif isinstance(groups, int) and not isinstance(groups, bool):
        if groups < 1 or batch % groups != 0:
            raise ValueError(f"group size G={groups} must be >= 1 and divide the batch size B={batch}")
        inverse = torch.arange(batch, device=reward.device) // groups  # (B,)
    else:
        raise ValueError(f"groups must be an int group size or a (B,) tensor of group ids, got {type(groups).__name__}")

    r = reward.detach().to(torch.float64)  # (B,)
    n_groups = int(inverse.max().item()) + 1 if batch > 0 else 0
    count = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inverse, torch.ones_like(r))
    total = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inverse, r)
    mean = total / count  # (n_groups,)
    centred = r - mean[inverse]  # (B,)
    sq = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inverse, centred.pow(2))
    var = torch.where(count > 1, sq / (count - 1).clamp(min=1), torch.zeros_like(sq))  # sample variance; 0 for size 1
    std = var.sqrt()  # (n_groups,)
    return (centred / (std[inverse] + eps)).float()


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    mask: Tensor,
    advantages: Tensor,
    clip_eps: float = 0.2,
    beta_kl: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO's clipped surrogate loss with an optional k3 KL penalty to the reference policy.

    Per generated token ``t`` of rollout ``i``, with ``ρ = exp(logp − old_logp)`` and ``Â_i`` broadcast over tokens:

    ``ℓ_{i,t} = −min(ρ Â_i, clip(ρ, 1 − ε, 1 + ε) Â_i) + β_kl · [exp(ref − logp) − (ref − logp) − 1]``

    ``L = mean_i ( (1/|o_i|) Σ_{t∈gen(i)} ℓ_{i,t} )``

    This is the negated DeepSeekMath GRPO objective, Eq. (3) of arXiv:2402.03300, with the unbiased k3 KL estimator
    of its Eq. (4). **Aggregation** is the original GRPO form (TRL ``loss_type="grpo"``): token losses are averaged
    over each rollout's own generated tokens, then over the batch — so every rollout weighs the same whatever its
    length. A rollout with no generated token contributes 0 but still counts in the batch mean.

    Gradient flows into ``logp`` only (``old_logp``, ``ref_logp`` and ``advantages`` are detached). With a single
    update per batch, ``old_logp`` equals ``logp.detach()``, ``ρ = 1`` and nothing is clipped.

    Args:
        logp: (B, L) float32, log-probabilities of the sampled tokens under the current policy (with grad).
        old_logp: (B, L) float, the same under the policy that sampled them.
        ref_logp: (B, L) float under the frozen reference, or ``None`` when ``beta_kl == 0`` (then no KL stat).
        mask: (B, L), non-zero on model-generated tokens.
        advantages: (B,) float, e.g. from :func:`grpo_advantages`.
        clip_eps: PPO clip range ε, a finite float > 0.
        beta_kl: weight of the KL penalty, >= 0.

    Returns:
        ``(loss, stats)``: ``loss`` a 0-d float32 tensor; ``stats`` detached 0-d float32 tensors:

        * ``policy_loss``: the clipped-surrogate part of the loss alone;
        * ``clip_fraction``: fraction of all generated tokens in the batch whose clipped branch is active (zero
          gradient): ``(Â > 0 and ρ > 1 + ε) or (Â < 0 and ρ < 1 − ε)``;
        * ``ratio_mean``: mean of ``ρ`` over all generated tokens in the batch;
        * ``kl_penalty`` (only when ``ref_logp`` is given): the k3 KL, aggregated like the loss (per-rollout token
          mean, then batch mean), i.e. the quantity ``β_kl`` multiplies.

    Raises:
        ValueError: on any shape mismatch, ``clip_eps <= 0``, ``beta_kl < 0``, or ``beta_kl > 0`` without
            ``ref_logp``.
    """
    logp = require_ndim("logp", logp, 2, "(B, L)")
    old_logp = require_same_shape("old_logp", old_logp, "logp", logp)
    if ref_logp is not None:
        ref_logp = require_same_shape("ref_logp", ref_logp, "logp", logp)
    mask = require_same_shape("mask", mask, "logp", logp).bool()
    advantages = require_batch_vector("advantages", advantages, logp.shape[0])
    clip_eps = require_positive_finite("clip_eps", clip_eps)
    beta_kl = float(beta_kl)
    if not (math.isfinite(beta_kl) and beta_kl >= 0.0):
        raise ValueError(f"beta_kl must be a finite number >= 0, got {beta_kl!r}")
    if beta_kl > 0.0 and ref_logp is None:
        raise ValueError("beta_kl > 0 needs ref_logp (the reference policy's per-token log-probabilities)")

    lp = masked(logp, mask)  # (B, L)
    old = masked(old_logp.detach(), mask)  # (B, L)
    adv = advantages.detach().float().unsqueeze(-1)  # (B, 1), broadcast over tokens
    ratio = torch.exp(lp - old)  # (B, L); exactly 1 off-mask
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = -torch.minimum(ratio * adv, clipped * adv)  # (B, L)

    maskf = mask.float()
    n_tokens = maskf.sum(dim=-1)  # (B,)

    def per_rollout_mean(x: Tensor) -> Tensor:  # (B, L) -> (B,), mean over each rollout's generated tokens
        return (x * maskf).sum(dim=-1) / n_tokens.clamp(min=1.0)

    policy_loss = per_rollout_mean(surrogate).mean()
    loss = policy_loss
    kl_tok = None
    if ref_logp is not None:
        ref = masked(ref_logp.detach(), mask)
        with torch.set_grad_enabled(torch.is_grad_enabled() and beta_kl > 0.0):
            d = ref - lp  # (B, L) log π_ref/π
            kl_tok = torch.exp(d) - d - 1.0  # (B, L) k3 ≥ 0, 0 off-mask
        if beta_kl > 0.0:
            loss = loss + beta_kl * per_rollout_mean(kl_tok).mean()

    with torch.no_grad():
        total_tokens = maskf.sum().clamp(min=1.0)
        is_clipped = ((adv > 0) & (ratio > 1.0 + clip_eps)) | ((adv < 0) & (ratio < 1.0 - clip_eps))  # (B, L)
        stats = {
            "policy_loss": policy_loss.detach(),
            "clip_fraction": (is_clipped.float() * maskf).sum() / total_tokens,
            "ratio_mean": (ratio.detach() * maskf).sum() / total_tokens,
        }
        if kl_tok is not None:
            stats["kl_penalty"] = per_rollout_mean(kl_tok.detach()).mean()
    return loss, stats


@dataclass(frozen=True)
class GRPO(Objective):
    """GRPO (Shao et al. 2024, DeepSeekMath): rollouts compared within each goal's group; needs no V*.

    ``group_size`` rollouts per goal, advantages normalised within each goal's group (:func:`grpo_advantages`), the
    clipped ratio and an optional k3 KL to π_ref (:func:`grpo_loss`).

    Args:
        group_size: rollouts per goal G, >= 2 (a goal's rollouts are compared with each other).
        clip_eps: PPO clip range ε, a finite number > 0.
        beta_kl: weight of the k3 KL to π_ref (DeepSeekMath Eq. (4); the paper uses 0.04); 0 = none.

    Raises:
        ValueError: ``group_size`` < 2, ``clip_eps`` not > 0 or ``beta_kl`` < 0.
    """

    name: ClassVar[str] = "grpo"
    needs_v_star: ClassVar[bool] = False
    group_size: int = 4
    clip_eps: float = 0.2
    beta_kl: float = 0.0

    def __post_init__(self) -> None:
        check_settings("", [("group_size", self.group_size, self.group_size >= 2,
                             ">= 2 (GRPO compares the rollouts of a goal)"),
                            ("clip_eps", self.clip_eps, math.isfinite(self.clip_eps) and self.clip_eps > 0,
                             "a finite number > 0"),
                            ("beta_kl", self.beta_kl, math.isfinite(self.beta_kl) and self.beta_kl >= 0,
                             "a finite number >= 0")])

    @property
    def rollouts_per_goal(self) -> int:
        """``group_size``."""
        return self.group_size

    def loss(self, batch: PackedBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """:func:`grpo_loss` with the group advantages of the batch's rewards (groups: ``batch.group``); ``stats``
        adds ``advantage_mean`` and ``advantage_std``."""
        advantages = grpo_advantages(batch.reward, batch.group)
        loss, stats = grpo_loss(batch.logp, batch.old_logp, batch.ref_logp, batch.mask, advantages, self.clip_eps,
                                self.beta_kl)
        stats["advantage_mean"] = advantages.mean()
        stats["advantage_std"] = advantages.std(correction=0)
        return loss, stats
