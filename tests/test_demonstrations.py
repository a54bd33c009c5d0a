"""Oracle demonstrations with DART noise (Laskey et al. 2017): each mistake stays in the context, out of the loss, and
is undone at the next turn; the demonstration still succeeds. Also the range checks of the demonstration settings."""

import pytest
import torch

from apo_lightning.baselines.corpus import tokenizer_corpus
from apo_lightning.baselines.demonstrations import oracle_demonstrations
from apo_lightning.lit.demos import DemoNoise, _NoModel
from apo_lightning.models.tiny import train_tiny_tokenizer
from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.rollout.engine import RolloutEngine
from apo_lightning.webshop import WebShop, WebShopEnv

torch.set_num_threads(1)

GOALS = list(range(1500, 1512))  # training goals of the synthetic catalog


@pytest.fixture(scope="module")
def shop():
    return WebShop.load(None)


@pytest.fixture(scope="module")
def tokenizer(shop, tmp_path_factory):
    return train_tiny_tokenizer(list(tokenizer_corpus(shop, ChatFormat(), GOALS)), tmp_path_factory.mktemp("tok"),
                                vocab_size=800)


def demonstrations(shop, tokenizer, noise: float, seed: int = 0):
    engine = RolloutEngine(_NoModel(), tokenizer, ChatFormat(), max_new_tokens=64)
    return oracle_demonstrations(engine, [WebShopEnv(shop, max_steps=15) for _ in GOALS], GOALS, noise=noise,
                                 seed=seed, successful_only=False)


def learned_replies(trajectory) -> list[list[int]]:
    """The token runs of the trajectory's segments that are in the loss (gen_mask 1), in order."""
    runs = []
    for segment in trajectory.segments:
        start = None
        for i, m in enumerate(list(segment.gen_mask) + [0]):
            if m and start is None:
                start = i
            elif not m and start is not None:
                runs.append(list(segment.token_ids[start:i]))
                start = None
    return runs


def test_dart_mistakes_are_undone_at_the_next_turn_and_kept_out_of_the_loss(shop, tokenizer):
    plain = demonstrations(shop, tokenizer, noise=0.0)
    noisy = demonstrations(shop, tokenizer, noise=0.5)
    assert all(t.success for t in plain)
    assert all(learned_replies(t) == [tokenizer(turn.reply, add_special_tokens=False)["input_ids"]
                                      for turn in t.turns] for t in plain)  # the plain oracle's replies: all learned
    recovered, kinds = 0, set()
    for clean, trajectory in zip(plain, noisy):
        oracle = [t.action for t in clean.turns]
        replies = [tokenizer(t.reply, add_special_tokens=False)["input_ids"] for t in trajectory.turns]
        learned, kept, mistakes = learned_replies(trajectory), [], 0
        for i, turn in enumerate(trajectory.turns):  # the learned runs are the replies of the turns kept, in order
            if len(kept) < len(learned) and replies[i] == learned[len(kept)]:
                kept.append(turn.action)
                continue
            # a mistake: a wrong click instead of the oracle's next one, undone by the next turn: back to the
            # results after a wrong product, or the right value after a wrong option value
            path = [a for a in kept if a != "click[< prev]"]
            wrong, undo = turn.action, trajectory.turns[i + 1].action
            assert wrong.startswith("click[") and wrong != oracle[len(path)]
            assert undo in ("click[< prev]", oracle[len(path)])
            kinds.add(undo == "click[< prev]")
            mistakes += 1
        assert len(kept) == len(learned)
        # without the undos, the oracle's own path (cut short when the mistakes used up the step limit)
        path = [a for a in kept if a != "click[< prev]"]
        assert path == oracle[: len(path)] and (path == oracle or not trajectory.success)
        recovered += trajectory.success and mistakes > 0
    assert recovered >= len(GOALS) // 2 and kinds == {True, False}  # wrong products and wrong option values
    assert [t.turns for t in noisy] == [t.turns for t in demonstrations(shop, tokenizer, noise=0.5)]
    other = demonstrations(shop, tokenizer, noise=0.5, seed=5)
    assert [t.turns for t in other] != [t.turns for t in noisy]  # the seed draws the mistakes


def test_demonstration_settings_name_the_setting_and_value_out_of_range():
    with pytest.raises(ValueError, match=r"^demo_noise.probability must be in \[0, 1\], got 2$"):
        DemoNoise(probability=2)
    with pytest.raises(ValueError, match=r"^demo_noise.copies must be >= 1, got 0$"):
        DemoNoise(copies=0)
    assert DemoNoise(probability=0.3, copies=2) == DemoNoise(0.3, 2)
