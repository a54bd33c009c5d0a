"""The scripts of ``docs/evidence/`` run, smoke-sized, and the committed per-goal outcome files read back.

Each script behind a figure of ``docs/experiments.md`` runs here on the synthetic catalog: episodes of scripted
policies written by the package's own results writer, a V* cache file written by the package's cache, a TensorBoard
log written by ``SummaryWriter``, or two training steps from ``models/quickstart-ref``. The outcome files in
``docs/evidence/outcomes/`` are read with ``compare``'s reader, and two of them reproduce the quick start's figures.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

from apo_lightning.baselines.scripted import OraclePolicy, play_episode
from apo_lightning.eval.compare import compare_episodes, load_episodes
from apo_lightning.eval.report import write_results
from apo_lightning.rollout.trajectory import Trajectory, Turn
from apo_lightning.webshop import WebShop, WebShopEnv

REPO = Path(__file__).resolve().parents[1]
EVIDENCE = REPO / "docs" / "evidence"
OUTCOMES = EVIDENCE / "outcomes"
GOALS = list(range(40))  # test goals of the synthetic catalog
UNKNOWN_ASIN = "b000000000"  # in no catalog


def script(name: str):
    """``docs/evidence/<name>.py`` imported as a module (its ``__main__`` block not run)."""
    spec = importlib.util.spec_from_file_location(f"evidence_{name}", EVIDENCE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(name: str, argv: list[str], monkeypatch, capsys) -> str:
    """Run ``python docs/evidence/<name>.py *argv`` in this process; returns what it printed."""
    monkeypatch.setattr(sys, "argv", [name, *argv])
    capsys.readouterr()
    runpy.run_path(str(EVIDENCE / f"{name}.py"), run_name="__main__")
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def shop() -> WebShop:
    return WebShop.load(None)


@pytest.fixture(scope="module")
def training_goals_by_asin(shop) -> dict[str, list[int]]:
    by_asin = collections.defaultdict(list)
    for g in shop.split("train"):
        by_asin[shop.goals[g]["asin"]].append(g)
    return by_asin


class Recaller(OraclePolicy):
    """The oracle, except that it clicks the option values of the first training goal of the goal's product, and
    that its first product click is ``first_click`` (a product it recalls, listed or not; then the oracle's)."""

    def __init__(self, by_asin: dict[str, list[int]], shop: WebShop, first_click: dict[int, str]):
        self.by_asin, self.shop, self.first_click = by_asin, shop, first_click

    def reset(self, goal: dict) -> None:
        super().reset(goal)
        self.recalled = self.shop.goals[self.by_asin[goal["asin"]][0]]["goal_options"]
        self.pending_click = self.first_click.get(self.shop.goals.index(goal), self.target)

    def act(self, observation: str, available_actions: dict) -> str:
        clickables = available_actions["clickables"]
        if not available_actions["has_search_bar"] and "buy now" not in clickables and self.pending_click:
            click, self.pending_click = self.pending_click, None
            return f"click[{click}]"
        if "buy now" in clickables and self.pending_options is None:
            self.pending_options = [v for v in self.recalled.values() if v in clickables]
        return super().act(observation, available_actions)


@pytest.fixture(scope="module")
def results(tmp_path_factory, shop, training_goals_by_asin) -> dict[str, Path]:
    """Results directories on ``GOALS``: the oracle's ("reference") and the recaller's ("recaller"), whose first
    product click is another product of the catalog for goals 1, 5, 9, … and an unknown ASIN for goals 3, 11, …"""
    assert all(shop.goals[g]["asin"] in training_goals_by_asin for g in GOALS)
    other_product = {g: shop.goals[g + 1]["asin"].lower() for g in GOALS if g % 4 == 1}
    unknown = {g: UNKNOWN_ASIN for g in GOALS if g % 8 == 3}
    env = WebShopEnv(shop, "text", max_steps=10)
    folder = tmp_path_factory.mktemp("results")
    policies = {"reference": OraclePolicy(), "recaller": Recaller(training_goals_by_asin, shop,
                                                                 {**other_product, **unknown})}
    for name, policy in policies.items():
        write_results(folder / name, [play_episode(env, policy, g) for g in GOALS], shop, name, "test")
    return {name: folder / name for name in policies}


def episodes(results_dir: Path) -> dict[int, dict]:
    return load_episodes(results_dir)[1]


# ---------------------------------------------------------------------------------------------------------------
# scripts that read results directories
# ---------------------------------------------------------------------------------------------------------------


def test_memorized_options_counts_wrong_clicks_a_training_goal_of_the_product_asked_for(results, monkeypatch,
                                                                                      capsys):
    out = run_main("memorized_options", [str(results["reference"]), str(results["recaller"])], monkeypatch, capsys)
    reference, recaller = map(json.loads, out.splitlines())
    assert reference["right_product_wrong_options"] == 0 and reference["success"] == 1.0
    wrong_option_episodes = [e for e in episodes(results["recaller"]).values()
                             if e["failure_class"] == "right_product_wrong_options"]
    assert recaller["goals"] == len(GOALS)
    assert recaller["right_product_wrong_options"] == len(wrong_option_episodes) > 0
    assert recaller["wrong_clicks_a_training_goal_asked_for"] >= len(wrong_option_episodes)  # each recalled
    assert recaller["other_wrong_clicks"] == 0


def test_memorized_options_with_a_pool_counts_only_the_pool_goals_values(results, shop, training_goals_by_asin,
                                                                       monkeypatch, capsys):
    recalled_from = sorted({training_goals_by_asin[shop.goals[g]["asin"]][0] for g in GOALS})
    pool = ",".join(map(str, recalled_from[:5]))
    out = run_main("memorized_options", ["--pool", pool, str(results["recaller"])], monkeypatch, capsys)
    report = json.loads(out)
    pool_products = {shop.goals[g]["asin"] for g in recalled_from[:5]}
    assert report["goals"] == sum(shop.goals[g]["asin"] in pool_products for g in GOALS) > 0
    assert report["wrong_clicks_a_pool_goal_asked_for"] > 0 and report["other_wrong_clicks"] == 0


def test_seen_products_splits_success_by_product_and_counts_goals_won_and_lost(results, shop, monkeypatch,
                                                                               capsys):
    reference, recaller = str(results["reference"]), str(results["recaller"])
    out = run_main("seen_products", ["--data-dir", "synthetic", "--pool", "64", "--reference", reference, recaller,
                                     reference], monkeypatch, capsys)
    lines = out.splitlines()
    pool_products = {shop.goals[g]["asin"] for g in list(shop.split("train"))[:64]}
    assert lines[-5] == f"{len(pool_products)} products of the first 64 training goals"
    run = episodes(results["recaller"])
    groups = [[e for e in run.values() if (e["goal"]["asin"] in pool_products) == in_pool] for in_pool in (1, 0)]
    assert all(groups)
    for line, group in zip(lines[-4:-2], groups):  # the recaller against the oracle: goals lost only
        won = sum(e["success"] for e in group)
        assert line.startswith(f"{recaller}: ") and f": {won}/{len(group)} = " in line, line
        assert line.endswith(f"; against {reference}: 0 won, {len(group) - won} lost"), line
    for line, group in zip(lines[-2:], groups):  # the oracle against itself
        assert f": {len(group)}/{len(group)} = 100.0% " in line and line.endswith(": 0 won, 0 lost"), line
    out = run_main("seen_products", ["--data-dir", "synthetic", "--pool", "64", "--reference", recaller, reference],
                   monkeypatch, capsys)
    for line, group in zip(out.splitlines()[-2:], groups):  # the oracle against the recaller: goals won only
        assert line.endswith(f": {sum(not e['success'] for e in group)} won, 0 lost"), line


def test_recalled_clicks_counts_refused_product_clicks_by_catalog(results, shop, tmp_path, monkeypatch, capsys):
    own, other = tmp_path / "own", tmp_path / "other"
    for folder, products in ((own, shop.products), (other, [{"asin": UNKNOWN_ASIN.upper()}])):
        folder.mkdir()
        (folder / "items_shuffle_1000.json").write_text(json.dumps([{"asin": p["asin"]} for p in products]))
    out = run_main("recalled_clicks", ["--catalog", str(own), "--other", str(other), str(results["recaller"])],
                   monkeypatch, capsys)
    counts = json.loads(out.split(" ", 1)[1])
    assert counts["episodes"] == counts["product_clicks"] == len(GOALS)
    assert counts["refused"] == 15  # another product, not on the page (10 goals), and the unknown ASIN (5)
    assert counts["refused_own_catalog"] == 10
    assert counts["refused_other_catalog"] == 5
    assert counts["refused_no_product"] == 0
    assert counts["query_has_type"] == len(GOALS)  # the oracle's first query is the instruction


def test_runs_agreement_counts_goals_won_and_lost_by_k_runs(results, monkeypatch, capsys):
    reference, recaller = str(results["reference"]), str(results["recaller"])
    out = run_main("runs_agreement", [reference, recaller, reference], monkeypatch, capsys)
    lost = sum(not e["success"] for e in episodes(results["recaller"]).values())
    assert f"| lost | {lost} | 0 |" in out  # each lost goal lost by exactly one of the two runs
    assert f"mean gain of the 2 runs: {-50 * lost / len(GOALS):+.2f} points" in out


def test_stage1_conversion_splits_greedy_success_by_stage1_samples(results, tmp_path, monkeypatch, capsys):
    from apo_lightning.apo.vstar import CACHE_FORMAT_VERSION, VStarCache

    cache = VStarCache(tmp_path / "vstar")

    def table(reached: set[int]) -> Path:
        rewards = {str(g): [0.0, 1.0 if g in reached else 0.5, 0.0, 0.0] for g in GOALS}
        key_parts = {"goals": sorted(reached)}
        key = cache.key(key_parts)
        return cache.save(key, {"format_version": CACHE_FORMAT_VERSION, "key_parts": key_parts, "beta1": 0.5,
                                "rewards": rewards, "v_star": {g: max(r) for g, r in rewards.items()}})

    half, quarter = table({g for g in GOALS if g % 2 == 0}), table({g for g in GOALS if g % 4 == 0})
    out = run_main("stage1_conversion", ["--versus", str(quarter), str(half), str(results["recaller"])], monkeypatch,
                   capsys)
    assert out.startswith("40 goals, N = 4: pass@4 50.0% (20 goals with a successful sample, 20 with none)")
    run = episodes(results["recaller"])

    def cell(goals: list[int]) -> str:
        return f"| {sum(run[g]['success'] for g in goals)} ("

    row = out.splitlines()[-1].split(" | ")
    assert row[0] == f"| {results['recaller']}"
    for text, goals in zip(row[1:], (GOALS, GOALS[::2], GOALS[1::2], [g for g in GOALS if g % 4 == 2])):
        assert ("| " + text).startswith(cell(goals)), (text, goals)
    payload = json.loads(half.read_text())
    payload["rewards"]["999"], payload["v_star"]["999"] = [1.0] * 4, 1.0
    half.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="lacks 1 of the table's goals"):
        run_main("stage1_conversion", [str(half), str(results["recaller"])], monkeypatch, capsys)


# ---------------------------------------------------------------------------------------------------------------
# outcome files
# ---------------------------------------------------------------------------------------------------------------


def test_outcomes_keeps_what_compare_reads(results, tmp_path, monkeypatch, capsys):
    out_file = tmp_path / "recaller.jsonl"
    run_main("outcomes", [str(results["recaller"]), str(out_file)], monkeypatch, capsys)
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [set(r) for r in records] == [set(script("outcomes").KEPT_FIELDS)] * len(GOALS)
    reference = episodes(results["reference"])
    assert compare_episodes(reference, load_episodes(out_file)[1]) == compare_episodes(reference,
                                                                                     episodes(results["recaller"]))


@pytest.mark.parametrize("path", sorted(OUTCOMES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_each_committed_outcome_file_is_one_method_on_the_first_test_goals(path):
    name, outcomes = load_episodes(path)
    assert name.endswith("/test")
    assert sorted(outcomes) == list(range(len(outcomes))) and len(outcomes) in (128, 200, 500)
    assert all(set(r) == {"method", "split", "goal_index", "success", "score"} for r in outcomes.values())


def test_outcome_files_reproduce_the_quick_start_figures(monkeypatch, capsys):
    """The quick start against π_ref at run seeds 0-2: +2.5 (9 won, 4 lost), +0.0, +2.0; mean +1.5."""
    reference = load_episodes(OUTCOMES / "quickstart-ref.jsonl")[1]
    seed_0 = compare_episodes(reference, load_episodes(OUTCOMES / "quickstart.jsonl")[1])
    assert (round(seed_0["success_diff"], 3), seed_0["won"], seed_0["lost"]) == (0.025, 9, 4)
    runs = [str(OUTCOMES / f"quickstart{s}.jsonl") for s in ("", "_s1", "_s2")]
    out = run_main("runs_agreement", [str(OUTCOMES / "quickstart-ref.jsonl"), *runs], monkeypatch, capsys)
    assert "mean gain of the 3 runs: +1.50 points" in out


@pytest.mark.parametrize("path", sorted(EVIDENCE.glob("*.json")), ids=lambda p: p.stem)
def test_each_committed_benchmark_record_is_a_json_object(path):
    assert isinstance(json.loads(path.read_text()), dict)


# ---------------------------------------------------------------------------------------------------------------
# scripts that read the catalog, a TensorBoard log or a checkpoint
# ---------------------------------------------------------------------------------------------------------------


def test_grouped_pool_reproduces_the_committed_pool(monkeypatch, capsys):
    out = run_main("grouped_pool", ["16", "4", "0"], monkeypatch, capsys)
    assert out == (EVIDENCE / "pool16x4.txt").read_text()


def test_run_summary_reports_stage1_validation_and_sixths(tmp_path, monkeypatch, capsys):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "run" / "version_0"))
    writer.add_scalar("stage1/pass_at_1", 0.25, 0)
    for step in (6, 12):
        writer.add_scalar("val/success_rate", step / 100, step)
    for step in range(12):
        writer.add_scalar("train/kl", step + 1.0, step)
    writer.close()
    out = run_main("run_summary", ["--above", "10", str(tmp_path / "run")], monkeypatch, capsys)
    assert out.splitlines() == [
        "stage1/pass_at_1: 0.2500",
        "val/success_rate: 0.06 @6, 0.12 @12",
        "train/kl: 12 steps, first sixth 1.5 -> last sixth 11.5 (median 11.5, max 12); 2 steps above 10",
    ]
    with pytest.raises(SystemExit, match="no TensorBoard event files"):
        run_main("run_summary", [str(tmp_path / "empty")], monkeypatch, capsys)


def test_current_weights_writes_the_checkpoint_of_the_current_weights(tmp_path, monkeypatch, capsys):
    average, current = {"w": torch.zeros(2), "b": torch.ones(1)}, {"w": torch.ones(2), "b": torch.ones(1)}
    torch.save({"state_dict": average, "current_model_state": current, "averaging_state": {"n": 3},
                "global_step": 7}, tmp_path / "last.ckpt")
    out = run_main("current_weights", [str(tmp_path / "last.ckpt"), str(tmp_path / "current.ckpt")], monkeypatch,
                   capsys)
    written = torch.load(tmp_path / "current.ckpt", weights_only=False)
    assert set(written) == {"state_dict", "global_step"}
    assert all(torch.equal(written["state_dict"][k], v) for k, v in current.items())
    assert "step 7, current weights; 1 of 2 tensors differ from the average" in out
    torch.save({"state_dict": average, "global_step": 7}, tmp_path / "plain.ckpt")
    with pytest.raises(SystemExit, match="has no current_model_state"):
        run_main("current_weights", [str(tmp_path / "plain.ckpt"), str(tmp_path / "x.ckpt")], monkeypatch, capsys)


# ---------------------------------------------------------------------------------------------------------------
# scripts that train (two steps from the quick start's reference, one process)
# ---------------------------------------------------------------------------------------------------------------

SMALL = ["--data.vstar.num_samples=2", "--data.batch_size=2"]


def run_training_script(name: str, argv: list[str], tmp_path, monkeypatch, capsys) -> list[str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GOALS", "1500,1518")
    monkeypatch.setenv("STEPS", "2")
    monkeypatch.setattr(sys, "argv", [name, *argv])
    capsys.readouterr()
    runpy.run_path(str(EVIDENCE / f"{name}.py"), run_name="__main__")
    return capsys.readouterr().out.splitlines()


def test_fixed_goals_run_reports_sampled_success_per_step(tmp_path, monkeypatch, capsys):
    report = json.loads(run_training_script("fixed_goals_run", SMALL, tmp_path, monkeypatch, capsys)[-1])
    assert report["goals"] == [1500, 1518] and report["args"] == SMALL
    assert len(report["per_step"]) == 2 and set(report["last8_by_goal"]) == {"1500", "1518"}
    assert all(0.0 <= x <= 1.0 for x in report["per_step"]) and report["kl_end"] is not None


def test_sanity_failures_classifies_the_late_trajectories(tmp_path, monkeypatch, capsys):
    lines = run_training_script("sanity_failures", SMALL, tmp_path, monkeypatch, capsys)
    report = json.loads(lines[-1])
    assert report["goals"] == [1500, 1518] and report["late_trajectories"] == 4  # 2 steps × 2 trajectories
    classes = {"no purchase: no parseable product click", "no purchase: clicked the goal's ASIN",
               "no purchase: clicked something else (a misspelled ASIN, an option, buy now)",
               "bought: a wrong option value", "bought: an option skipped"}
    assert set(report["failures"]) <= classes and 0 <= report["late_successes"] <= 4


def test_sanity_failures_classes(shop):
    failure = runpy.run_path(str(EVIDENCE / "sanity_failures.py"))["failure"]
    goal = shop.goals[1500]
    asin, (option, value) = goal["asin"], next(iter(goal["goal_options"].items()))

    def trajectory(actions: list[str | None], purchased: dict | None) -> Trajectory:
        t = Trajectory(1500, goal["instruction_text"])
        t.turns = [Turn(observation="", reply="", thought="", action=a, format_error=None, num_actions=1, score=0.0,
                        done=False, valid_action=True, generated_tokens=0, stop="answer") for a in actions]
        t.purchased = purchased
        return t

    search = "search[x]"
    assert failure(trajectory([search, f"click[{asin.lower()}]"], None), goal) == "no purchase: clicked the goal's ASIN"
    assert failure(trajectory([search, "click[B0MISSPELT]"], None), goal).startswith("no purchase: clicked something")
    assert failure(trajectory([search, None], None), goal) == "no purchase: no parseable product click"
    bought = {"asin": asin, "options": {option: value + " wrong"}}
    assert failure(trajectory([search], bought), goal) == "bought: a wrong option value"
    assert failure(trajectory([search], {"asin": asin, "options": {}}), goal) == "bought: an option skipped"
