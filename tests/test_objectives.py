"""The seed projects' objectives, KL-anchored policy gradient (``kl_pg``) and advantage-weighted SFT (``awr``),
checked against hand-computed cases; and the interface every objective class shares: its settings reach its loss,
bad settings fail when it is built, and it says what the data module needs (V*, rollouts per goal)."""

import dataclasses
import math

import pytest
import torch

from apo_lightning.apo.objectives import APO, AWR, GRPO, KLPG, PackedBatch
from apo_lightning.apo.objectives.apo import apo_loss
from apo_lightning.apo.objectives.awr import awr_loss, awr_weights
from apo_lightning.apo.objectives.grpo import grpo_advantages, grpo_loss
from apo_lightning.apo.objectives.kl_pg import kl_pg_loss

OBJECTIVES = [APO, GRPO, KLPG, AWR]


def t(x, **kw):
    return torch.tensor(x, dtype=torch.float32, **kw)


def case():
    """Two trajectories: row 0 has 2 generated tokens (t=2 is padding, with junk in it), row 1 has 3."""
    logp = t([[-1.0, -2.0, float("-inf")], [-0.5, -0.5, -1.0]], requires_grad=True)
    ref = t([[-1.5, -2.0, float("nan")], [-1.0, 0.0, -2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    return logp, ref, mask, t([1.0, 0.0]), t([0.25, 0.5])


# k3 per token, d = ref − logp:  row 0: d = [-0.5, 0] → e^-0.5 − 0.5, 0 ; row 1: d = [-0.5, 0.5, -1]
K3 = [math.exp(-0.5) - 0.5, 0.0, math.exp(-0.5) - 0.5, math.exp(0.5) - 1.5, math.exp(-1.0)]
KL = sum(K3) / 5  # averaged over the batch's 5 generated tokens ≈ 0.1459324


# ------------------------------------------------------------------------------------------------ kl_pg
def test_kl_pg_by_hand():
    logp, ref, mask, reward, v_star = case()
    loss, stats = kl_pg_loss(logp, ref, mask, reward, v_star, beta=0.1, kl_coef=0.5, clip=0.6)
    # ℓ = length-normalised log π: row 0 (−1 − 2)/2 = −1.5 ; row 1 (−0.5 − 0.5 − 1)/3 = −2/3
    # log π/π_ref summed: row 0 0.5 + 0 = 0.5 ; row 1 0.5 − 0.5 + 1 = 1.0
    # A = r − β·log(π/π_ref) − V*: row 0 1 − 0.05 − 0.25 = 0.7 → clamped to 0.6 ; row 1 0 − 0.1 − 0.5 = −0.6
    # policy loss = −mean(0.6·(−1.5), −0.6·(−2/3)) = −mean(−0.9, 0.4) = 0.25
    assert stats["policy_loss"].item() == pytest.approx(0.25, abs=1e-6)
    assert stats["kl_penalty"].item() == pytest.approx(KL, abs=1e-6)
    assert loss.item() == pytest.approx(0.25 + 0.5 * KL, abs=1e-6)
    assert stats["clip_fraction"].item() == 0.5 and stats["advantage_mean"].item() == pytest.approx(0.0, abs=1e-7)
    loss.backward()
    # d/dlogp: policy term −A_b/(B·|y_b|) = −0.15 (row 0), +0.1 (row 1); KL term λ/5·(1 − e^d) per token;
    # nothing flows through A (detached) or into padding
    kl_grad = [0.1 * (1 - math.exp(d)) for d in (-0.5, 0.0, -0.5, 0.5, -1.0)]
    expected = t([[-0.15 + kl_grad[0], -0.15 + kl_grad[1], 0.0],
                  [0.1 + kl_grad[2], 0.1 + kl_grad[3], 0.1 + kl_grad[4]]])
    assert torch.allclose(logp.grad, expected, atol=1e-6)


def test_kl_pg_equal_advantages_empty_row_and_bf16():
    logp, ref, mask, _, _ = case()
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])  # row 1 generated nothing
    # β = 0: A = r − V* = 0.5 for both rows; ℓ_0 = −1.5, ℓ_1 = 0 (no token) → policy loss −(0.5·−1.5 + 0)/2 = 0.375
    loss, stats = kl_pg_loss(logp, ref, mask, t([1.0, 0.75]), t([0.5, 0.25]), beta=0.0, kl_coef=0.0, clip=5.0)
    assert loss.item() == pytest.approx(0.375, abs=1e-6) and stats["advantage_std"].item() == 0.0
    assert stats["kl_penalty"].item() == pytest.approx(K3[0] / 2, abs=1e-6)  # row 0's two tokens only
    full = kl_pg_loss(*case(), beta=0.1, kl_coef=0.5, clip=0.6)[0]
    bf16 = [x.detach().to(torch.bfloat16) for x in case()[:2]]  # these values are exact in bf16
    half = kl_pg_loss(bf16[0], bf16[1], case()[2], *case()[3:], beta=0.1, kl_coef=0.5, clip=0.6)[0]
    assert half.dtype == torch.float32 and half.item() == pytest.approx(full.item(), abs=1e-6)


def test_kl_pg_validates():
    logp, ref, mask, reward, v_star = case()
    with pytest.raises(ValueError, match="clip"):
        kl_pg_loss(logp, ref, mask, reward, v_star, beta=0.1, kl_coef=0.1, clip=0.0)
    with pytest.raises(ValueError, match="kl_coef"):
        kl_pg_loss(logp, ref, mask, reward, v_star, beta=0.1, kl_coef=-1.0, clip=1.0)
    with pytest.raises(ValueError, match="v_star"):
        kl_pg_loss(logp, ref, mask, reward, t([0.0]), beta=0.1, kl_coef=0.1, clip=1.0)


# ------------------------------------------------------------------------------------------------ awr
def test_awr_by_hand():
    logp, ref, mask, reward, v_star = case()
    loss, stats = awr_loss(logp, ref, mask, reward, v_star, kl_coef=0.5)
    # adv = r − V* = [0.75, −0.5]: mean 0.125, population std 0.625 → normalised [1, −1] → w = clamp(â + 1) =
    # [2, 0.1] (0 raised to the floor 0.1); CE = −mean log π: row 0 1.5, row 1 2/3
    # weighted CE = mean(2·1.5, 0.1·2/3) = 1.5333333
    assert stats["weight_mean"].item() == pytest.approx(1.05) and stats["weight_max"].item() == pytest.approx(2.0)
    assert stats["weighted_ce"].item() == pytest.approx((3.0 + 0.2 / 3) / 2, abs=1e-6)
    assert loss.item() == pytest.approx((3.0 + 0.2 / 3) / 2 + 0.5 * KL, abs=1e-6)
    loss.backward()
    # d/dlogp: −w_b/(B·|y_b|) + λ/5·(1 − e^d): row 0 −2/4 = −0.5 ; row 1 −0.1/6
    kl_grad = [0.1 * (1 - math.exp(d)) for d in (-0.5, 0.0, -0.5, 0.5, -1.0)]
    expected = t([[-0.5 + kl_grad[0], -0.5 + kl_grad[1], 0.0],
                  [-0.1 / 6 + kl_grad[2], -0.1 / 6 + kl_grad[3], -0.1 / 6 + kl_grad[4]]])
    assert torch.allclose(logp.grad, expected, atol=1e-6)


def test_awr_weights_clamp_and_exp_form():
    # one outlier among 20: mean 0.5, population std √4.75 = 2.1794495 → â = 4.359 clamped to 3 → w = 4;
    # the others â = −0.5/2.1794495 = −0.2294157 → w = 0.7705843
    weights = awr_weights(t([10.0] + [0.0] * 19))
    assert weights[0].item() == pytest.approx(4.0) and weights[1].item() == pytest.approx(1 - 0.5 / 4.75 ** 0.5)
    assert awr_weights(t([0.0, -10.0] + [0.0] * 18))[1].item() == pytest.approx(0.1)  # â = −3 → −2 → floor 0.1
    assert awr_weights(t([0.3, 0.3, 0.3])).tolist() == [1.0, 1.0, 1.0]  # every advantage equal: plain SFT
    exp = awr_weights(t([0.75, -0.5]), "exp", tau=0.5, max_weight=3.0)  # exp(1.5) = 4.48 → capped at 3; exp(−1)
    assert exp.tolist() == pytest.approx([3.0, math.exp(-1.0)])
    with pytest.raises(ValueError, match="weighting"):
        awr_weights(t([0.0]), "softmax")


def test_awr_equal_advantages_empty_row_and_bf16():
    logp, ref, _, _, _ = case()
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    loss, stats = awr_loss(logp, ref, mask, t([0.5, 0.5]), t([0.0, 0.0]), kl_coef=0.0)
    assert stats["weight_mean"].item() == 1.0 and loss.item() == pytest.approx((1.5 + 0.0) / 2, abs=1e-6)
    full = awr_loss(*case(), kl_coef=0.5)[0]
    bf16 = [x.detach().to(torch.bfloat16) for x in case()[:2]]
    half = awr_loss(bf16[0], bf16[1], case()[2], *case()[3:], kl_coef=0.5)[0]
    assert half.dtype == torch.float32 and half.item() == pytest.approx(full.item(), abs=1e-6)


# ------------------------------------------------------------------------------------------------ the interface
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_takes_a_packed_batch_and_gives_a_differentiable_loss(objective):
    logp, ref, mask, reward, v_star = case()
    batch = PackedBatch(logp, ref, logp.detach(), mask.float(), reward, v_star, torch.tensor([0, 0]))
    loss, stats = objective().loss(batch)
    assert loss.shape == () and loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(v.shape == () and not v.requires_grad for v in stats.values())
    loss.backward()
    assert logp.grad is not None and logp.grad[0, 2] == 0  # nothing flows into padding
    assert objective().rollouts_per_goal >= 1


def packed(group=(0, 0)):
    """``case()`` as a batch whose sampling-time log-probabilities differ from the policy's (ratios ≠ 1)."""
    logp, ref, mask, reward, v_star = case()
    old = logp.detach() + t([[0.3, -0.3, 0.0], [0.1, -0.2, 0.4]])
    return PackedBatch(logp, ref, old, mask.float(), reward, v_star, torch.tensor(group))


#: each objective with its loss's settings away from their defaults, and the pure loss function called with those
#: settings
SETTINGS_REACH_THE_LOSS = [
    (APO(beta2=0.3), lambda b: apo_loss(b.logp, b.ref_logp, b.mask, b.reward, b.v_star, 0.3)),
    (GRPO(group_size=2, clip_eps=0.1, beta_kl=0.5),
     lambda b: grpo_loss(b.logp, b.old_logp, b.ref_logp, b.mask, grpo_advantages(b.reward, b.group), 0.1, 0.5)),
    (KLPG(beta=0.2, kl_coef=0.3, clip=0.6),
     lambda b: kl_pg_loss(b.logp, b.ref_logp, b.mask, b.reward, b.v_star, 0.2, 0.3, 0.6)),
    (AWR(weighting="exp", tau=0.5, max_weight=1.5, kl_coef=0.2),
     lambda b: awr_loss(b.logp, b.ref_logp, b.mask, b.reward, b.v_star, "exp", 0.5, 1.5, 0.2)),
]


@pytest.mark.parametrize("objective, pure", SETTINGS_REACH_THE_LOSS, ids=lambda o: type(o).__name__)
def test_each_objective_passes_every_setting_to_its_loss_function(objective, pure):
    loss, stats = objective.loss(packed())
    expected, expected_stats = pure(packed())
    assert loss.item() == pytest.approx(expected.item(), abs=1e-7)
    assert {k: v.item() for k, v in stats.items() if k in expected_stats} == pytest.approx(
        {k: v.item() for k, v in expected_stats.items()}, abs=1e-7)
    default, _ = type(objective)().loss(packed())
    assert default.item() != pytest.approx(loss.item(), abs=1e-4)  # the settings changed the loss
    changed = [f.name for f in dataclasses.fields(objective) if getattr(objective, f.name) != f.default]
    for name in changed:  # and each one does on its own
        if name == "group_size":
            continue  # how many rollouts the data module samples, not a term of the loss
        alone = dataclasses.replace(objective, **{name: getattr(type(objective)(), name)})
        assert alone.loss(packed())[0].item() != pytest.approx(loss.item(), abs=1e-6), name


def test_objectives_say_what_the_data_module_needs_and_name_their_settings():
    assert [o.needs_v_star for o in OBJECTIVES] == [True, False, True, True]  # GRPO alone has no stage 1
    assert [o().rollouts_per_goal for o in OBJECTIVES] == [1, 4, 1, 1]
    assert GRPO(group_size=6).rollouts_per_goal == 6
    assert [o.name for o in OBJECTIVES] == ["apo", "grpo", "kl_pg", "awr"]  # the method in results by default
    assert repr(APO(beta2=0.05)) == "APO(beta2=0.05)"
    assert APO(beta2=0.05) == APO(beta2=0.05) != APO(beta2=0.1)


@pytest.mark.parametrize("build, setting", [
    (lambda: APO(beta2=0.0), "beta2"), (lambda: GRPO(group_size=1), "group_size"),
    (lambda: GRPO(clip_eps=0.0), "clip_eps"), (lambda: GRPO(beta_kl=-0.1), "beta_kl"),
    (lambda: KLPG(beta=-1.0), "beta"), (lambda: KLPG(kl_coef=-1.0), "kl_coef"), (lambda: KLPG(clip=0.0), "clip"),
    (lambda: AWR(weighting="softmax"), "weighting"), (lambda: AWR(tau=0.0), "tau"),
    (lambda: AWR(max_weight=0.0), "max_weight"), (lambda: AWR(kl_coef=-1.0), "kl_coef")])
def test_a_bad_setting_fails_when_the_objective_is_built_and_names_the_setting(build, setting):
    with pytest.raises(ValueError, match=f"^{setting} must be"):
        build()


def test_packed_batch_head_keeps_the_first_rows_of_every_field_with_their_gradients():
    logp = torch.randn(5, 3, requires_grad=True)
    batch = PackedBatch(logp, torch.randn(5, 3), torch.randn(5, 3), torch.ones(5, 3), torch.arange(5.0),
                        torch.arange(5.0) + 10, torch.arange(5), None)
    head = batch.head(2)
    for name in ("logp", "ref_logp", "old_logp", "mask", "reward", "v_star", "group"):
        assert torch.equal(getattr(head, name), getattr(batch, name)[:2]), name
    assert head.entropy is None
    head.logp.sum().backward()  # the rows kept still reach the policy's log-probabilities
    assert logp.grad[:2].eq(1).all() and logp.grad[2:].eq(0).all()
