"""A policy on an instruction a person types (``python -m apo_lightning.eval ask``): each turn printed, the purchase
named, a score only for a catalog goal's own instruction; and the env episode behind it, which buys but never scores
a goal that is only an instruction."""

from pathlib import Path

import pytest

from apo_lightning.eval.__main__ import main
from apo_lightning.eval.ask import known_goal, page_excerpt
from apo_lightning.webshop import WebShop, WebShopEnv
from apo_lightning.webshop.goals import instruction_goal

POLICY = str(Path(__file__).resolve().parents[1] / "models" / "quickstart-ref")
TYPED = "red running shoes for men"


@pytest.fixture(scope="module")
def shop() -> WebShop:
    return WebShop.load(None)


def test_a_goal_that_is_only_an_instruction_buys_but_is_not_scored(shop):
    env = WebShopEnv(shop.with_goals([instruction_goal("red running shoes")]))
    assert "red running shoes" in env.reset(0)
    env.step("search[running shoes]")
    asin = next(c for c in env.available_actions()["clickables"] if c.upper() in shop.product_by_asin)
    env.step(f"click[{asin}]")
    observation, reward, done, info = env.step("click[buy now]")
    assert (reward, done, info["reward_info"], info["asin"]) == (0.0, True, {}, asin.upper())
    assert shop.goals[0]["asin"]  # the catalog's own goals are untouched


def test_known_goal_and_page_excerpt(shop):
    assert known_goal(shop, "  " + shop.goals[7]["instruction_text"] + " ") == 7
    assert known_goal(shop, TYPED) is None
    page = f"WebShop [SEP] Instruction: [SEP] {TYPED} [SEP] Back to Search [SEP] Page 1 [SEP] " + "x" * 300
    assert page_excerpt(page, TYPED, 40) == "Back to Search | Page 1 | " + "x" * 13 + "…"


def test_ask_prints_every_turn_and_the_product_bought(shop, capsys):
    result = main(["ask", "--model", POLICY, "--data-dir", "synthetic", "--valid-clicks", TYPED])
    out = capsys.readouterr().out
    assert out.startswith(f"instruction (not a catalog goal): {TYPED}")
    assert out.count("\nturn ") == result["turns"] >= 3
    assert out.count("  page:    ") == out.count("  thought: ") == out.count("  action:  ") == result["turns"]
    assert "  action:  search[" in out and "  action:  click[buy now]" in out
    assert result["asin"] in shop.product_by_asin and result["title"] == shop.product_by_asin[result["asin"]]["Title"]
    assert f"\nbought {result['asin']}: {result['title']}\noptions: " in out
    assert result["score"] is None and "score:" not in out  # a typed instruction is not scored


def test_ask_scores_a_catalog_goals_own_instruction(shop, capsys):
    instruction = shop.goals[0]["instruction_text"]
    result = main(["ask", "--model", POLICY, "--data-dir", "synthetic", "--valid-clicks", instruction])
    out = capsys.readouterr().out
    assert result["goal_index"] == 0 and out.startswith("instruction (goal 0 of the catalog): ")
    assert 0 <= result["score"] <= 1 and f"score: {result['score']:.3f} (the WebShop score of goal 0" in out


def test_ask_refuses_an_empty_instruction(capsys):
    with pytest.raises(SystemExit, match="the instruction is empty"):
        main(["ask", "--model", POLICY, "--data-dir", "synthetic", "  "])
