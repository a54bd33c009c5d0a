"""Scripted policies, their episode loop, and the evaluation command (scripted and model policies)."""

import json

import pytest
from scipy.stats import binomtest

from apo_lightning.baselines.scripted import (
    OraclePolicy,
    RandomPolicy,
    RulePolicy,
    instruction_of,
    make_policy,
    play_episode,
    strip_price,
)
from apo_lightning.eval.__main__ import main
from apo_lightning.eval.metrics import trajectory_metrics
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
    result = play_episode(env, RulePolicy(), 0)
    actions = [turn.action for turn in result.turns]
    assert actions[0] == f"search[{shop.goals[0]['instruction_text']}]"
    assert actions[1].startswith("click[b") and actions[2] == "click[buy now]"
    assert len(result.turns) == 3 and result.reward_info is not None


def test_oracle_buys_the_target_with_the_goal_options(shop):
    env = WebShopEnv(shop)
    results = [play_episode(env, OraclePolicy(), i) for i in range(40)]
    found = [r for r in results if r.purchased and r.purchased["asin"] == shop.goals[r.goal_index]["asin"]]
    assert len(found) >= 36
    for r in found:
        assert r.purchased["options"] == dict(shop.goals[r.goal_index]["goal_options"])
    assert trajectory_metrics(results)["success_rate"] >= 0.85


def test_random_policy_is_seeded_and_respects_the_step_limit(shop):
    env = WebShopEnv(shop, max_steps=15)
    a = [[t.action for t in play_episode(env, RandomPolicy(seed=1), i).turns] for i in range(10)]
    b = [[t.action for t in play_episode(env, RandomPolicy(seed=1), i).turns] for i in range(10)]
    c = [[t.action for t in play_episode(env, RandomPolicy(seed=2), i).turns] for i in range(10)]
    assert a == b and a != c
    assert all(len(actions) <= 15 for actions in a)


def test_make_policy_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown scripted policy"):
        make_policy("greedy")


def test_evaluate_command_prints_metrics_json_last_and_writes_results(real_data_dir, tmp_path, capsys):
    main(["evaluate", "--data-dir", str(real_data_dir), "--model", "rule", "--split", "test", "--limit", "20",
          "--results-dir", str(tmp_path / "rule")])
    out = capsys.readouterr()
    metrics = json.loads(out.out.strip().splitlines()[-1])
    assert metrics["episodes"] == 20 and metrics["avg_turns"] == 3.0
    # the Wilson 95 % interval of the successes counted (any interval around the rate would pass a range check)
    successes = round(metrics["success_rate"] * 20)
    wilson = binomtest(successes, 20).proportion_ci(confidence_level=0.95, method="wilson")
    assert (metrics["success_rate_low"], metrics["success_rate_high"]) == pytest.approx((wilson.low, wilson.high))
    assert "rule" in out.err  # the progress bar
    records = [json.loads(line) for line in (tmp_path / "rule" / "episodes.jsonl").read_text().splitlines()]
    assert [r["goal_index"] for r in records] == list(range(20)) and {r["method"] for r in records} == {"rule"}
    summary = (tmp_path / "rule" / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("method,split,episodes,success_rate,score,avg_turns,invalid_reply_rate")


def test_evaluate_skip_evaluates_a_split_in_parts_that_join_to_one_run(real_data_dir, tmp_path, capsys):
    common = ["evaluate", "--data-dir", str(real_data_dir), "--model", "rule", "--split", "test"]
    main(common + ["--limit", "12", "--results-dir", str(tmp_path / "whole")])
    main(common + ["--limit", "7", "--results-dir", str(tmp_path / "first")])
    main(common + ["--skip", "7", "--limit", "5", "--results-dir", str(tmp_path / "rest")])
    capsys.readouterr()
    def records(name):
        return [json.loads(line) for line in (tmp_path / name / "episodes.jsonl").read_text().splitlines()]
    assert [r["goal_index"] for r in records("rest")] == list(range(7, 12))
    assert records("first") + records("rest") == records("whole")
    with pytest.raises(SystemExit, match="--skip 500: the test split has 500 goals"):
        main(common + ["--skip", "500"])
    with pytest.raises(SystemExit, match="--skip -1 --limit 0: both must be >= 0"):
        main(common + ["--skip", "-1"])
