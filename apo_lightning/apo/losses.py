"""Losses for A*-PO, GRPO and SFT, as pure functions of tensors.

Nothing here holds state, touches a model or does I/O: every function takes tensors and returns tensors (and, for
the RL losses, a dict of detached statistics for logging). Each one is unit-tested against a hand-computed case in
``tests/test_losses.py``.

Conventions shared by every function
------------------------------------
* ``B`` is the batch (one row per trajectory), ``T`` the padded token length of a trajectory, ``V`` the vocabulary.
* ``mask: (B, T)`` marks the tokens the *model generated* (RAGEN/StarPO: observation and prompt tokens are never in
  the loss). Any dtype is accepted; it is read as boolean (non-zero = generated).
* Per-token log-probabilities ``(B, T)`` are aligned with the token they score: position ``t`` holds
  ``log p(y_t | y_<t)`` (see :func:`token_logprobs`).
* Arithmetic is done in float32 (inputs in bf16/fp16 are upcast first); losses come back as 0-d float32 tensors.
* **Non-finite values.** Positions where ``mask == 0`` are replaced by 0 *before* any arithmetic, so a ``-inf`` or
  ``nan`` in padding never reaches the loss or its gradient. Non-finite values at generated positions, or in rewards,
  propagate into the loss as ``nan``/``inf``; detecting them is the caller's business.
* Shapes are validated; a mismatch raises :class:`ValueError` naming the argument and the shapes involved.

References
----------
* A*-PO: K. Brantley, M. Chen, Z. Gao, J. D. Lee, W. Sun, W. Zhan, X. Zhang, "Accelerating RL for LLM Reasoning with
  Optimal Advantage Regression", arXiv:2505.20686 (2025); authors' code github.com/ZhaolinGao/A-PO
  (``verl/trainer/apo/core_algos.py::compute_policy_loss``).
* GRPO: Z. Shao et al., "DeepSeekMath", arXiv:2402.03300 (2024), Eq. (3) (objective) and Eq. (4) (KL estimator),
  §4.1.2 (outcome supervision); TRL's ``GRPOTrainer`` for the conventions noted per function.
* k1/k3 KL estimators: J. Schulman, "Approximating KL divergence" (2020), http://joschu.net/blog/kl-approx.html.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "apo_loss",
    "grpo_advantages",
    "grpo_loss",
    "sequence_logprob",
    "sft_loss",
    "token_logprobs",
    "v_star_from_rewards",
]


# ----------------------------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------------------------


def _require_tensor(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _require_ndim(name: str, x: object, ndim: int, shape_doc: str) -> Tensor:
    x = _require_tensor(name, x)
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {shape_doc}, got {tuple(x.shape)}")
    return x


def _require_same_shape(name: str, x: object, ref_name: str, ref: Tensor) -> Tensor:
    x = _require_tensor(name, x)
    if x.shape != ref.shape:
        raise ValueError(
            f"{name} has shape {tuple(x.shape)} but {ref_name} has shape {tuple(ref.shape)}; they must match"
        )
    return x


def _require_batch_vector(name: str, x: object, batch: int) -> Tensor:
    x = _require_tensor(name, x)
    if x.dim() != 1 or x.shape[0] != batch:
        raise ValueError(f"{name} must have shape (B,) = ({batch},), got {tuple(x.shape)}")
    return x


def _require_positive_finite(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def _masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` in float32 with every position where ``mask`` is 0 set to exactly 0 (gradient there is 0 too)."""
    return torch.where(mask, x.float(), torch.zeros((), dtype=torch.float32, device=x.device))


# ----------------------------------------------------------------------------------------------------------------
# sequence log-probabilities
# ----------------------------------------------------------------------------------------------------------------


def sequence_logprob(token_logp: Tensor, mask: Tensor) -> Tensor:
    """Sum of per-token log-probabilities over the generated tokens of each trajectory.

    ``log π(y|x) = Σ_{t : mask[b,t]=1} token_logp[b, t]`` — the sequence log-likelihood of the model's own tokens, the
    quantity A*-PO regresses (it is a *sum*, not a mean, so longer replies weigh more).

    Args:
        token_logp: (B, T) float, per-token log-probabilities (any float dtype; summed in float32). Values where
            ``mask == 0`` are ignored, even if non-finite.
        mask: (B, T), non-zero on model-generated tokens.

    Returns:
        (B,) float32; 0 for a row with no generated token.

    Raises:
        ValueError: if ``token_logp`` is not 2-D or ``mask`` has a different shape.
    """
    token_logp = _require_ndim("token_logp", token_logp, 2, "(B, T)")
    mask = _require_same_shape("mask", mask, "token_logp", token_logp).bool()
    return _masked(token_logp, mask).sum(dim=-1)  # (B,)


# ----------------------------------------------------------------------------------------------------------------
# A*-PO
# ----------------------------------------------------------------------------------------------------------------


def v_star_from_rewards(rewards: Tensor, beta1: float) -> Tensor:
    """Stage-1 estimate of the optimal value ``V*(x)`` from ``N`` reference-policy samples per goal.

    ``V̂*(x) = β1 · ln( (1/N) Σ_i exp(r_i / β1) ) = β1 · (logsumexp_i(r_i / β1) − ln N)``

    (Brantley et al. 2025, §3 "Stage 1", the Monte-Carlo estimate of ``V*(x) = β ln E_{y~π_ref} exp(r(x,y)/β)``;
    Eq. (3) of arXiv:2505.20686v1.) It is computed with ``torch.logsumexp`` in float64, so it is exact and finite
    for any finite rewards and ``β1 > 0`` — e.g. ``r = 1000, β1 = 0.01`` (``r/β1 = 1e5``) gives ``≈ max r − β1 ln N``.
    The estimate interpolates between ``mean(r)`` (``β1 → ∞``) and ``max(r)`` (``β1 → 0``); only ``β1 > 0`` is
    accepted (use ``max`` yourself if you want the limit).

    Args:
        rewards: (G, N) float (or int), ``N ≥ 1`` reward samples for each of ``G`` goals. ``N`` is the same for every
            goal (no mask, no ragged rows): group goals by ``N`` before calling if you have to.
        beta1: the stage-1 KL temperature, a finite float > 0.

    Returns:
        (G,) V* estimates, in ``rewards``' dtype if it is floating point, else float32. Non-finite rewards give
        non-finite estimates for their goal.

    Raises:
        ValueError: if ``rewards`` is not 2-D with ``N ≥ 1``, or ``beta1`` is not a finite number > 0.
    """
    rewards = _require_ndim("rewards", rewards, 2, "(G, N)")
    if rewards.shape[1] < 1:
        raise ValueError(f"rewards must have at least one sample per goal (N >= 1), got shape {tuple(rewards.shape)}")
    beta1 = _require_positive_finite("beta1", beta1)
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    r = rewards.detach().to(torch.float64)  # (G, N); float64 keeps β1·(lse − ln N) exact when r/β1 is huge
    n = r.shape[1]
    v = beta1 * (torch.logsumexp(r / beta1, dim=1) - math.log(n))  # (G,)
    return v.to(out_dtype)


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
        logp: (B, T) float32, log-probabilities of the sampled tokens under the current policy π (with grad).
        ref_logp: (B, T) float, the same under the frozen reference π_ref.
        mask: (B, T), non-zero on model-generated tokens.
        reward: (B,) float, trajectory reward r(x, y).
        v_star: (B,) float, V̂*(x) of each trajectory's goal (see :func:`v_star_from_rewards`).
        beta2: stage-2 KL temperature, a finite float > 0 (paper default 1e-3).

    Returns:
        ``(loss, stats)``: ``loss`` a 0-d float32 tensor; ``stats`` a dict of detached 0-d float32 tensors:

        * ``beta2_log_ratio``: mean over the batch of ``β2 · Σ_t (logp − ref_logp)``;
        * ``advantage_mean`` / ``advantage_std``: mean and population std (``correction=0``, so ``B = 1`` gives 0,
          not nan) of ``r − V*``;
        * ``kl_k3``: mean over the batch of ``Σ_t [exp(ref − logp) − (ref − logp) − 1]`` (Schulman's k3 estimator
          of KL(π‖π_ref) per sequence, ≥ 0);
        * ``kl_k1``: mean over the batch of ``Σ_t (logp − ref_logp)`` (the plain k1 estimator, unbiased, can be < 0);
        * ``gen_tokens``: mean number of generated tokens per trajectory.

    Raises:
        ValueError: on any shape mismatch, or if ``beta2`` is not a finite number > 0.
    """
    logp = _require_ndim("logp", logp, 2, "(B, T)")
    ref_logp = _require_same_shape("ref_logp", ref_logp, "logp", logp)
    mask = _require_same_shape("mask", mask, "logp", logp).bool()
    batch = logp.shape[0]
    reward = _require_batch_vector("reward", reward, batch)
    v_star = _require_batch_vector("v_star", v_star, batch)
    beta2 = _require_positive_finite("beta2", beta2)

    lp = _masked(logp, mask)  # (B, T), 0 off the generated tokens
    ref = _masked(ref_logp.detach(), mask)  # (B, T)
    log_ratio = (lp - ref).sum(dim=-1)  # (B,)  Σ_t log π/π_ref over generated tokens
    advantage = reward.detach().float() - v_star.detach().float()  # (B,)  r − V*
    residual = beta2 * log_ratio - advantage  # (B,)
    loss = residual.pow(2).mean()

    with torch.no_grad():
        d = ref - lp.detach()  # (B, T) log π_ref/π; 0 off-mask so exp(0) − 0 − 1 = 0 there
        k3 = (torch.exp(d) - d - 1.0).sum(dim=-1)  # (B,)
        stats = {
            "beta2_log_ratio": (beta2 * log_ratio.detach()).mean(),
            "advantage_mean": advantage.mean(),
            "advantage_std": advantage.std(correction=0),
            "kl_k3": k3.mean(),
            "kl_k1": log_ratio.detach().mean(),
            "gen_tokens": mask.sum(dim=-1).float().mean(),
        }
    return loss, stats


# ----------------------------------------------------------------------------------------------------------------
# GRPO (baseline)
# ----------------------------------------------------------------------------------------------------------------


def grpo_advantages(
    reward: Tensor,
    groups: int | Tensor,
    eps: float = 1e-6,
    scale: bool = True,
) -> Tensor:
    """GRPO outcome-supervision advantages, normalised within each group of rollouts of the same goal.

    ``Â_i = (r_i − mean(r_group)) / (std(r_group) + eps)`` (DeepSeekMath, §4.1.2), or ``r_i − mean(r_group)`` when
    ``scale=False`` (TRL's ``scale_rewards=False``, the "Dr. GRPO" variant).

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
        scale: divide by the group std (True) or only subtract the group mean (False).

    Returns:
        (B,) float32 advantages, detached (they are constants for the policy loss).

    Raises:
        ValueError: if ``reward`` is not 1-D, ``G`` does not divide ``B`` or is < 1, group ids are not a (B,) integer
            tensor, or ``eps`` is negative.
    """
    reward = _require_ndim("reward", reward, 1, "(B,)")
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
    if not scale:
        return centred.float()
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
        logp: (B, T) float32, log-probabilities of the sampled tokens under the current policy (with grad).
        old_logp: (B, T) float, the same under the policy that sampled them.
        ref_logp: (B, T) float under the frozen reference, or ``None`` when ``beta_kl == 0`` (then no KL stat).
        mask: (B, T), non-zero on model-generated tokens.
        advantages: (B,) float, e.g. from :func:`grpo_advantages`.
        clip_eps: PPO clip range ε, a finite float > 0.
        beta_kl: weight of the KL penalty, >= 0.

    Returns:
        ``(loss, stats)``: ``loss`` a 0-d float32 tensor; ``stats`` detached 0-d float32 tensors:

        * ``policy_loss``: the clipped-surrogate part of the loss alone;
        * ``clip_fraction``: fraction of all generated tokens in the batch whose clipped branch is active (zero
          gradient): ``(Â > 0 and ρ > 1 + ε) or (Â < 0 and ρ < 1 − ε)``;
        * ``ratio_mean``: mean of ``ρ`` over all generated tokens in the batch;
        * ``kl`` (only when ``ref_logp`` is given): the k3 KL, aggregated like the loss (per-rollout token mean, then
          batch mean), i.e. the quantity ``β_kl`` multiplies;
        * ``gen_tokens``: mean number of generated tokens per rollout.

    Raises:
        ValueError: on any shape mismatch, ``clip_eps <= 0``, ``beta_kl < 0``, or ``beta_kl > 0`` without
            ``ref_logp``.
    """
    logp = _require_ndim("logp", logp, 2, "(B, T)")
    old_logp = _require_same_shape("old_logp", old_logp, "logp", logp)
    if ref_logp is not None:
        ref_logp = _require_same_shape("ref_logp", ref_logp, "logp", logp)
    mask = _require_same_shape("mask", mask, "logp", logp).bool()
    advantages = _require_batch_vector("advantages", advantages, logp.shape[0])
    clip_eps = _require_positive_finite("clip_eps", clip_eps)
    beta_kl = float(beta_kl)
    if not (math.isfinite(beta_kl) and beta_kl >= 0.0):
        raise ValueError(f"beta_kl must be a finite number >= 0, got {beta_kl!r}")
    if beta_kl > 0.0 and ref_logp is None:
        raise ValueError("beta_kl > 0 needs ref_logp (the reference policy's per-token log-probabilities)")

    lp = _masked(logp, mask)  # (B, T)
    old = _masked(old_logp.detach(), mask)  # (B, T)
    adv = advantages.detach().float().unsqueeze(-1)  # (B, 1), broadcast over tokens
    ratio = torch.exp(lp - old)  # (B, T); exactly 1 off-mask
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = -torch.minimum(ratio * adv, clipped * adv)  # (B, T)

    maskf = mask.float()
    n_tokens = maskf.sum(dim=-1)  # (B,)

    def per_rollout_mean(x: Tensor) -> Tensor:  # (B, T) -> (B,), mean over each rollout's generated tokens
        return (x * maskf).sum(dim=-1) / n_tokens.clamp(min=1.0)

    policy_loss = per_rollout_mean(surrogate).mean()
    loss = policy_loss
    kl_tok = None
    if ref_logp is not None:
        ref = _masked(ref_logp.detach(), mask)
        with torch.set_grad_enabled(torch.is_grad_enabled() and beta_kl > 0.0):
            d = ref - lp  # (B, T) log π_ref/π
            kl_tok = torch.exp(d) - d - 1.0  # (B, T) k3 ≥ 0, 0 off-mask
        if beta_kl > 0.0:
            loss = loss + beta_kl * per_rollout_mean(kl_tok).mean()

    with torch.no_grad():
        total_tokens = maskf.sum().clamp(min=1.0)
        is_clipped = ((adv > 0) & (ratio > 1.0 + clip_eps)) | ((adv < 0) & (ratio < 1.0 - clip_eps))  # (B, T)
        stats = {
            "policy_loss": policy_loss.detach(),
            "clip_fraction": (is_clipped.float() * maskf).sum() / total_tokens,
            "ratio_mean": (ratio.detach() * maskf).sum() / total_tokens,
            "gen_tokens": n_tokens.mean(),
        }
        if kl_tok is not None:
            stats["kl"] = per_rollout_mean(kl_tok.detach()).mean()
    return loss, stats


# ----------------------------------------------------------------------------------------------------------------
# token log-probabilities and SFT
# ----------------------------------------------------------------------------------------------------------------


def _check_logits_ids(logits: object, input_ids: object) -> tuple[Tensor, Tensor]:
    logits = _require_ndim("logits", logits, 3, "(B, T, V)")
    input_ids = _require_ndim("input_ids", input_ids, 2, "(B, T)")
    if input_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"input_ids has shape {tuple(input_ids.shape)} but logits has shape {tuple(logits.shape)}; "
            "input_ids must be (B, T) with the same B and T as logits"
        )
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must be an integer tensor, got dtype {input_ids.dtype}")
    return logits, input_ids


def token_logprobs(logits: Tensor, input_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Per-token log-probabilities of a sequence under the model that produced ``logits`` for it.

    ``out[b, t] = log softmax(logits[b, t−1] / temperature)[input_ids[b, t]]`` for ``t ≥ 1`` and ``out[b, 0] = 0``
    (the first token has no prediction) — position ``t`` holds the log-probability of token ``t``, the alignment every
    loss here expects. Computed as ``gathered logit − logsumexp`` in float32 even for bf16/fp16 logits, one batch row
    at a time, so the float32 temporaries are (T, V), never (B, T, V).

    Args:
        logits: (B, T, V) float, the causal LM's output for ``input_ids`` (logits[:, t] predicts token t+1).
        input_ids: (B, T) integer token ids, in [0, V).
        temperature: divide logits by this before the softmax (use the sampling temperature so the log-probs are
            those of the distribution that sampled the tokens; the authors' code does the same). Finite, > 0.

    Returns:
        (B, T) float32 log-probabilities (≤ 0), differentiable w.r.t. ``logits``.

    Raises:
        ValueError: if the shapes do not agree, ``input_ids`` is not integer, or ``temperature`` is not > 0.
    """
    logits, input_ids = _check_logits_ids(logits, input_ids)
    temperature = _require_positive_finite("temperature", temperature)
    batch, length, _ = logits.shape
    if batch == 0:
        return torch.zeros(0, length, dtype=torch.float32, device=logits.device)
    rows = []
    for b in range(batch):
        row = logits[b, :-1].float()  # (T-1, V); row t predicts token t+1
        if temperature != 1.0:
            row = row / temperature
        target = input_ids[b, 1:].long().unsqueeze(-1)  # (T-1, 1)
        picked = row.gather(-1, target).squeeze(-1)  # (T-1,)
        rows.append(picked - torch.logsumexp(row, dim=-1))  # (T-1,)
    zeros = torch.zeros(batch, 1, dtype=torch.float32, device=logits.device)
    return torch.cat([zeros, torch.stack(rows)], dim=1)  # (B, T)


def sft_loss(logits: Tensor, input_ids: Tensor, mask: Tensor) -> Tensor:
    """Next-token cross-entropy on the model-generated tokens (supervised warm start on demonstrations).

    ``L = −(1/K) Σ_{(b,t): mask[b,t]=1, t≥1} log softmax(logits[b, t−1])[input_ids[b, t]]``, ``K`` the number of such
    targets — the mask is the *target's* mask, shifted by one against the logits (a token is learned when it is a
    generated token; observation/prompt tokens are context only). ``mask[:, 0]`` is ignored: token 0 has no prediction.
    Only the selected rows of ``logits`` are upcast to float32. Training (turn drills, ``SFTModule``) computes this
    loss from the model through ``agent.logprobs.generated_nll``, without the full logits; this is its reference.

    Args:
        logits: (B, T, V) float, the causal LM's output for ``input_ids``.
        input_ids: (B, T) integer token ids.
        mask: (B, T), non-zero on model-generated tokens.

    Returns:
        0-d float32 tensor, the mean cross-entropy over the selected target tokens.

    Raises:
        ValueError: on shape mismatch, or if no position ``t ≥ 1`` has ``mask == 1`` (a mean over zero tokens is
            undefined; a demonstration batch without generated tokens is a data bug).
    """
    logits, input_ids = _check_logits_ids(logits, input_ids)
    mask = _require_same_shape("mask", mask, "input_ids", input_ids).bool()
    target_mask = mask[:, 1:]  # (B, T-1): token t+1 is a generated token
    if not bool(target_mask.any()):
        raise ValueError("sft_loss: no generated target token in the batch (mask[:, 1:] is all zero)")
    pred = logits[:, :-1][target_mask].float()  # (K, V)
    target = input_ids[:, 1:][target_mask].long()  # (K,)
    return F.cross_entropy(pred, target, reduction="mean")
