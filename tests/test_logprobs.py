"""Log-probabilities at generated tokens from a model (the training path) against the full-logits reference, and
packing them one row per trajectory."""

import pytest
import torch

from apo_lightning.apo import logprobs
from apo_lightning.apo.logprobs import generated_logprobs, generated_nll, pack_generated, sft_loss

from logprob_reference import token_logprobs


def test_pack_generated_gathers_each_trajectorys_tokens_across_segments():
    values = torch.arange(12, dtype=torch.float32).reshape(3, 4)  # 3 segments x 4 positions
    gen_mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    traj_index = torch.tensor([0, 1, 0])  # segments 0 and 2 belong to trajectory 0
    packed, mask = pack_generated(values, gen_mask, traj_index, 2)
    assert packed.tolist() == [[1.0, 2.0, 8.0], [6.0, 7.0, 0.0]]
    assert mask.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def _tiny_qwen_and_segments():
    """A small random Qwen2 and a right-padded (4, 12) batch of segments of lengths 12, 9, 5, 7; the last has no
    generated token."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    input_ids = torch.randint(1, 50, (4, 12))
    attention_mask = torch.ones(4, 12, dtype=torch.long)
    attention_mask[1, 9:] = 0
    attention_mask[2, 5:] = 0
    attention_mask[3, 7:] = 0
    gen_mask = torch.zeros(4, 12)
    gen_mask[0, 3:7] = gen_mask[0, 10:] = 1
    gen_mask[1, 6:9] = 1
    gen_mask[2, 2:5] = 1
    return model, input_ids, attention_mask, gen_mask


def _grads(model, loss):
    """{parameter name: its gradient from ``loss`` (None if it gets none)}, leaving the model's grads cleared."""
    model.zero_grad(set_to_none=True)
    loss.backward()
    grads = {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("head_chunk", [logprobs.HEAD_CHUNK, 2])
def test_generated_logprobs_match_the_full_logits_path(monkeypatch, head_chunk):
    """Head + log-softmax at generated positions only (no mask on a right-padded batch) = the full-logits
    log-probs on every generated token, 0 elsewhere, with gradients (each segment runs cut to its length), whether
    the head runs in one chunk or in checkpointed chunks of 2 positions."""
    monkeypatch.setattr(logprobs, "HEAD_CHUNK", head_chunk)
    model, input_ids, attention_mask, gen_mask = _tiny_qwen_and_segments()
    full = token_logprobs(model(input_ids=input_ids, attention_mask=attention_mask).logits, input_ids) * gen_mask
    assert (full[gen_mask == 1] < 0).all()  # a path that returned zeros would not match
    fast = generated_logprobs(model, input_ids, attention_mask, gen_mask)
    assert torch.allclose(fast, full, atol=1e-5)
    padded = generated_logprobs(model, input_ids, attention_mask, gen_mask, per_segment=False)
    assert torch.allclose(padded, full, atol=1e-5)
    assert (fast[gen_mask == 0] == 0).all()
    # every parameter gets the full path's gradient (not just some gradient: a detached head weight would pass that)
    expected = _grads(model, full.sum())
    assert all(g is not None and g.abs().sum() > 0 for g in expected.values())
    for name, grad in _grads(model, fast.sum()).items():
        assert grad is not None and torch.allclose(grad, expected[name], atol=1e-5), name


def test_generated_nll_is_the_sft_loss_with_its_gradients():
    """The SFT loss through generated_logprobs = apo.losses.sft_loss on the full logits, value and gradient; a batch
    with no generated target token is refused as sft_loss refuses it."""
    model, input_ids, attention_mask, gen_mask = _tiny_qwen_and_segments()
    full = sft_loss(model(input_ids=input_ids, attention_mask=attention_mask).logits, input_ids, gen_mask)
    expected = _grads(model, full)
    fast = generated_nll(model, input_ids, attention_mask, gen_mask)
    assert fast.dtype == torch.float32 and fast.item() == pytest.approx(full.item(), abs=1e-5)
    for name, grad in _grads(model, fast).items():
        assert grad is not None and torch.allclose(grad, expected[name], atol=1e-5), name
    only_first = torch.zeros_like(gen_mask)
    only_first[:, 0] = 1  # token 0 has no prediction: nothing to learn
    with pytest.raises(ValueError, match="no generated target token"):
        generated_nll(model, input_ids, attention_mask, only_first)


@pytest.mark.parametrize("head_chunk", [logprobs.HEAD_CHUNK, 2])
def test_entropy_at_generated_positions_matches_the_full_logits(monkeypatch, head_chunk):
    """The entropy at each generated position, from the head at generated positions only (in one chunk or in
    checkpointed chunks of 2), equals the entropy computed from the full logits, gradients included; it is 0
    wherever ``gen_mask`` is 0."""
    monkeypatch.setattr(logprobs, "HEAD_CHUNK", head_chunk)
    model, input_ids, attention_mask, gen_mask = _tiny_qwen_and_segments()
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (S, T, V)
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # position t predicts token t + 1
    full_entropy = torch.zeros(input_ids.shape)
    full_entropy[:, 1:] = -(log_probs.exp() * log_probs).sum(-1)
    _, entropy = generated_logprobs(model, input_ids, attention_mask, gen_mask, with_entropy=True)
    assert torch.allclose(entropy, full_entropy * (gen_mask != 0), atol=1e-5)
    assert (entropy[gen_mask != 0][1:] > 0).all() and (entropy[gen_mask == 0] == 0).all()
    expected = _grads(model, (full_entropy * (gen_mask != 0)).sum())
    for name, grad in _grads(model, entropy.sum()).items():
        assert grad is not None and torch.allclose(grad, expected[name], atol=1e-5), name


def test_the_head_saves_no_logits_for_the_backward_pass(monkeypatch):
    """With gradients, the autograd graph saves no vocabulary-wide tensor: each chunk's logits are recomputed in the
    backward pass (checkpointed), not held for every generated position. The same probe sees every generated
    position's logits saved when the chunks are not checkpointed."""
    model, input_ids, attention_mask, gen_mask = _tiny_qwen_and_segments()
    vocab = model.config.vocab_size
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}  # the head's weight is saved, not logits

    def largest_saved_logits():
        rows = [0]

        def pack(tensor):
            if (tensor.dim() >= 2 and vocab in tensor.shape and tensor.dtype.is_floating_point
                    and tensor.untyped_storage().data_ptr() not in weights):
                rows[0] = max(rows[0], tensor.numel() // vocab)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            generated_logprobs(model, input_ids, attention_mask, gen_mask, with_entropy=True)
        return rows[0]

    assert largest_saved_logits() == 0
    monkeypatch.setattr(logprobs, "checkpoint", lambda function, *args, **kwargs: function(*args))
    assert largest_saved_logits() == int((gen_mask[:, 1:] != 0).sum())
