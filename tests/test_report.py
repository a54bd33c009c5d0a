"""The evaluation results directory: failure classes, summary.csv, episodes.jsonl, failure_analysis.md."""

import csv
import json
import os
import re
from pathlib import Path

import pytest

from apo_lightning.eval import report
from apo_lightning.eval.report import category_breakdown, classify_failure, describe_failure, write_results
from apo_lightning.eval.schema import BASE_COLUMNS, FAILURE_CLASSES, plural
from apo_lightning.baselines.scripted import OraclePolicy, RulePolicy, play_episode
from apo_lightning.rollout.trajectory import Trajectory, Turn
from apo_lightning.utils import files
from apo_lightning.webshop import WebShop, WebShopEnv
from apo_lightning.webshop.synthetic import ensure_catalog

REPO_ROOT = Path(__file__).resolve().parents[1]
GOAL = {"asin": "B000000001"}


@pytest.fixture(scope="module")
def shop():
    """The synthetic catalog (the embedded default data set), generated under data/synthetic/seed0 on first use."""
    return WebShop.load(ensure_catalog(REPO_ROOT / "data" / "synthetic" / "seed0"))


# ---------------------------------------------------------------------------------------------------- builders
def turn(action, valid=True, reward=0.0, done=False, error=None, observation="page"):
    reply = f"<think>t</think><answer>{action}</answer>" if action is not None else "I am not sure."
    return Turn(observation, reply, "t" if action else "", action, error if action is None else None,
                int(action is not None), reward, done, valid and action is not None, 5, "answer")


def no_action():
    return turn(None, error="no_answer_tag")


def info(r_type=1.0, r_att=1.0, r_option=1.0, r_price=True):
    return {"r_type": r_type, "r_att": r_att, "w_att": 0.3, "query_match": True, "category_match": True,
            "title_score": 1.0, "r_option": r_option, "w_option": 0.3, "r_price": r_price, "w_price": 0.3}


def traj(turns, asin=None, reward_info=None, truncated=False, score=0.5, goal_index=0):
    bought = asin is not None
    return Trajectory(goal_index, "buy it", list(turns), score=score if bought else 0.0,
                      reward=score if bought else 0.0, success=bought and score == 1.0,
                      reward_info=reward_info, purchased={"asin": asin, "options": {}} if bought else None,
                      truncated=truncated)


def buys(asin, reward_info, score=0.5):
    turns = [turn("search[x]"), turn(f"click[{asin.lower()}]"), turn("click[buy now]", reward=score, done=True)]
    return traj(turns, asin, reward_info, score=score)


# ---------------------------------------------------------------------------------------------------- classify
@pytest.mark.parametrize("trajectory, expected", [
    (buys("B000000001", info(), score=1.0), "success"),
    # format errors: >= half the turns without an action, or nothing the env executed, or no turns at all
    (traj([turn("search[a]"), no_action(), turn("click[x]"), no_action()]), "format_errors"),
    (traj([turn("search[a]", valid=False), turn("click[nope]", valid=False)], truncated=True), "format_errors"),
    (traj([]), "format_errors"),
    # no purchase
    (traj([turn("search[a]"), turn("search[b]"), turn("search[c]")], truncated=True), "search_loop"),
    (traj([turn("search[red  shoes]"), turn("click[b0]"), turn("search[Red shoes]")]), "search_loop"),
    (traj([turn("search[a]"), turn("click[b0]"), turn("click[< prev]"), turn("click[b1]")], truncated=True),
     "no_purchase_step_limit"),
    (traj([turn("search[a]"), turn("click[b0]")]), "other"),
    # purchases
    (buys("B000000002", info(r_price=False)), "over_price"),
    (buys("B000000001", info(r_option=0.5, r_price=False)), "over_price"),
    (buys("B000000002", info(r_type=0.5)), "wrong_product"),
    (buys("B000000002", info(r_att=0.5, r_option=0.0)), "wrong_product"),
    (buys("b000000001", info(r_option=0.5)), "right_product_wrong_options"),
    (buys("B000000002", info(r_option=0.0)), "other"),  # a full substitute that missed only options
    (buys("B000000001", info(r_att=0.5)), "other"),  # the target missing an attribute (text-matching quirk)
])
def test_classify_failure_rules(trajectory, expected):
    assert classify_failure(trajectory, GOAL) == expected


def test_a_purchase_without_options_or_price_info_reads_as_matched():
    reward_info = info(r_att=1.0)
    del reward_info["r_option"], reward_info["r_price"]
    assert classify_failure(buys("B000000001", reward_info, score=0.9), GOAL) == "other"


def test_classify_failure_precedence():
    # format errors beat a purchase; a search loop beats the step limit
    sloppy = [turn("search[a]"), no_action(), no_action(), no_action(), turn("click[b0]"),
              turn("click[buy now]", done=True)]
    assert classify_failure(traj(sloppy, "B000000002", info(r_type=0.1)), GOAL) == "format_errors"
    assert classify_failure(traj(sloppy[:2] + sloppy[4:], "B000000002", info(r_type=0.1)), GOAL) == "wrong_product"
    looping = traj([turn("search[a]"), turn("search[b]"), turn("search[c]"), turn("click[b0]")], truncated=True)
    assert classify_failure(looping, GOAL) == "search_loop"


def test_classify_failure_needs_reward_info_for_a_purchase():
    with pytest.raises(ValueError, match="no reward_info"):
        classify_failure(buys("B000000002", None), GOAL)


# ---------------------------------------------------------------------------------------------------- real shop
def _find(shop, goal, want):
    """The first non-target product whose reward info for ``goal`` (no options selected) satisfies ``want``."""
    for product in shop.products:
        if product["asin"] == goal["asin"]:
            continue
        score, reward_info = shop.reward(goal, product["asin"], {})
        if want(reward_info):
            return product["asin"]
    raise AssertionError("no such product in the synthetic catalog")


def _bought(shop, goal_index, asin, options):
    """A real trajectory that searches, opens ``asin``, clicks ``options`` and buys it."""
    goal = shop.goals[goal_index]
    score, reward_info = shop.reward(goal, asin, options)
    turns = ([turn("search[x]"), turn(f"click[{asin.lower()}]")] + [turn(f"click[{v}]") for v in options.values()]
             + [turn("click[buy now]", reward=score, done=True)])
    return Trajectory(goal_index, goal["instruction_text"], turns, score=score, reward=score, success=score == 1.0,
                      reward_info=reward_info, purchased={"asin": asin, "options": dict(options)})


@pytest.fixture(scope="module")
def one_per_class(shop):
    """One real episode per failure class plus one success, on goals 0-7 (two categories at least)."""
    g = shop.goals
    goal0 = g[0]
    out = {
        "success": _bought(shop, 0, goal0["asin"], dict(goal0["goal_options"])),
        "right_product_wrong_options": _bought(shop, 1, g[1]["asin"], {}),
        "over_price": _bought(shop, 2, _find(shop, g[2], lambda i: not i["r_price"]), {}),
        "wrong_product": _bought(shop, 3, _find(shop, g[3], lambda i: i["r_price"] and i["r_type"] < 1), {}),
        "other": _bought(shop, 0, _find(shop, goal0, lambda i: i["r_price"] and i["r_type"] == 1
                                        and i["r_att"] == 1), {}),
        "format_errors": Trajectory(4, g[4]["instruction_text"], [no_action(), no_action(), turn("search[a]")],
                                    reward=-0.2),
        "search_loop": Trajectory(5, g[5]["instruction_text"], [turn("search[a]"), turn("search[a]")],
                                  truncated=True),
        "no_purchase_step_limit": Trajectory(6, g[6]["instruction_text"],
                                             [turn("search[a]"), turn("click[b0]"), turn("click[< prev]")],
                                             truncated=True),
    }
    for expected, trajectory in out.items():
        assert classify_failure(trajectory, g[trajectory.goal_index]) == expected, expected
    return out


def test_describe_failure_names_what_was_missed(shop, one_per_class):
    goal1 = shop.goals[1]
    text = describe_failure(one_per_class["right_product_wrong_options"], goal1, shop)
    assert goal1["goal_options"]  # options to name
    for name, value in goal1["goal_options"].items():
        assert f"{name}: {value}" in text
    over = one_per_class["over_price"]
    assert "over the $" in describe_failure(over, shop.goals[2], shop)
    assert "instead of the goal's" in describe_failure(over, shop.goals[2], shop)
    assert describe_failure(one_per_class["success"], shop.goals[0], shop) == ""
    assert "no purchase" in describe_failure(one_per_class["search_loop"], shop.goals[5], shop)
    assert "with 2 searches (1 distinct)" in describe_failure(one_per_class["search_loop"], shop.goals[5], shop)


@pytest.mark.parametrize("n, noun, expected", [(1, "search", "1 search"), (2, "search", "2 searches"),
                                               (0, "episode", "0 episodes"), (3, "box", "3 boxes"),
                                               (2, "month", "2 months")])
def test_plural(n, noun, expected):
    assert plural(n, noun) == expected


def test_category_breakdown(shop, one_per_class):
    trajectories = list(one_per_class.values())
    breakdown = category_breakdown(trajectories, shop)
    assert list(breakdown) == sorted(breakdown)
    categories = [shop.goals[t.goal_index]["category"] for t in trajectories]
    assert set(breakdown) == set(categories) and len(breakdown) >= 2  # every category, so the loop checks each
    for category, stats in breakdown.items():
        group = [t for t, c in zip(trajectories, categories) if c == category]
        assert stats["episodes"] == len(group)
        assert stats["success_rate"] == pytest.approx(sum(t.success for t in group) / len(group))
        assert stats["score"] == pytest.approx(100 * sum(t.score for t in group) / len(group))


def _read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def _table(markdown, method, split):
    """{class: (count, share)} from the section of (method, split) in failure_analysis.md."""
    section = markdown.split(f"## {method} / {split}\n", 1)[1].split("\n## ", 1)[0]
    return {m[1]: (int(m[2]), float(m[3])) for m in re.finditer(r"^\| (\w+) \| (\d+) \| ([\d.]+) % \|$", section, re.M)}


def test_write_results_writes_the_three_files(shop, one_per_class, tmp_path):
    trajectories = list(one_per_class.values())
    row = write_results(tmp_path / "results", trajectories, shop, "tiny-sft", "test", extra={"seconds": 1.5})
    out = tmp_path / "results"

    # summary.csv: base columns, extra, then success/episodes per category in sorted order
    columns, rows = _read_csv(out / "summary.csv")
    categories = sorted({shop.goals[t.goal_index]["category"] for t in trajectories})
    assert len(categories) >= 2
    assert columns == list(BASE_COLUMNS) + ["seconds"] + [
        f"{prefix}/{c}" for c in categories for prefix in ("success_rate", "episodes")]
    assert len(rows) == 1 and rows[0]["method"] == "tiny-sft" and rows[0]["split"] == "test"
    n = len(trajectories)
    turns = [t for tr in trajectories for t in tr.turns]
    assert int(rows[0]["episodes"]) == n == row["episodes"]
    assert float(rows[0]["success_rate"]) == pytest.approx(1 / n, abs=1e-6)
    assert float(rows[0]["score"]) == pytest.approx(100 * sum(t.score for t in trajectories) / n, abs=1e-5)
    assert float(rows[0]["avg_turns"]) == pytest.approx(len(turns) / n, abs=1e-6)
    assert float(rows[0]["invalid_reply_rate"]) == pytest.approx(sum(t.action is None for t in turns) / len(turns),
                                                                 abs=1e-6)
    success_category = shop.goals[0]["category"]
    in_category = [t for t in trajectories if shop.goals[t.goal_index]["category"] == success_category]
    assert float(rows[0][f"success_rate/{success_category}"]) == pytest.approx(1 / len(in_category), abs=1e-6)
    assert int(rows[0][f"episodes/{success_category}"]) == len(in_category)
    assert rows[0]["seconds"] == "1.5"

    # episodes.jsonl: one full record per episode
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == n
    for record, trajectory in zip(records, trajectories):
        goal = shop.goals[trajectory.goal_index]
        assert record["goal_index"] == trajectory.goal_index
        assert {"asin", "instruction_text", "attributes", "goal_options", "price_upper", "category",
                "query"} <= set(record["goal"])
        assert record["goal"]["goal_options"] == goal["goal_options"]
        assert len(record["turns"]) == len(trajectory.turns)
        for saved, t in zip(record["turns"], trajectory.turns):
            assert saved == {"thought": t.thought, "action": t.action, "format_error": t.format_error,
                             "reply": t.reply, "observation": t.observation, "score": t.score,
                             "valid_action": t.valid_action, "done": t.done}
        assert record["score"] == trajectory.score and record["success"] == trajectory.success
        assert record["truncated"] == trajectory.truncated and record["reward"] == trajectory.reward
        assert record["reward_info"] == trajectory.reward_info
        expected = classify_failure(trajectory, goal)
        assert record["failure_class"] == (None if expected == "success" else expected)
        if trajectory.purchased is not None:
            assert record["purchased"]["asin"] == trajectory.purchased["asin"]
            assert record["purchased"]["options"] == trajectory.purchased["options"]
            assert record["purchased"]["title"] == shop.product_by_asin[trajectory.purchased["asin"]]["Title"]
        else:
            assert record["purchased"] is None

    # failure_analysis.md: every class, once each, shares of the 7 failures, an example per class
    markdown = (out / "failure_analysis.md").read_text()
    assert "| class | count | share |" in markdown
    table = _table(markdown, "tiny-sft", "test")
    assert set(table) == set(FAILURE_CLASSES)
    for cls in FAILURE_CLASSES:
        assert table[cls] == (1, pytest.approx(100 / 7, abs=0.05))
        assert f"### {cls} (1)" in markdown
    assert markdown.count("Example: goal") == 7
    assert shop.goals[1]["instruction_text"] in markdown


def test_two_methods_share_a_results_dir(shop, one_per_class, tmp_path):
    trajectories = list(one_per_class.values())
    write_results(tmp_path, trajectories, shop, "rule", "test")
    write_results(tmp_path, trajectories[:3], shop, "a-star-po", "test", extra={"checkpoint": "last.ckpt"})
    columns, rows = _read_csv(tmp_path / "summary.csv")
    assert [(r["method"], r["episodes"]) for r in rows] == [("rule", "8"), ("a-star-po", "3")]
    assert "checkpoint" in columns and rows[0]["checkpoint"] == "" and rows[1]["checkpoint"] == "last.ckpt"
    # a category only the first method saw: an empty cell for the second
    only_rule = sorted({shop.goals[t.goal_index]["category"] for t in trajectories}
                       - {shop.goals[t.goal_index]["category"] for t in trajectories[:3]})
    assert only_rule  # so the loop below checks something
    for category in only_rule:
        assert rows[1][f"episodes/{category}"] == ""

    # the same columns: the row is added; re-running a (method, split) replaces its row and its episodes
    write_results(tmp_path, trajectories, shop, "rule", "val")
    write_results(tmp_path, trajectories[:2], shop, "rule", "test")
    columns2, rows = _read_csv(tmp_path / "summary.csv")
    assert columns2 == columns
    assert [(r["method"], r["split"], r["episodes"]) for r in rows] == [
        ("a-star-po", "test", "3"), ("rule", "val", "8"), ("rule", "test", "2")]
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    counts = {}
    for r in records:
        counts[r["method"], r["split"]] = counts.get((r["method"], r["split"]), 0) + 1
    assert counts == {("a-star-po", "test"): 3, ("rule", "val"): 8, ("rule", "test"): 2}
    markdown = (tmp_path / "failure_analysis.md").read_text()
    assert _table(markdown, "rule", "val")["search_loop"][0] == 1
    assert sum(c for c, _ in _table(markdown, "a-star-po", "test").values()) == 2  # 3 episodes, 1 success
    assert sum(c for c, _ in _table(markdown, "rule", "test").values()) == 1


def test_files_are_written_through_a_temporary_file_and_os_replace(shop, one_per_class, tmp_path, monkeypatch):
    trajectories = list(one_per_class.values())
    write_results(tmp_path, trajectories, shop, "rule", "test")
    before = {name: (tmp_path / name).read_text()
              for name in ("summary.csv", "episodes.jsonl", "failure_analysis.md", "report.html")}

    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", spy)
    write_results(tmp_path, trajectories, shop, "oracle", "test")
    assert sorted(dst.name for _, dst in replaced) == ["episodes.jsonl", "failure_analysis.md", "report.html",
                                                       "summary.csv"]
    for src, dst in replaced:
        assert src.parent == dst.parent == tmp_path and src.name.startswith(f".{dst.name}.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes.jsonl", "failure_analysis.md", "report.html",
                                                          "summary.csv"]
    assert (tmp_path / "summary.csv").stat().st_mode & 0o777 == 0o644

    # a failure half-way through leaves the previous files whole and no temporary files behind
    state = {name: (tmp_path / name).read_text() for name in before}
    calls = {"n": 0}
    real_dumps = json.dumps

    def failing_dumps(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 5:
            raise RuntimeError("disk full")
        return real_dumps(*args, **kwargs)

    monkeypatch.setattr(report.json, "dumps", failing_dumps)
    with pytest.raises(RuntimeError, match="disk full"):
        write_results(tmp_path, trajectories, shop, "random", "test")
    assert {name: (tmp_path / name).read_text() for name in state} == state
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes.jsonl", "failure_analysis.md", "report.html",
                                                          "summary.csv"]


def test_write_results_rejects_bad_input(shop, one_per_class, tmp_path):
    with pytest.raises(ValueError, match="no trajectories"):
        write_results(tmp_path, [], shop, "rule", "test")
    with pytest.raises(ValueError, match="clashes"):
        write_results(tmp_path, [one_per_class["success"]], shop, "rule", "test", extra={"score": 1})
    (tmp_path / "episodes.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="episodes.jsonl:1"):
        write_results(tmp_path, [one_per_class["success"]], shop, "rule", "test")


# ---------------------------------------------------------------------------------------------------- scripted
def test_scripted_episodes_are_trajectories_and_report(shop, tmp_path):
    env = WebShopEnv(shop, max_steps=15)
    goals = range(12)
    rule = [play_episode(env, RulePolicy(), i) for i in goals]
    oracle = [play_episode(env, OraclePolicy(), i) for i in goals]
    replay = WebShopEnv(shop, max_steps=15)
    for t in rule + oracle:
        assert [turn.action for turn in t.turns] == [turn.reply for turn in t.turns]
        assert all(turn.thought == "" and turn.format_error is None for turn in t.turns)
        assert t.turns[-1].done and not any(turn.done for turn in t.turns[:-1])
        observation = replay.reset(t.goal_index)  # the recorded pages and outcome are what the env does
        for turn in t.turns:
            assert turn.observation == observation
            observation, score, done, info = replay.step(turn.action)
            assert (score, done, info["valid"]) == (turn.score, turn.done, turn.valid_action)
        assert (t.score, t.reward, t.success, t.reward_info) == (score, score, score == 1.0, info.get("reward_info"))
        assert t.purchased == ({"asin": info["asin"], "options": info["options"]} if "asin" in info else None)
    classes = [classify_failure(t, shop.goals[t.goal_index]) for t in rule]
    assert classes.count("right_product_wrong_options") >= 8  # the rule baseline never clicks options
    assert sum(t.success for t in oracle) >= 10

    write_results(tmp_path, rule, shop, "rule", "test")
    summary = write_results(tmp_path, oracle, shop, "oracle", "test")
    assert summary["success_rate"] == pytest.approx(sum(t.success for t in oracle) / len(oracle))
    assert summary["avg_turns"] == pytest.approx(sum(len(t.turns) for t in oracle) / len(oracle))
    _, rows = _read_csv(tmp_path / "summary.csv")
    assert [r["method"] for r in rows] == ["rule", "oracle"]
    table = _table((tmp_path / "failure_analysis.md").read_text(), "rule", "test")
    assert table["right_product_wrong_options"][0] == classes.count("right_product_wrong_options")


def test_truncated_scripted_episode(shop):
    t = play_episode(WebShopEnv(shop, max_steps=2), OraclePolicy(), 0)  # search, open the target: no time to buy
    assert t.truncated and t.purchased is None and len(t.turns) == 2 and t.turns[-1].done
    assert classify_failure(t, shop.goals[0]) == "no_purchase_step_limit"
