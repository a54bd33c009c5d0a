"""Hand-computed checks of the pure tensor functions of the algorithm layer: log-probs (``apo/logprobs.py``), V*
(``apo/vstar.py``) and the objectives (``apo/objectives/``).

Every expected number is derived in a comment next to it; nothing here is compared only against the code under test.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from apo_lightning.apo.logprobs import sft_loss
from apo_lightning.apo.objectives import PackedBatch, kl_statistics
from apo_lightning.apo.objectives.apo import apo_loss
from apo_lightning.apo.objectives.grpo import grpo_advantages, grpo_loss
from apo_lightning.apo.vstar import v_star_from_rewards

from logprob_reference import sequence_logprob, token_logprobs


def t(x, **kw):
    return torch.tensor(x, dtype=torch.float32, **kw)


# ------------------------------------------------------------------------------------------------ sequence_logprob


def test_sequence_logprob_sums_only_generated_tokens():
    token_logp = t([[-1.0, -2.0, -3.0], [-0.5, -0.25, float("-inf")]])
    mask = torch.tensor([[1, 1, 0], [0, 1, 0]])
    # row 0: -1 + -2 = -3 ; row 1: only -0.25 (the -inf is off-mask and must not leak)
    assert torch.allclose(sequence_logprob(token_logp, mask), t([-3.0, -0.25]))


def test_sequence_logprob_shape_errors():
    with pytest.raises(ValueError, match="mask"):
        sequence_logprob(torch.zeros(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="token_logp"):
        sequence_logprob(torch.zeros(6), torch.ones(6))


# ------------------------------------------------------------------------------------------------ A*-PO


def _apo_case():
    logp = t([[-1.0, -2.0, -3.0], [-0.5, -1.5, -2.5]], requires_grad=True)
    ref = t([[-1.5, -2.0, -1.0], [-1.0, -1.0, -3.5]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    reward = t([1.0, 0.0], requires_grad=True)
    v_star = t([0.25, 0.5], requires_grad=True)
    return logp, ref, mask, reward, v_star


def test_apo_loss_2x3_by_hand():
    logp, ref, mask, reward, v_star = _apo_case()
    loss, stats = apo_loss(logp, ref, mask, reward, v_star, beta2=0.1)
    # log-ratio sums over generated tokens:
    #   row 0: (-1 - -1.5) + (-2 - -2) = 0.5          (t=2 is masked)
    #   row 1: (0.5) + (-0.5) + (1.0)  = 1.0
    # β2·ratio = [0.05, 0.1] ; advantage r - V* = [1 - 0.25, 0 - 0.5] = [0.75, -0.5]
    # residual = [0.05 - 0.75, 0.1 + 0.5] = [-0.7, 0.6] ; loss = (0.49 + 0.36) / 2 = 0.425
    assert loss.item() == pytest.approx(0.425, abs=1e-6)
    assert stats["beta2_log_ratio"].item() == pytest.approx(0.075, abs=1e-6)  # (0.05 + 0.1) / 2
    assert stats["advantage_mean"].item() == pytest.approx(0.125, abs=1e-6)  # (0.75 - 0.5) / 2
    assert stats["advantage_std"].item() == pytest.approx(0.625, abs=1e-6)  # population: |0.75 - 0.125| = 0.625
    assert all(not v.requires_grad for v in stats.values())


def test_kl_statistics_by_hand():
    logp, ref, mask, reward, v_star = _apo_case()
    batch = PackedBatch(logp, ref, logp.detach(), mask.float(), reward, v_star, torch.arange(2))
    stats = kl_statistics(batch)
    assert stats["log_ratio"].item() == pytest.approx(0.75, abs=1e-6)  # k1 per trajectory: (0.5 + 1.0) / 2
    # k3 per token with d = ref - logp: exp(d) - d - 1
    #   row 0: d = [-0.5, 0]      -> (e^-0.5 + 0.5 - 1) + 0          (t=2 is masked: its -inf-free garbage ignored)
    #   row 1: d = [-0.5, 0.5, -1] -> (e^-0.5 - 0.5) + (e^0.5 - 1.5) + (e^-1 + 1 - 1)
    k3_row0 = math.exp(-0.5) - 0.5
    k3_row1 = (math.exp(-0.5) - 0.5) + (math.exp(0.5) - 1.5) + math.exp(-1.0)
    assert stats["kl"].item() == pytest.approx((k3_row0 + k3_row1) / 2, abs=1e-6)  # ≈ 0.364831
    assert all(not v.requires_grad for v in stats.values())


def test_apo_loss_gradient_flows_only_into_logp():
    logp, ref, mask, reward, v_star = _apo_case()
    loss, _ = apo_loss(logp, ref, mask, reward, v_star, beta2=0.1)
    loss.backward()
    # dL/dlogp[b,t] = (2/B) · residual_b · β2 · mask[b,t] = residual_b · 0.1
    #   row 0: -0.7 · 0.1 = -0.07 on the two generated tokens, 0 on the masked one
    #   row 1:  0.6 · 0.1 =  0.06 on all three
    assert torch.allclose(logp.grad, t([[-0.07, -0.07, 0.0], [0.06, 0.06, 0.06]]), atol=1e-6)
    assert ref.grad is None and reward.grad is None and v_star.grad is None


def test_apo_loss_masked_tokens_do_not_matter():
    logp, ref, mask, reward, v_star = _apo_case()
    loss_a, _ = apo_loss(logp, ref, mask, reward, v_star, beta2=0.1)
    (grad_a,) = torch.autograd.grad(loss_a, logp)
    # garbage (even non-finite) in the one masked slot, in both policy and reference log-probs
    logp_b = logp.detach().clone()
    logp_b[0, 2] = float("nan")
    logp_b.requires_grad_(True)
    ref_b = ref.detach().clone()
    ref_b[0, 2] = float("-inf")
    loss_b, stats_b = apo_loss(logp_b, ref_b, mask, reward, v_star, beta2=0.1)
    (grad_b,) = torch.autograd.grad(loss_b, logp_b)
    assert loss_b.item() == pytest.approx(loss_a.item(), abs=1e-7)
    assert torch.equal(grad_a, grad_b)
    assert all(torch.isfinite(v) for v in stats_b.values())
    # ... while the same change in a generated slot moves both (so the two comparisons above can fail):
    # logp[0, 0] − 1 makes row 0's log-ratio −0.5, its residual −0.8 and the loss (0.64 + 0.36) / 2 = 0.5
    logp_c = logp.detach().clone()
    logp_c[0, 0] -= 1.0
    logp_c.requires_grad_(True)
    loss_c, _ = apo_loss(logp_c, ref, mask, reward, v_star, beta2=0.1)
    (grad_c,) = torch.autograd.grad(loss_c, logp_c)
    assert loss_c.item() == pytest.approx(0.5, abs=1e-6) and loss_a.item() == pytest.approx(0.425, abs=1e-6)
    assert not torch.equal(grad_c, grad_a)


def test_apo_loss_validates():
    logp, ref, mask, reward, v_star = _apo_case()
    with pytest.raises(ValueError, match="ref_logp"):
        apo_loss(logp, ref[:, :2], mask, reward, v_star, 0.1)
    with pytest.raises(ValueError, match="mask"):
        apo_loss(logp, ref, mask[:1], reward, v_star, 0.1)
    with pytest.raises(ValueError, match="reward"):
        apo_loss(logp, ref, mask, reward[:1], v_star, 0.1)
    with pytest.raises(ValueError, match="v_star"):
        apo_loss(logp, ref, mask, reward, v_star.unsqueeze(0), 0.1)
    with pytest.raises(ValueError, match="beta2"):
        apo_loss(logp, ref, mask, reward, v_star, 0.0)


# ------------------------------------------------------------------------------------------------ V*


def test_v_star_small_case_by_hand():
    rewards = t([[0.0, 1.0], [1.0, 1.0]])
    v = v_star_from_rewards(rewards, beta1=0.5)
    # row 0: 0.5 · ln((e^0 + e^2) / 2) = 0.5 · ln(4.1945280) = 0.5 · 1.4337809 = 0.7168904
    # row 1: 0.5 · ln((e^2 + e^2) / 2) = 0.5 · 2 = 1.0 exactly
    expected0 = 0.5 * math.log((math.exp(0.0) + math.exp(2.0)) / 2)
    assert v.shape == (2,) and v.dtype == torch.float32
    assert v[0].item() == pytest.approx(expected0, abs=1e-6)
    assert v[0].item() == pytest.approx(0.7168904, abs=1e-6)
    assert v[1].item() == pytest.approx(1.0, abs=1e-7)


def test_v_star_limits():
    rewards = t([[0.0, 1.0, 0.5]])
    # β1 → ∞: β1 ln mean e^{r/β1} ≈ mean r + Var(r)/(2β1) = 0.5 + (1/6)/(2e4) ≈ 0.5000083
    assert v_star_from_rewards(rewards, beta1=1e4).item() == pytest.approx(0.5, abs=1e-4)
    # β1 → 0: ≈ max r − β1 ln N = 1 − 1e-3 · ln 3 = 0.9989014 (the e^{-500}, e^{-1000} terms vanish)
    assert v_star_from_rewards(rewards, beta1=1e-3).item() == pytest.approx(1.0 - 1e-3 * math.log(3), abs=1e-6)


def test_v_star_no_overflow_for_huge_ratio():
    rewards = t([[1000.0, 0.0, 500.0]])
    v = v_star_from_rewards(rewards, beta1=0.01)  # r/β1 = 1e5: naive exp overflows
    # = 0.01 · (1e5 + ln(1 + e^-1e5 + e^-5e4) − ln 3) = 1000 − 0.01 · 1.0986123 = 999.9890139
    assert torch.isfinite(v).all()
    assert v.item() == pytest.approx(1000.0 - 0.01 * math.log(3), abs=1e-3)


def test_v_star_validates():
    with pytest.raises(ValueError, match="beta1"):
        v_star_from_rewards(t([[1.0]]), 0.0)
    with pytest.raises(ValueError, match="beta1"):
        v_star_from_rewards(t([[1.0]]), -1.0)
    with pytest.raises(ValueError, match="beta1"):
        v_star_from_rewards(t([[1.0]]), float("nan"))
    with pytest.raises(ValueError, match="rewards"):
        v_star_from_rewards(t([1.0, 2.0]), 0.5)
    with pytest.raises(ValueError, match="N >= 1"):
        v_star_from_rewards(torch.zeros(2, 0), 0.5)


# ------------------------------------------------------------------------------------------------ GRPO advantages


def test_grpo_advantages_two_groups_by_size():
    reward = t([1.0, 0.0, 0.0, 0.2, 0.2, 0.2])
    adv = grpo_advantages(reward, 3)
    # group A = [1, 0, 0]: mean 1/3, deviations [2/3, -1/3, -1/3],
    #   sample variance (4/9 + 1/9 + 1/9) / (3 − 1) = 1/3, std = 0.5773503
    #   advantages [0.6666667, -0.3333333, -0.3333333] / 0.5773503 = [1.1547005, -0.5773503, -0.5773503]
    # group B = [0.2, 0.2, 0.2]: constant → std 0 → 0 / (0 + eps) = 0 (not nan)
    expected = t([1.1547005, -0.5773503, -0.5773503, 0.0, 0.0, 0.0])
    assert torch.allclose(adv, expected, atol=1e-5)
    assert torch.isfinite(adv).all()


def test_grpo_advantages_group_ids():
    reward = t([1.0, 2.0, 3.0, 6.0])
    ids = torch.tensor([10, 4, 10, 4])  # interleaved groups
    # group 10 = {1, 3}: mean 2, sample std sqrt((1 + 1) / 1) = 1.4142136 → [-0.7071068, 0.7071068]
    # group 4  = {2, 6}: mean 4, sample std sqrt((4 + 4) / 1) = 2.8284271 → [-0.7071068, 0.7071068]
    # (population std would give ±1 instead: this pins the Bessel-corrected convention)
    adv = grpo_advantages(reward, ids)
    assert torch.allclose(adv, t([-0.7071068, -0.7071068, 0.7071068, 0.7071068]), atol=1e-5)


def test_grpo_advantages_singleton_group_is_zero_and_validates():
    assert torch.equal(grpo_advantages(t([0.7, 0.1]), 1), t([0.0, 0.0]))
    with pytest.raises(ValueError, match="divide"):
        grpo_advantages(t([1.0, 2.0, 3.0]), 2)
    with pytest.raises(ValueError, match="group ids"):
        grpo_advantages(t([1.0, 2.0]), t([0.0, 1.0]))
    with pytest.raises(ValueError, match="reward"):
        grpo_advantages(torch.zeros(2, 2), 2)


# ------------------------------------------------------------------------------------------------ GRPO loss


def test_grpo_loss_clipping_by_hand():
    # policy/old log-ratios give ρ = [1.5, 0.5, (masked)] for row 0 and [1.5, 0.5, 1.0] for row 1
    logp = t([[math.log(1.5), math.log(0.5), 50.0], [math.log(1.5), math.log(0.5), 0.0]], requires_grad=True)
    old = t([[0.0, 0.0, -50.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = t([1.0, -2.0])
    loss, stats = grpo_loss(logp, old, None, mask, adv, clip_eps=0.2)
    # row 0, Â = +1: t0 −min(1.5, 1.2) = −1.2 (clipped) ; t1 −min(0.5, 0.8) = −0.5 → mean −0.85
    # row 1, Â = −2: t0 −min(−3.0, −2.4) = 3.0 ; t1 −min(−1.0, −1.6) = 1.6 (clipped) ; t2 −min(−2, −2) = 2
    #        → mean (3.0 + 1.6 + 2.0) / 3 = 2.2
    # loss = (−0.85 + 2.2) / 2 = 0.675  (per-rollout token mean, then batch mean)
    assert loss.item() == pytest.approx(0.675, abs=1e-6)
    assert stats["policy_loss"].item() == pytest.approx(0.675, abs=1e-6)
    assert stats["clip_fraction"].item() == pytest.approx(2 / 5)  # row0 t0 and row1 t1, of 5 generated tokens
    assert stats["ratio_mean"].item() == pytest.approx(1.0, abs=1e-6)  # (1.5 + 0.5 + 1.5 + 0.5 + 1.0) / 5
    assert "kl_penalty" not in stats
    loss.backward()
    # d/dlogp of an unclipped token is −Â·ρ, scaled by 1/|o_i| and 1/B; clipped tokens get 0
    #   row 0: t0 clipped → 0 ; t1 −(1)(0.5) / 2 / 2 = −0.125 ; t2 masked → 0
    #   row 1: t0 −(−2)(1.5) / 3 / 2 = 0.5 ; t1 clipped → 0 ; t2 −(−2)(1.0) / 3 / 2 = 0.3333333
    assert torch.allclose(logp.grad, t([[0.0, -0.125, 0.0], [0.5, 0.0, 1.0 / 3.0]]), atol=1e-6)


def test_grpo_loss_k3_kl_penalty():
    logp = t([[-1.0, -1.0]], requires_grad=True)
    ref = t([[-1.0 + math.log(2.0), -1.0]])
    # ρ = 1 and Â = 0 → surrogate 0; d = ref − logp = [ln 2, 0]
    # k3 = [2 − ln 2 − 1, 0] = [0.3068528, 0] → per-rollout mean 0.1534264 ; loss = 0.1 · 0.1534264
    loss, stats = grpo_loss(logp, logp.detach(), ref, torch.ones(1, 2), t([0.0]), beta_kl=0.1)
    assert stats["kl_penalty"].item() == pytest.approx((1.0 - math.log(2.0)) / 2, abs=1e-6)
    assert loss.item() == pytest.approx(0.1 * (1.0 - math.log(2.0)) / 2, abs=1e-6)
    # with beta_kl = 0 the KL is still reported but not in the loss
    loss0, stats0 = grpo_loss(logp, logp.detach(), ref, torch.ones(1, 2), t([0.0]))
    assert loss0.item() == pytest.approx(0.0, abs=1e-7)
    assert stats0["kl_penalty"].item() == pytest.approx(stats["kl_penalty"].item())


def test_grpo_loss_validates():
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, logp, None, torch.ones(2, 3), torch.zeros(2), beta_kl=0.1)
    with pytest.raises(ValueError, match="old_logp"):
        grpo_loss(logp, torch.zeros(2, 2), None, torch.ones(2, 3), torch.zeros(2))
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(logp, logp, None, torch.ones(2, 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="clip_eps"):
        grpo_loss(logp, logp, None, torch.ones(2, 3), torch.zeros(2), clip_eps=0.0)


# ------------------------------------------------------------------------------------------------ token log-probs / SFT


def test_token_logprobs_alignment_by_hand():
    logits = torch.zeros(1, 3, 3)
    logits[0, 0] = t([0.0, 0.0, math.log(2.0)])  # softmax = [1/4, 1/4, 1/2] predicts token 1
    logits[0, 1] = t([math.log(3.0), 0.0, 0.0])  # softmax = [3/5, 1/5, 1/5] predicts token 2
    logits[0, 2] = t([100.0, 0.0, 0.0])  # predicts beyond the sequence: never used
    ids = torch.tensor([[1, 2, 0]])
    out = token_logprobs(logits, ids)
    # position 0: no prediction → 0 ; position 1: ln p(2) = ln 1/2 ; position 2: ln p(0) = ln 3/5
    assert out.shape == (1, 3) and out.dtype == torch.float32
    assert torch.allclose(out, t([[0.0, math.log(0.5), math.log(0.6)]]), atol=1e-6)
    # temperature 2 halves the logits: position 1 becomes ln(√2 / (2 + √2)) = ln 0.4142136
    out_t = token_logprobs(logits, ids, temperature=2.0)
    assert out_t[0, 1].item() == pytest.approx(math.log(math.sqrt(2) / (2 + math.sqrt(2))), abs=1e-6)


def test_token_logprobs_matches_log_softmax_gather_and_bf16():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    ids = torch.randint(0, 7, (2, 5), generator=g)
    reference = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (2, 4)
    out = token_logprobs(logits, ids)
    assert torch.allclose(out[:, 1:], reference, atol=1e-6)
    assert torch.equal(out[:, 0], torch.zeros(2))
    out_bf16 = token_logprobs(logits.bfloat16(), ids)
    assert out_bf16.dtype == torch.float32
    assert torch.allclose(out_bf16, out, atol=5e-2)
    with pytest.raises(ValueError, match="input_ids"):
        token_logprobs(logits, ids[:, :4])
    with pytest.raises(ValueError, match="integer"):
        token_logprobs(logits, ids.float())


def test_sft_loss_uniform_logits_is_ln_v():
    # all-zero logits over V = 2 → every target has probability 1/2 → CE = ln 2
    loss = sft_loss(torch.zeros(1, 3, 2), torch.tensor([[0, 1, 0]]), torch.tensor([[0, 1, 1]]))
    assert loss.item() == pytest.approx(math.log(2.0), abs=1e-6)


def test_sft_loss_equals_cross_entropy_on_selected_positions():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 5, generator=g, requires_grad=True)
    ids = torch.randint(0, 5, (2, 4), generator=g)
    mask = torch.tensor([[1, 0, 1, 1], [0, 1, 0, 1]])  # mask[0, 0] has no prediction and is ignored
    # generated targets at (0,2), (0,3), (1,1), (1,3) are predicted by logits at (0,1), (0,2), (1,0), (1,2)
    pred = torch.stack([logits[0, 1], logits[0, 2], logits[1, 0], logits[1, 2]])
    target = torch.stack([ids[0, 2], ids[0, 3], ids[1, 1], ids[1, 3]])
    expected = F.cross_entropy(pred, target)
    assert sft_loss(logits, ids, mask).item() == pytest.approx(expected.item(), abs=1e-6)
    with pytest.raises(ValueError, match="no generated target"):
        sft_loss(logits, ids, torch.tensor([[1, 0, 0, 0], [1, 0, 0, 0]]))
    with pytest.raises(ValueError, match="mask"):
        sft_loss(logits, ids, mask[:, :3])
