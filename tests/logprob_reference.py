"""Reference computations of log-probabilities that the tests compare the package's against: per token from the
full logits (what ``apo.logprobs.generated_logprobs`` computes without them) and summed over a trajectory."""

import torch
from torch import Tensor

from apo_lightning.apo.checks import masked, require_ndim, require_positive_finite, require_same_shape
from apo_lightning.apo.logprobs import check_logits_ids


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
    logits, input_ids = check_logits_ids(logits, input_ids)
    temperature = require_positive_finite("temperature", temperature)
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
    token_logp = require_ndim("token_logp", token_logp, 2, "(B, T)")
    mask = require_same_shape("mask", mask, "token_logp", token_logp).bool()
    return masked(token_logp, mask).sum(dim=-1)  # (B,)
