"""Log-probabilities of generated tokens: from a model without its full ``(B, T, V)``
logits, and packed into one row per trajectory; the SFT loss on them.

Every training loss here reads log π only at the tokens the model generated (RAGEN: prompt and observation tokens
are context), a small part of a WebShop sequence. The output head over all ``T`` positions makes a ``(B, T, V)``
tensor that grows with context length times vocabulary; :func:`generated_logprobs` runs it only where a generated
token is predicted. Conventions: ``mask: (B, T)`` marks generated tokens (any dtype, read as boolean); position
``t`` of a per-token tensor holds ``log p(y_t | y_<t)``; arithmetic is float32.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .checks import require_ndim, require_same_shape


def check_logits_ids(logits: object, input_ids: object) -> tuple[Tensor, Tensor]:
    logits = require_ndim("logits", logits, 3, "(B, T, V)")
    input_ids = require_ndim("input_ids", input_ids, 2, "(B, T)")
    if input_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"input_ids has shape {tuple(input_ids.shape)} but logits has shape {tuple(logits.shape)}; "
            "input_ids must be (B, T) with the same B and T as logits"
        )
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must be an integer tensor, got dtype {input_ids.dtype}")
    return logits, input_ids


def sft_loss(logits: Tensor, input_ids: Tensor, mask: Tensor) -> Tensor:
    """Next-token cross-entropy on the model-generated tokens (supervised warm start on demonstrations).

    ``L = −(1/K) Σ_{(b,t): mask[b,t]=1, t≥1} log softmax(logits[b, t−1])[input_ids[b, t]]``, ``K`` the number of such
    targets — the mask is the *target's* mask, shifted by one against the logits (a token is learned when it is a
    generated token; observation/prompt tokens are context only). ``mask[:, 0]`` is ignored: token 0 has no prediction.
    Only the selected rows of ``logits`` are upcast to float32. Training (turn drills, ``SFTModule``) computes this
    loss from the model through :func:`generated_nll`, without the full logits; this is its reference.

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
    logits, input_ids = check_logits_ids(logits, input_ids)
    mask = require_same_shape("mask", mask, "input_ids", input_ids).bool()
    target_mask = mask[:, 1:]  # (B, T-1): token t+1 is a generated token
    if not bool(target_mask.any()):
        raise ValueError("sft_loss: no generated target token in the batch (mask[:, 1:] is all zero)")
    pred = logits[:, :-1][target_mask].float()  # (K, V)
    target = input_ids[:, 1:][target_mask].long()  # (K,)
    return F.cross_entropy(pred, target, reduction="mean")


#: generated positions per chunk of the output head in :func:`generated_logprobs` (a (HEAD_CHUNK, V) float32 block)
HEAD_CHUNK = 1024


def generated_features(model, input_ids: Tensor, attention_mask: Tensor, gen_mask: Tensor,
                       per_segment: bool = True) -> tuple[Tensor, Tensor, Tensor, Callable[[Tensor], Tensor]]:
    """What the output head reads at the positions that predict a generated token, and the head itself.

    The decoder body runs over the whole sequences, but the output head only at those positions, which is what the
    losses read; the full logits would take ``S × T × V`` floats, the largest tensor of a step at long contexts.
    Right-padded batches (``collate_trajectories``) run with no attention mask, so the attention is plain causal
    (PyTorch's fused kernel, memory linear in T instead of a T × T matrix per head), and by default one segment at a
    time, cut to its own length: no compute on padding (``benchmarks/loss_passes.py`` measures both ways). Models
    without ``get_decoder``/``get_output_embeddings``, or with a logit soft-cap, run in full: their features are the
    logits at those positions and the head is the identity.

    Args:
        model: a causal LM (``transformers`` or a PEFT wrapper of one).
        input_ids: (S, T) int64.
        attention_mask: (S, T) 0/1.
        gen_mask: (S, T), 1 on generated tokens.
        per_segment: run a right-padded batch segment by segment (False: the decoder over the padded batch).

    Returns:
        ``(rows, cols, features, head)``: the K generated tokens at ``(rows, cols + 1)`` (t ≥ 1), in row-major
        order; the (K, H) features at ``(rows, cols)`` that predict them; and ``head``, mapping (k, H) features to
        (k, V) float32 logits. Differentiable.
    """
    right_padded = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    rows, cols = gen_mask[:, 1:].nonzero(as_tuple=True)  # token (row, cols + 1) is predicted at (row, cols)
    if head is None or not hasattr(model, "get_decoder") or softcap:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (S, T, V)
        return rows, cols, logits[rows, cols], Tensor.float
    decoder = model.get_decoder()
    if per_segment and right_padded and rows.numel():
        # one segment at a time, cut to its own length: a padded batch of segments of very different lengths is
        # mostly padding, and the decoder's cost grows with the padded length, quadratically in the attention
        lengths = attention_mask.sum(dim=1).tolist()
        hidden_at = []
        for row in rows.unique().tolist():
            hidden = decoder(input_ids=input_ids[row:row + 1, :lengths[row]]).last_hidden_state[0]
            hidden_at.append(hidden[cols[rows == row]])
        selected = torch.cat(hidden_at)  # nonzero() lists rows in ascending order: same order as (rows, cols)
    else:
        selected = decoder(input_ids=input_ids,
                           attention_mask=None if right_padded else attention_mask).last_hidden_state[rows, cols]
    return rows, cols, selected, lambda features: head(features).float()


def generated_logits(model, input_ids: Tensor, attention_mask: Tensor, gen_mask: Tensor,
                     per_segment: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """The model's logits only at the positions that predict a generated token (:func:`generated_features`).

    Returns:
        ``(rows, cols, logits)``: the K generated tokens at ``(rows, cols + 1)`` (t ≥ 1), in row-major order, and
        the float32 logits ``(K, V)`` that predict them (at ``(rows, cols)``); differentiable.
    """
    rows, cols, features, head = generated_features(model, input_ids, attention_mask, gen_mask, per_segment)
    return rows, cols, head(features)


def _head_logprobs(head: Callable[[Tensor], Tensor], features: Tensor, targets: Tensor,
                   with_entropy: bool) -> tuple[Tensor, Tensor]:
    """log π of ``targets`` (k,) and, with ``with_entropy``, the entropy (k,) (else zeros), from (k, H) features."""
    log_probs = torch.log_softmax(head(features), dim=-1)  # (k, V)
    logp = log_probs.gather(1, targets[:, None]).squeeze(1)
    entropy = -(log_probs.exp() * log_probs).sum(dim=-1) if with_entropy else torch.zeros_like(logp)
    return logp, entropy


def generated_logprobs(model, input_ids: Tensor, attention_mask: Tensor, gen_mask: Tensor, per_segment: bool = True,
                       with_entropy: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """log π(token | prefix) of every generated token, from :func:`generated_features`.

    The head runs over :data:`HEAD_CHUNK` generated positions at a time, and with gradients each chunk is
    checkpointed (``torch.utils.checkpoint``, recomputed in the backward pass): a step keeps one (HEAD_CHUNK, V)
    block of logits at a time instead of several (K, V) ones — the largest tensors of a step whose trajectories
    generate many tokens — for one more pass of the head. The same values and gradients.

    Args:
        model, input_ids, attention_mask, gen_mask, per_segment: as :func:`generated_features`.
        with_entropy: also return the policy's entropy at each generated position, ``−Σ_v π(v|·) log π(v|·)``
            (nats), differentiable.

    Returns:
        (S, T) float32: the log-probability at every generated token (t ≥ 1), 0 elsewhere; differentiable. With
        ``with_entropy``, ``(logp, entropy)``, both (S, T) float32.
    """
    rows, cols, features, head = generated_features(model, input_ids, attention_mask, gen_mask, per_segment)
    targets = input_ids[rows, cols + 1]
    logp_parts, entropy_parts = [], []
    for start in range(0, len(targets), HEAD_CHUNK):
        part = (head, features[start:start + HEAD_CHUNK], targets[start:start + HEAD_CHUNK], with_entropy)
        if torch.is_grad_enabled() and features.requires_grad:
            logp, entropy = checkpoint(_head_logprobs, *part, use_reentrant=False)
        else:
            logp, entropy = _head_logprobs(*part)
        logp_parts.append(logp)
        entropy_parts.append(entropy)
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    if not logp_parts:
        return (out, torch.zeros_like(out)) if with_entropy else out
    logp = out.index_put((rows, cols + 1), torch.cat(logp_parts))
    if not with_entropy:
        return logp
    return logp, torch.zeros_like(out).index_put((rows, cols + 1), torch.cat(entropy_parts))


def generated_nll(model, input_ids: Tensor, attention_mask: Tensor, gen_mask: Tensor) -> Tensor:
    """The SFT loss, mean cross-entropy on the generated tokens, through :func:`generated_logits`.

    Equal to ``sft_loss(model(input_ids, attention_mask).logits, input_ids, gen_mask)`` (tested), at a fraction of
    its cost: ``benchmarks/sft_step.py`` measures both on turn drills and demonstrations.

    Args:
        model: a causal LM (``transformers`` or a PEFT wrapper of one).
        input_ids: (B, T) int64.
        attention_mask: (B, T) 0/1.
        gen_mask: (B, T), non-zero on the tokens to learn (model replies); ``gen_mask[:, 0]`` is ignored.

    Returns:
        0-d float32 tensor, nats per generated token; differentiable.

    Raises:
        ValueError: no position ``t ≥ 1`` has ``gen_mask`` set (a mean over zero tokens is undefined).
    """
    if not bool((gen_mask[:, 1:] != 0).any()):
        raise ValueError("generated_nll: no generated target token in the batch (gen_mask[:, 1:] is all zero)")
    rows, cols, logits = generated_logits(model, input_ids, attention_mask, gen_mask)
    return F.cross_entropy(logits, input_ids[rows, cols + 1])


def pack_generated(values: Tensor, gen_mask: Tensor, traj_index: Tensor,
                   num_trajectories: int) -> tuple[Tensor, Tensor]:
    """Gather the generated-token values of every trajectory's segments into one row per trajectory.

    Only generated tokens enter the losses, so a trajectory split over several segments (a context rebuilt to fit
    the budget) is the concatenation of its segments' generated tokens.

    Args:
        values: (S, T) per-token values (log-probs) of S segments.
        gen_mask: (S, T) 1 on generated tokens.
        traj_index: (S,) int64, the trajectory of each segment.
        num_trajectories: B.

    Returns:
        ``(packed (B, L), mask (B, L))`` with L the largest number of generated tokens of a trajectory (at least
        1); values are 0 where mask is 0. Gradients flow through ``values``.
    """
    seg, pos = gen_mask.nonzero(as_tuple=True)  # in (segment, position) order: per trajectory, segments in order
    owner = traj_index[seg]  # (N,)
    order = torch.argsort(owner, stable=True)
    seg, pos, owner = seg[order], pos[order], owner[order]
    counts = torch.bincount(owner, minlength=num_trajectories)  # (B,)
    starts = torch.cumsum(counts, 0) - counts
    column = torch.arange(owner.numel(), device=owner.device) - starts[owner]
    width = int(counts.max().item()) if counts.numel() else 0
    packed = values.new_zeros((num_trajectories, max(width, 1)))
    mask = values.new_zeros((num_trajectories, max(width, 1)))
    packed = packed.index_put((owner, column), values[seg, pos])
    mask = mask.index_put((owner, column), torch.ones_like(column, dtype=values.dtype))
    return packed, mask
