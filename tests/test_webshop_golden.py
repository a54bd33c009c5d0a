"""The environment against the golden fixtures made with the original WebShop code (exact equality everywhere).

The fixtures come with the real data (docs/webshop.md, "How it is checked"); the SOURCE.md beside them says how
each was generated.
"""

import functools
import json

import pytest

from apo_lightning.webshop import WebShop, WebShopEnv
from apo_lightning.webshop.catalog import search_document


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module", params=["in_memory", "on_disk"])
def load(request, tmp_path_factory):
    """``WebShop.load`` into memory, or through the on-disk catalog (webshop/store.py): every check runs on both."""
    if request.param == "in_memory":
        return functools.partial(WebShop.load, cache=False)
    return functools.partial(WebShop.load, cache=True, cache_dir=tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def synthetic_shop(real_data_dir, load):
    return load(real_data_dir, goals="synthetic", seed=233)


@pytest.fixture(scope="module")
def human_shop(real_data_dir, load):
    return load(real_data_dir, goals="human", seed=233)


def test_all_synthetic_goals_in_seed_233_order(synthetic_shop, golden_dir):
    golden = json.loads((golden_dir / "goals_synthetic_seed233.json").read_text())
    assert len(golden) == 6910
    assert synthetic_shop.goals == golden  # every field of all 6,910 goals, in order


def test_all_human_goals_in_seed_233_order(human_shop, golden_dir):
    golden = json.loads((golden_dir / "goals_human_seed233.json").read_text())
    assert len(golden) == 13
    assert human_shop.goals == golden


def test_all_prices(synthetic_shop, human_shop, golden_dir):
    golden = json.loads((golden_dir / "product_prices_seed233.json").read_text())
    assert len(golden) == 1000
    assert synthetic_shop.prices == golden
    assert human_shop.prices == golden


def test_another_seed_gives_another_goal_order_and_other_prices(synthetic_shop, golden_dir):
    """So that the seed-233 comparisons above can fail: the seed, not a fixed order, decides what they check."""
    other = WebShop.load(synthetic_shop.data_dir, goals="synthetic", seed=234)
    golden_goals = json.loads((golden_dir / "goals_synthetic_seed233.json").read_text())
    assert len(other.goals) == len(golden_goals)
    assert [g["asin"] for g in other.goals] != [g["asin"] for g in golden_goals]
    assert other.prices != json.loads((golden_dir / "product_prices_seed233.json").read_text())


def test_processed_products_and_search_documents(human_shop, real_data_dir):
    """The index's stored products were processed with human_goals=True; every key must match."""
    docs = read_jsonl(real_data_dir / "webshop_1k_search_docs.jsonl")
    assert [d["id"] for d in docs] == [p["asin"] for p in human_shop.products]
    for doc in docs:
        product = human_shop.product_by_asin[doc["id"]]
        assert product == doc["product"]
        assert search_document(product) == doc["contents"]


def test_all_top50_search_rankings(synthetic_shop, golden_dir):
    golden = read_jsonl(golden_dir / "bm25_top50_golden.jsonl")
    assert len(golden) == 770
    for case in golden:
        hits = synthetic_shop.search(case["query"], k=50)
        assert [asin for asin, _ in hits] == [asin for asin, _ in case["hits"]], case["query"]
        assert [round(score, 4) for _, score in hits] == pytest.approx([s for _, s in case["hits"]], abs=1e-4)


def test_all_reward_cases(synthetic_shop, human_shop, golden_dir):
    cases = read_jsonl(golden_dir / "reward_cases_seed233.jsonl")
    assert len(cases) == 4000
    for case in cases:
        if isinstance(case["goal_index"], str):  # "human:k"
            shop, goal = human_shop, human_shop.goals[int(case["goal_index"].split(":")[1])]
        else:
            shop, goal = synthetic_shop, synthetic_shop.goals[case["goal_index"]]
        assert shop.prices[case["asin"]] == case["price"]
        reward, info = shop.reward(goal, case["asin"], case["options"])
        assert reward == case["reward"], case["case"]
        assert info == case["info"], case["case"]
        assert list(info) == list(case["info"]), case["case"]  # same keys in the same order
        assert type(info["r_price"]) is bool


@pytest.mark.parametrize("goals", ["synthetic", "human"])
@pytest.mark.parametrize("mode", ["text", "text_rich"])
def test_every_step_of_the_golden_episodes(goals, mode, synthetic_shop, human_shop, golden_dir):
    shop = synthetic_shop if goals == "synthetic" else human_shop
    episodes = read_jsonl(golden_dir / f"episodes_{goals}_seed233.jsonl")
    assert len(episodes) == (28 if goals == "synthetic" else 9)
    env = WebShopEnv(shop, observation_mode=mode, max_steps=None)
    key = "observation" if mode == "text" else "observation_text_rich"
    steps = 0
    for episode in episodes:
        for n, step in enumerate(episode["steps"]):
            where = f"goal {episode['goal_index']} step {n} action {step['action']!r}"
            if step["action"] is None:
                obs, reward, done, info = env.reset(episode["goal_index"]), 0.0, False, {}
            else:
                obs, reward, done, info = env.step(step["action"])
            assert obs == step[key], where
            assert env.available_actions() == step["available_actions"], where
            assert reward == step["reward"], where
            assert done == step["done"], where
            assert info.get("reward_info") == step.get("verbose_info"), where
            steps += 1
    assert steps == (232 if goals == "synthetic" else 67)
