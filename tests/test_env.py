"""Environment behaviour beyond the golden files: malformed actions, the step limit, bad data files."""

import json
import random
import re
import shutil

import pytest

from apo_lightning.webshop import WebShop, WebShopDataError, WebShopEnv, parse_action
from apo_lightning.webshop.settings import RewardSettings

ORIGINAL_PATTERN = re.compile(r"(.+)\[(.+)\]")  # engine.py parse_action


def original_parse(action):
    m = re.match(ORIGINAL_PATTERN, action)
    return (action, None) if m is None else m.groups()


@pytest.fixture(scope="module")
def shop(real_data_dir):
    return WebShop.load(real_data_dir, goals="synthetic")


def test_parse_action_matches_the_original_regex():
    cases = ["search[red shoes]", "click[buy now] please", "search[]", "search[men's [large] shirt]", "[x]",
             "a[b]", "a[]]", "[[]]", "click[a]\n[b]", "x[\n]", "s[a]b]c", "Search[x]", " search[x]", "", "]"]
    rng = random.Random(0)
    alphabet = "ab[] \n"
    cases += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(20000)]
    for action in cases:
        assert parse_action(action) == original_parse(action), repr(action)


def test_parse_action_is_linear_on_huge_bracket_strings():
    action = "click[" + "[" * 200_000 + "x"  # the regex backtracks quadratically on this
    assert parse_action(action) == (action, None)


@pytest.mark.parametrize("action", [
    "", "   ", "search[]", "click[]", "search[unbalanced", "click]buy now[", "Search[shoes]", " search[shoes]",
    "buy[now]", "click[not a real button]", "click[search]", "x" * 100_000, "search" + "[" * 50_000,
    "click[ünïcödé]", "search\n[shoes]", "🛒[🛍]", "\x00\x01", "click[buy now]",
])
def test_malformed_actions_are_no_ops(shop, action):
    env = WebShopEnv(shop, max_steps=None)
    first = env.reset(3)
    before = env.available_actions()
    obs, reward, done, info = env.step(action)
    assert (obs, reward, done) == (first, 0.0, False)
    assert env.available_actions() == before
    assert info["valid"] is False
    # a real action on the same env changes the page, so the comparisons above would have seen one
    obs, _, _, info = env.step("search[shoes]")
    assert info["valid"] and obs != first and env.available_actions() != before


def test_search_runs_on_any_page_and_non_ascii_is_harmless(shop):
    env = WebShopEnv(shop, max_steps=None)
    env.reset(0)
    obs, _, _, info = env.step("search[zapatos ñandú 靴]")
    assert info["valid"] and info["page"] == "search_results"
    assert "Page 1 (Total results:" in obs


def test_step_limit_ends_the_episode_with_reward_zero(shop):
    env = WebShopEnv(shop, max_steps=3)
    env.reset(0)
    assert env.step("click[search]")[2] is False
    assert env.step("search[shoes]")[2] is False
    obs, reward, done, info = env.step("click[next >]")
    assert (reward, done, info["truncated"]) == (0.0, True, True)
    assert env.step("search[shoes]")[:3] == (obs, 0.0, True)  # nothing happens after the end


def test_buy_on_the_last_allowed_step_is_scored(shop):
    env = WebShopEnv(shop, max_steps=3)
    for index, goal in enumerate(shop.goals):  # a goal whose query lists its product on page 1
        env.reset(index)
        env.step(f"search[{goal['query']}]")
        if goal["asin"].lower() in env.available_actions()["clickables"]:
            break
    env.reset(index)
    env.step(f"search[{goal['query']}]")
    env.step(f"click[{goal['asin'].lower()}]")
    obs, reward, done, info = env.step("click[buy now]")
    assert done and not info["truncated"] and reward > 0
    assert info["reward_info"]["r_type"] == 1.0 and info["asin"] == goal["asin"]


def test_env_rejects_bad_settings(shop):
    with pytest.raises(ValueError, match="observation_mode"):
        WebShopEnv(shop, observation_mode="html")
    with pytest.raises(ValueError, match="max_steps"):
        WebShopEnv(shop, max_steps=0)
    with pytest.raises(IndexError):
        WebShopEnv(shop).reset(len(shop.goals))


def test_missing_data_directory_names_it(tmp_path):
    with pytest.raises(WebShopDataError, match="does not exist"):
        WebShop.load(tmp_path / "nowhere")


def test_missing_product_file_names_the_expected_files(tmp_path):
    with pytest.raises(WebShopDataError, match="items_shuffle_1000.json"):
        WebShop.load(tmp_path)


def _copy_data(real_data_dir, tmp_path):
    for name in ("items_shuffle_1000.reconstructed.json", "items_ins_v2_1000.json"):
        shutil.copy(real_data_dir / name, tmp_path / name)
    return tmp_path


def test_malformed_product_file_names_the_file(real_data_dir, tmp_path):
    data = _copy_data(real_data_dir, tmp_path)
    (data / "items_shuffle_1000.reconstructed.json").write_text('{"not": "a list"')
    with pytest.raises(WebShopDataError, match="items_shuffle_1000.reconstructed.json.*JSON"):
        WebShop.load(data)


def test_product_without_required_keys_is_reported(real_data_dir, tmp_path):
    data = _copy_data(real_data_dir, tmp_path)
    (data / "items_shuffle_1000.reconstructed.json").write_text(json.dumps([{"asin": "B000000001"}]))
    with pytest.raises(WebShopDataError, match="lacks the keys"):
        WebShop.load(data)


def test_without_precomputed_tokens_or_noun_table_the_data_still_loads(real_data_dir, tmp_path):
    shop = WebShop.load(_copy_data(real_data_dir, tmp_path))
    assert len(shop.goals) == 6910
    assert shop.noun_source.startswith("package data")  # the shipped spaCy nouns stand in for the missing table
    hits = shop.search("women's shoes")
    assert len(hits) == 50  # our own analyzer over the document contents


def test_shown_text_gives_a_clickable_as_the_page_writes_it(shop):
    from apo_lightning.webshop.pages import shown_text

    env = WebShopEnv(shop, max_steps=None)
    env.reset(0)
    env.step("search[pillow]")
    asin = next(key for key, clickable in env.page.clickables.items() if clickable.kind == "link")
    assert shown_text(env.page, "next >") == "Next >" and shown_text(env.page, asin) == asin.upper()
    env.step(f"click[{asin}]")
    assert shown_text(env.page, "buy now") == "Buy Now" and shown_text(env.page, "< prev") == "< Prev"
    option = next((key for key, clickable in env.page.clickables.items() if clickable.kind == "option"), None)
    if option is not None:
        assert shown_text(env.page, option) == option  # option values keep their case as keys
    with pytest.raises(KeyError):
        shown_text(env.page, "not on this page")


def test_episode_reward_score_or_success_plus_the_format_penalty():
    score, success = RewardSettings(format_penalty=-0.1), RewardSettings(kind="success", format_penalty=-0.1)
    assert score(0.8, 0) == pytest.approx(0.8)  # right product, one option of five missed
    assert score(1.0, 2) == pytest.approx(0.8)
    assert success(0.8, 0) == 0.0  # success is all or nothing
    assert success(1.0, 0) == 1.0
    assert success(1.0, 2) == pytest.approx(0.8)
    assert success(0.0, 1) == pytest.approx(-0.1)  # no purchase


def test_an_unknown_reward_kind_is_named_with_its_value():
    with pytest.raises(ValueError) as raised:
        RewardSettings(kind="won")
    assert str(raised.value) == "reward.kind must be one of ('score', 'success'), got 'won'"
