"""Log-probabilities of the generated tokens of a batch, from a model, without its full ``(B, T, V)`` logits.

Every training loss here reads log π only at the tokens the model generated (RAGEN: prompt and observation tokens
are context), a few percent of a WebShop sequence. Running the output head over all ``T`` positions costs most of a
step's memory and, on the CPU, most of its time; these functions run it only where a generated token is predicted.
"""

from __future__ import annotations

import torch

from ..apo.losses import token_logprobs


def generated_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        gen_mask: torch.Tensor, per_segment: bool = True) -> torch.Tensor:
    """log π(token | prefix) of every generated token, computed without the full (S, T, V) logits.

    The decoder body runs over the whole sequences, but the output head and the log-softmax only at the positions
    that predict a generated token, which is what the losses read: at 4k-token contexts and a 4k vocabulary the
    full logits were most of a training step's memory. Right-padded batches (``collate_trajectories``) run with no
    attention mask, so the attention is plain causal (PyTorch's fused kernel, memory linear in T instead of a
    T × T matrix per head), and by default one segment at a time, cut to its own length: no compute on padding
    (``benchmarks/loss_passes.py`` measures both ways). Models without
    ``get_decoder``/``get_output_embeddings``, or with a logit soft-cap, take the full-logits path.

    Args:
        model: a causal LM (``transformers`` or a PEFT wrapper of one).
        input_ids: (S, T) int64.
        attention_mask: (S, T) 0/1.
        gen_mask: (S, T), 1 on generated tokens.
        per_segment: run a right-padded batch segment by segment (False: the decoder over the padded batch).

    Returns:
        (S, T) float32: the log-probability at every generated token (t ≥ 1), 0 elsewhere; differentiable.
    """
    right_padded = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    if head is None or not hasattr(model, "get_decoder") or softcap:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return token_logprobs(logits, input_ids) * (gen_mask != 0)
    decoder = model.get_decoder()
    rows, cols = gen_mask[:, 1:].nonzero(as_tuple=True)  # token (row, cols + 1) is predicted at (row, cols)
    if per_segment and right_padded and rows.numel():
        # one segment at a time, cut to its own length: a padded batch of segments of very different lengths is
        # mostly padding (55 % of a (16, 3883) batch of real WebShop trajectories), and the decoder's cost grows
        # with the padded length, quadratically in the attention
        lengths = attention_mask.sum(dim=1).tolist()
        hidden_at = []
        for row in rows.unique().tolist():
            hidden = decoder(input_ids=input_ids[row:row + 1, :lengths[row]]).last_hidden_state[0]
            hidden_at.append(hidden[cols[rows == row]])
        selected = torch.cat(hidden_at)  # nonzero() lists rows in ascending order: same order as (rows, cols)
    else:
        selected = decoder(input_ids=input_ids,
                           attention_mask=None if right_padded else attention_mask).last_hidden_state[rows, cols]
    logits = head(selected).float()  # (K, V)
    targets = input_ids[rows, cols + 1]
    chosen = logits.gather(1, targets[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    return out.index_put((rows, cols + 1), chosen)


def generated_nll(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, gen_mask: torch.Tensor) -> torch.Tensor:
    """The SFT loss, mean cross-entropy on the generated tokens, through :func:`generated_logprobs`.

    Equal to ``apo.losses.sft_loss(model(input_ids, attention_mask).logits, input_ids, gen_mask)`` (tested), at a
    fraction of its cost: ``benchmarks/sft_step.py`` measures both on turn drills and demonstrations.

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
    count = (gen_mask[:, 1:] != 0).sum()
    if not bool(count):
        raise ValueError("generated_nll: no generated target token in the batch (gen_mask[:, 1:] is all zero)")
    return -generated_logprobs(model, input_ids, attention_mask, gen_mask).sum() / count
