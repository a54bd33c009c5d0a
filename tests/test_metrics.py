"""The metrics module (one name per quantity, intervals, pass@k) and the paired comparison, checked by hand."""

import json

import pytest

from apo_lightning.eval.__main__ import main
from apo_lightning.eval.compare import compare_episodes, format_comparison, load_episodes
from apo_lightning.eval.metrics import (
    bootstrap_interval,
    pass_at_k,
    sample_statistics,
    trajectory_metrics,
    wilson_interval,
)
from apo_lightning.rollout.trajectory import Trajectory, Turn


def turn(action, valid=True):
    return Turn("page", "reply", "", action, None if action else "no_answer_tag", 1 if action else 0, 0.0, False,
                valid, 5, "answer")


def test_trajectory_metrics_by_hand():
    a = Trajectory(0, "i", turns=[turn("search[x]"), turn(None), turn("click[y]", valid=False)], score=1.0,
                   reward=0.9, success=True)
    b = Trajectory(1, "i", turns=[turn("search[x]")], score=0.5, reward=0.5)
    m = trajectory_metrics([a, b])
    assert m["success_rate"] == 0.5 and m["score"] == pytest.approx(75.0) and m["reward"] == pytest.approx(0.7)
    assert m["avg_turns"] == 2.0                      # 4 turns / 2 episodes
    assert m["invalid_reply_rate"] == 0.25            # 1 reply without an action of 4
    assert m["invalid_action_rate"] == pytest.approx(1 / 3)  # 1 refused of 3 parsed actions
    assert m["episodes"] == 2


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)   # 1 − C(3,2)/C(4,2) = 1 − 3/6
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25)  # k = 1: the success rate c/n
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_sample_statistics_by_hand():
    s = sample_statistics({"a": [0.0, 0.0], "b": [0.0, 1.0], "c": [-0.1, 0.0], "d": [0.5, 0.5]})
    assert s["goals"] == 4 and s["samples_per_goal"] == 2
    assert s["reward_mean"] == pytest.approx(1.9 / 8)
    assert s["full_reward_rate"] == 1 / 8              # one sample of eight reached 1.0 ...
    assert s["pass_at_1"] == pytest.approx(0.125)      # ... so pass@1 = (0 + 1/2 + 0 + 0) / 4
    assert s["pass_at_2"] == 0.25                      # ... on one goal of four
    assert s["all_equal_rate"] == 0.5                  # "a" and "d"
    assert s["all_zero_rate"] == 0.5                   # "a" and "c" (no sample above 0)
    assert s["all_full_rate"] == 0.0
    with pytest.raises(ValueError, match="same N"):
        sample_statistics({"a": [0.0], "b": [0.0, 1.0]})


def test_wilson_interval_by_hand():
    low, high = wilson_interval(5, 10)
    # centre (p + z²/2n) / (1 + z²/n) = 0.5; half-width z/(1 + z²/n)·sqrt(p(1−p)/n + z²/4n²) = 0.26338
    assert low == pytest.approx(0.5 - 0.26338, abs=1e-4) and high == pytest.approx(0.5 + 0.26338, abs=1e-4)
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(20, 20)[1] == 1.0


def test_bootstrap_interval_is_paired_and_seeded():
    a, b = [0.0] * 50 + [1.0] * 50, [1.0] * 50 + [1.0] * 50   # B wins on 50 goals, never loses
    low, high = bootstrap_interval(lambda x, y: y.mean() - x.mean(), a, b)
    assert 0.35 < low < 0.5 < high < 0.65
    assert bootstrap_interval(lambda x, y: y.mean() - x.mean(), a, b) == (low, high)
    same = bootstrap_interval(lambda x, y: y.mean() - x.mean(), a, a)
    assert same == (0.0, 0.0)  # paired rows: identical columns never differ


def write_episodes(path, method, outcomes):
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "episodes.jsonl", "w") as f:
        for goal, (success, score) in outcomes.items():
            f.write(json.dumps({"method": method, "split": "test", "goal_index": goal, "success": success,
                                "score": score}) + "\n")


def test_compare_counts_wins_losses_and_mcnemar_by_hand(tmp_path):
    # 10 goals: both succeed on 3, A alone on 1, B alone on 4, neither on 2
    a = {g: (g < 4, 1.0 if g < 4 else 0.5) for g in range(10)}
    b = {g: (g < 3 or 4 <= g < 8, 1.0 if (g < 3 or 4 <= g < 8) else 0.25) for g in range(10)}
    write_episodes(tmp_path / "a", "ref", a)
    write_episodes(tmp_path / "b", "apo", b)
    name_a, ea = load_episodes(tmp_path / "a")
    name_b, eb = load_episodes(tmp_path / "b")
    c = compare_episodes(ea, eb)
    assert (name_a, name_b) == ("ref/test", "apo/test")
    assert c["success_a"] == 0.4 and c["success_b"] == 0.7 and c["success_diff"] == pytest.approx(0.3)
    assert (c["won"], c["lost"]) == (4, 1)
    assert c["mcnemar_p"] == pytest.approx(0.375)      # two-sided binomial: 2·P(X ≤ 1 | 5, ½) = 2·6/32
    # scores: A = 4·1 + 6·0.5 = 7 → 70.0; B = 7·1 + 3·0.25 = 7.75 → 77.5
    assert c["score_a"] == pytest.approx(70.0) and c["score_b"] == pytest.approx(77.5)
    assert c["score_higher"] == 4 and c["score_lower"] == 3  # B higher on goals 4-7, lower on 3, 8, 9
    assert c["success_diff_low"] < c["success_diff"] < c["success_diff_high"]
    assert "McNemar p = 0.375" in format_comparison(name_a, name_b, c)


def test_compare_refuses_different_goals(tmp_path):
    write_episodes(tmp_path / "a", "ref", {0: (True, 1.0), 1: (False, 0.0)})
    write_episodes(tmp_path / "b", "apo", {0: (True, 1.0), 2: (False, 0.0)})
    with pytest.raises(ValueError, match="different goals"):
        compare_episodes(load_episodes(tmp_path / "a")[1], load_episodes(tmp_path / "b")[1])
    with pytest.raises(FileNotFoundError, match="episodes.jsonl"):
        load_episodes(tmp_path / "missing")


def test_compare_common_goals_pairs_only_the_shared_goals(tmp_path):
    # A covers goals 0-3, B goals 0-5; on the shared 0-3, B wins goal 1 and loses goal 2
    write_episodes(tmp_path / "a", "ref", {0: (True, 1.0), 1: (False, 0.0), 2: (True, 1.0), 3: (False, 0.5)})
    write_episodes(tmp_path / "b", "apo", {0: (True, 1.0), 1: (True, 1.0), 2: (False, 0.0), 3: (False, 0.5),
                                           4: (True, 1.0), 5: (True, 1.0)})
    c = main(["compare", "--common-goals", str(tmp_path / "a"), str(tmp_path / "b")])
    assert c["goals"] == 4 and (c["won"], c["lost"]) == (1, 1)
    assert c["success_a"] == 0.5 and c["success_b"] == 0.5      # goals 4 and 5 would make B 4/6
    with pytest.raises(ValueError, match="different goals"):
        main(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    write_episodes(tmp_path / "c", "apo", {7: (True, 1.0)})
    with pytest.raises(ValueError, match="share no goal"):
        main(["compare", "--common-goals", str(tmp_path / "a"), str(tmp_path / "c")])
