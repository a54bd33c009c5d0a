"""Scripted policies and the eval command."""

import json
import subprocess
import sys

import pytest

from apo_lightning.agent.scripted import (
    OraclePolicy,
    RandomPolicy,
    RulePolicy,
    instruction_of,
    make_policy,
    run_episode,
    strip_price,
    summarize,
)
from apo_lightning.webshop import WebShop, WebShopEnv


@pytest.fixture(scope="module")
def shop(real_data_dir):
    return WebShop.load(real_data_dir, goals="synthetic")


def test_instruction_is_read_from_either_observation_mode(shop):
    for mode in ("text", "text_rich"):
        env = WebShopEnv(shop, observation_mode=mode)
        assert instruction_of(env.reset(5)) == shop.goals[5]["instruction_text"]


def test_strip_price():
    assert strip_price("Find me socks, and price lower than 30.00 dollars") == "Find me socks"
    assert strip_price("Find me socks") == "Find me socks"


def test_rule_baseline_searches_clicks_first_result_and_buys(shop):
    env = WebShopEnv(shop)
    result = run_episode(env, RulePolicy(), 0)
    assert result.actions[0] == f"search[{shop.goals[0]['instruction_text']}]"
    assert result.actions[1].startswith("click[b") and result.actions[2] == "click[buy now]"
    assert result.steps == 3 and result.info["reward_info"] is not None


def test_oracle_buys_the_target_with_the_goal_options(shop):
    env = WebShopEnv(shop)
    results = [run_episode(env, OraclePolicy(), i) for i in range(40)]
    found = [r for r in results if r.info.get("asin") == shop.goals[r.goal_index]["asin"]]
    assert len(found) >= 36
    for r in found:
        assert r.info["options"] == dict(shop.goals[r.goal_index]["goal_options"])
    assert summarize(results)["success_rate"] >= 0.85


def test_random_policy_is_seeded_and_respects_the_step_limit(shop):
    env = WebShopEnv(shop, max_steps=15)
    a = [run_episode(env, RandomPolicy(seed=1), i).actions for i in range(10)]
    b = [run_episode(env, RandomPolicy(seed=1), i).actions for i in range(10)]
    assert a == b
    assert all(len(actions) <= 15 for actions in a)


def test_make_policy_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown scripted policy"):
        make_policy("greedy")


def test_eval_command_prints_metrics_json_last(real_data_dir):
    out = subprocess.run(
        [sys.executable, "-m", "apo_lightning.webshop", "eval", "--data-dir", str(real_data_dir), "--policy", "rule",
         "--split", "test", "--limit", "20"],
        capture_output=True, text=True, check=True,
    )
    metrics = json.loads(out.stdout.strip().splitlines()[-1])
    assert metrics["episodes"] == 20 and metrics["avg_steps"] == 3.0
    assert set(metrics) >= {"success_rate", "score", "avg_steps", "episodes"}
    assert "rule on test" in out.stderr  # the progress bar
