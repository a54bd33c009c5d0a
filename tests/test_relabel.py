"""Option relabeling: which sibling goal a trajectory is replayed under, and that the replay is exact.

Oracle demonstrations on the synthetic catalog's training goals stand in for the policy's trajectories: plain ones
succeed (replayed under a sibling they fail), and ones that click a wrong value of an option and never undo it
(``recovery=False``) buy the goal's product with other options (replayed under the training goal that asks for
those options, when there is one, they succeed).
"""

import random

import pytest
import torch

from apo_lightning.baselines.corpus import tokenizer_corpus
from apo_lightning.baselines.demonstrations import oracle_demonstrations
from apo_lightning.models.tiny import TinyPolicySpec, build_tiny_model, train_tiny_tokenizer
from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.rollout.engine import RolloutEngine
from apo_lightning.rollout.relabel import OptionRelabeler
from apo_lightning.rollout.trajectory import Trajectory
from apo_lightning.webshop import WebShop, WebShopEnv

torch.set_num_threads(1)

GOALS = list(range(1500, 1524))  # training goals of the synthetic catalog


@pytest.fixture(scope="module")
def shop():
    return WebShop.load(None)


@pytest.fixture(scope="module")
def engine(shop, tmp_path_factory):
    tokenizer = train_tiny_tokenizer(list(tokenizer_corpus(shop, ChatFormat(), GOALS)), tmp_path_factory.mktemp("tok"),
                                     vocab_size=800)
    model = build_tiny_model(tokenizer, tmp_path_factory.mktemp("model"),
                             TinyPolicySpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                            intermediate_size=64))
    return RolloutEngine(model, tokenizer, ChatFormat(), max_new_tokens=64)  # the model is never called: replays


@pytest.fixture(scope="module")
def relabeler(shop):
    return OptionRelabeler(shop, shop.split("train"))


def demonstrations(engine, shop, noise: float):
    return oracle_demonstrations(engine, [WebShopEnv(shop, max_steps=15) for _ in GOALS], GOALS, successful_only=False,
                                 noise=noise, options_only=True, recovery=False)


def options(goal: dict) -> dict:
    return {k.lower(): v.lower() for k, v in goal["goal_options"].items()}


def test_a_success_is_replayed_under_a_sibling_that_differs_in_fewest_options_and_fails_there(engine, shop,
                                                                                             relabeler):
    trajectories = [t for t in demonstrations(engine, shop, noise=0.0) if t.success]
    rng = random.Random(0)
    chosen = [(t, relabeler.target(t, rng)) for t in trajectories]
    chosen = [(t, g) for t, g in chosen if g is not None]
    assert len(chosen) >= 10
    train = set(shop.split("train"))
    for t, g in chosen:
        own, new = shop.goals[t.goal_index], shop.goals[g]
        assert g != t.goal_index and g in train and new["asin"] == own["asin"]
        differ = sum(options(own)[k] != v for k, v in options(new).items())
        fewest = min(sum(options(own)[k] != v for k, v in options(shop.goals[s]).items())
                     for s in relabeler.siblings[own["asin"].upper()] if s != t.goal_index
                     and shop.reward(shop.goals[s], t.purchased["asin"], t.purchased["options"])[0] < 1.0)
        assert differ == fewest >= 1
    replays = relabeler.replay(engine, [WebShopEnv(shop, max_steps=15) for _ in chosen], [t for t, _ in chosen],
                               [g for _, g in chosen])
    assert len(replays) == len(chosen) and None not in replays  # the rewritten search finds the same product here
    for (t, g), r in zip(chosen, replays):
        new = shop.goals[g]
        assert r.goal_index == g and r.instruction == new["instruction_text"]
        assert f"Instruction: [SEP] {new['instruction_text']}" in r.turns[0].observation
        assert [x.action for x in r.turns][1:] == [x.action for x in t.turns][1:]  # the same clicks
        search = r.turns[0].action.lower()
        assert all(f"{k}: {v}" in search for k, v in options(new).items())  # the query copies the new instruction
        assert r.purchased == t.purchased and r.score == shop.reward(new, t.purchased["asin"], t.purchased["options"])[0]
        assert not r.success and r.score < 1.0 and r.reward == r.score
        assert sum(r.segments[0].gen_mask) > 0 and not any(r.segments[0].logp)  # learned tokens, log-prob 0


def test_a_wrong_option_purchase_is_replayed_under_the_training_goal_that_asks_for_it_and_succeeds(engine, shop,
                                                                                                  relabeler):
    trajectories = [t for t in demonstrations(engine, shop, noise=1.0) if t.purchased and not t.success]
    rng = random.Random(0)
    chosen = [(t, relabeler.target(t, rng)) for t in trajectories]
    asked = [(t, g) for t, g in chosen if g is not None]
    assert len(asked) >= 3
    for t, g in chosen:
        bought = {k.lower(): v.lower() for k, v in t.purchased["options"].items()}
        wanted = relabeler.by_options.get((t.purchased["asin"].upper(), tuple(sorted(bought.items()))))
        assert g == (wanted if wanted != t.goal_index else None)  # the goal asking for what was bought, or none
    replays = relabeler.replay(engine, [WebShopEnv(shop, max_steps=15) for _ in asked], [t for t, _ in asked],
                               [g for _, g in asked])
    assert len(replays) == len(asked) and all(r is not None and r.success and r.score == 1.0 for r in replays)


def test_a_replay_that_leads_elsewhere_is_dropped(engine, shop, relabeler, monkeypatch):
    trajectories = [t for t in demonstrations(engine, shop, noise=0.0) if t.success][:4]
    targets = [relabeler.target(t, random.Random(0)) for t in trajectories]
    keep = relabeler.replies
    monkeypatch.setattr(relabeler, "replies", lambda t, g: ["<answer>search[zzzz qqqq]</answer>"] + keep(t, g)[1:])
    envs = [WebShopEnv(shop, max_steps=15) for _ in trajectories]
    assert relabeler.replay(engine, envs, trajectories, targets) == [None] * len(trajectories)
    assert relabeler.target(Trajectory(goal_index=GOALS[0], instruction=""), random.Random(0)) is None  # no purchase


def test_human_goals_have_no_siblings_and_relabeling_refuses_them_by_name(real_data_dir, monkeypatch):
    from apo_lightning.lit import rl_data
    from apo_lightning.lit.settings import EnvConfig

    human = WebShop.load(real_data_dir, goals="human")
    relabeler = OptionRelabeler(human, range(len(human.goals)))
    assert human.goals and not relabeler.siblings  # human goals name their options in free text, not as a dict
    monkeypatch.setattr(rl_data, "OptionRelabeler", lambda shop, goals: relabeler)  # as if the catalog were theirs
    data = rl_data.WebShopRLDataModule(env=EnvConfig(data_dir=None), relabel=True)
    with pytest.raises(ValueError, match="relabel needs goals whose options are a dict"):
        data.setup("fit")
