"""Instructions in other words (``webshop.wording``): seeded, two families with no template in common, every fact of
the goal said, the reward untouched; the wording setting reaches the env, the caches' keys and both command lines."""

import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from apo_lightning.baselines.scripted import OraclePolicy, play_episode
from apo_lightning.eval.__main__ import main as eval_main
from apo_lightning.lit.demos import demonstration_cache
from apo_lightning.lit.stage1 import Stage1, VStarConfig
from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.rollout.settings import RolloutSettings
from apo_lightning.webshop import WebShop, WebShopEnv
from apo_lightning.webshop.goals import NO_PRICE_UPPER
from apo_lightning.webshop.settings import EnvConfig, RewardSettings
from apo_lightning.webshop.wording import (
    FAMILIES,
    HELDOUT,
    OPTION_KINDS,
    TRAIN,
    WORDINGS,
    attribute_roles,
    price_figures,
    reword,
    reword_goals,
    reworded_instruction,
    reworded_shop,
)

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "configs" / "smoke.yaml")
#: the goal fields the reward reads, and the goal's product: none may change with the wording
FIELDS = ("asin", "query", "name", "product_category", "category", "attributes", "goal_options", "price_upper")


@pytest.fixture(scope="module")
def synthetic() -> WebShop:
    return WebShop.load(None)


@pytest.fixture(scope="module")
def real(real_data_dir) -> WebShop:
    return WebShop.load(real_data_dir)


def has_phrase(text: str, phrase: str) -> bool:
    """``phrase`` occurs in ``text`` as whole words."""
    return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text) is not None


def missing_facts(goal: dict, text: str) -> list[str]:
    """What of the goal's query, attributes, option values and price limit ``text`` does not say."""
    options = goal["goal_options"]
    facts = [goal["query"], *goal["attributes"], *(options.values() if isinstance(options, dict) else options)]
    missing = [f for f in facts if not has_phrase(text, f)]
    if goal["price_upper"] < NO_PRICE_UPPER and not has_phrase(text, price_figures(goal["price_upper"])[0]):
        missing.append(f"price {goal['price_upper']}")
    return missing


# ------------------------------------------------------------------------------------------------ the module
def test_the_same_seed_and_goal_give_the_same_text_and_another_seed_another(synthetic):
    goals = synthetic.goals[:200]
    for family in FAMILIES:
        first, again, other = (reword_goals(goals, family, seed) for seed in (0, 0, 1))
        assert [g["instruction_text"] for g in first] == [g["instruction_text"] for g in again]
        assert sum(a["instruction_text"] != b["instruction_text"] for a, b in zip(first, other)) > 180
        assert first[7]["instruction_text"] == reworded_instruction(goals[7], family, 0, 7)


def test_the_text_is_the_same_in_another_process():
    goal = {"query": "decorative pillows", "attributes": ["double sided", "machine washable"],
            "goal_options": {"size": "28\" x 28\""}, "price_upper": 50.0,
            "instruction_text": "Find me double sided, machine washable decorative pillows"}
    code = ("import json, sys; from apo_lightning.webshop.wording import reworded_instruction; "
            "print(json.dumps(reworded_instruction(json.loads(sys.argv[1]), 'heldout', 3, 11)))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(goal)], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=REPO)
    assert json.loads(out.stdout) == reworded_instruction(goal, "heldout", 3, 11)


def test_the_choices_vary_sentences_order_options_and_price(synthetic):
    goal = next(g for g in synthetic.goals if len(g["attributes"]) >= 3 and len(g["goal_options"]) >= 2)
    p, p2 = price_figures(goal["price_upper"])
    for family in FAMILIES:
        texts = [reworded_instruction(goal, family, seed, 0) for seed in range(40)]
        assert len({t.split()[0].lower() for t in texts}) >= 5  # openers
        assert len({tuple(sorted(goal["attributes"], key=t.find)) for t in texts}) >= 3  # attribute order
        assert len({tuple(sorted(goal["goal_options"].values(), key=t.find)) for t in texts}) >= 2  # option order
        breaks = {len(re.findall(r"[.?] ", t)) for t in texts}  # sentence breaks: one sentence or several
        assert min(breaks) <= 1 and max(breaks) >= 3
        assert any(t == t.lower() for t in texts) and any(t != t.lower() for t in texts)  # as people type, or not
        fam = FAMILIES[family]
        said = {tpl for tpl in fam.price_clauses + fam.price_sentences + fam.price_leads for t in texts
                if tpl.format(p=p, p2=p2).lower().rstrip("., ") in t.lower()}
        assert len(said) >= 6  # how the limit is put


def test_the_training_and_held_out_families_share_no_template():
    assert not TRAIN.templates() & HELDOUT.templates()
    for family in (TRAIN, HELDOUT):
        assert set(family.option_clauses) == set(family.option_sentences) == set(OPTION_KINDS)
        for template in family.templates():  # every slot is one the rewording fills
            template.format(item="", x="", v="", n="", p="", p2="", it="", It="", them="", s="", has="", **{"is": ""})
            assert not template.lower().startswith("find me") and "price lower than" not in template.lower()


def test_each_text_opens_with_its_own_familys_opener(synthetic):
    marks = {name: [o.split("{")[0].strip().lower() for o in family.openers] for name, family in FAMILIES.items()}
    for i, goal in enumerate(synthetic.goals[:300]):
        for name, other in (("train", "heldout"), ("heldout", "train")):
            first = re.split(r"[.?] ", reworded_instruction(goal, name, 0, i).lower())[0]

            def opens(mark, first=first):  # at the start, or after a leading price phrase
                return first.startswith(mark) or f", {mark}" in first

            assert any(opens(m) for m in marks[name]) and not any(opens(m) for m in marks[other]), (name, first)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_fact_of_every_synthetic_catalog_goal_is_said(synthetic, family):
    for i, goal in enumerate(reword_goals(synthetic.goals, family, seed=0)):
        assert not missing_facts(goal, goal["instruction_text"]), (i, goal["instruction_text"])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_fact_of_every_real_goal_is_said(real, real_data_dir, family):
    human = WebShop.load(real_data_dir, goals="human")
    for goals in (real.goals, human.goals):
        for i, goal in enumerate(reword_goals(goals, family, seed=0)):
            assert not missing_facts(goal, goal["instruction_text"]), (i, goal["instruction_text"])


def test_attribute_places_are_read_from_the_generators_instruction(real):
    goal = real.goals[0]  # "Find me double sided, machine washable decorative pillows with printing technology ..."
    assert attribute_roles(goal) == {"double sided": "pre", "machine washable": "pre", "printing technology": "with"}
    assert set(attribute_roles({**goal, "instruction_text": "something else"}).values()) == {"any"}
    reworded = reword_goals([goal], "heldout")[0]
    # a reworded goal keeps the generator's text, so it can be reworded again (training draws new words each time)
    assert attribute_roles({**reworded, "instruction_text": "other words"}) == attribute_roles(goal)


def test_a_reworded_goal_is_the_same_goal_in_other_words(real):
    for family in FAMILIES:
        for goal, new in zip(real.goals[:500], reword_goals(real.goals[:500], family)):
            assert {k: new[k] for k in FIELDS} == {k: goal[k] for k in FIELDS}
            assert new["original_instruction_text"] == goal["instruction_text"] != new["instruction_text"]
    assert reword_goals(real.goals[:3], "original") == real.goals[:3]
    with pytest.raises(ValueError, match="wording must be one of original, train, heldout, got 'heldot'"):
        reword_goals(real.goals[:3], "heldot")
    with pytest.raises(ValueError, match="family must be one of train, heldout, got 'original'"):
        reword(real.goals[0], "original", None)


def test_the_same_actions_score_the_same_under_every_wording(real):
    """The reward reads the goal's fields, not its words: the oracle's actions, replayed word for word on the
    reworded goals, buy the same products with the same options for the same scores."""
    shops = {w: reworded_shop(real, w, seed=0) for w in WORDINGS}
    goals = list(range(40))
    original = [play_episode(WebShopEnv(real), OraclePolicy(), g) for g in goals]
    assert sum(t.success for t in original) >= 30 and any(0 < t.score < 1 for t in original)
    for wording, shop in shops.items():
        env = WebShopEnv(shop)
        for g, trajectory in zip(goals, original):
            observation = env.reset(g)
            assert env.instruction_text == shop.goals[g]["instruction_text"] and env.instruction_text in observation
            for turn in trajectory.turns:
                observation, score, done, info = env.step(turn.action)
            outcome = (score, done, info.get("reward_info"))
            assert outcome == (trajectory.score, True, trajectory.reward_info), (wording, g)


# ------------------------------------------------------------------------------------------------ the setting
def test_env_config_wording_reaches_the_env_and_leaves_the_catalog_alone():
    original = EnvConfig(data_dir="synthetic").shop()
    before = [g["instruction_text"] for g in original.goals]
    heldout = EnvConfig(data_dir="synthetic", wording="heldout", wording_seed=2)
    shop = heldout.shop()
    assert shop is heldout.shop() and shop.search_engine is original.search_engine  # cached; the catalog shared
    assert shop.goals[5]["instruction_text"] == reworded_instruction(original.goals[5], "heldout", 2, 5)
    env = heldout.envs(1)[0]
    text = shop.goals[5]["instruction_text"]
    assert text in env.reset(5) and env.instruction_text == text
    assert [g["instruction_text"] for g in original.goals] == before  # the original goals are not touched
    assert EnvConfig(data_dir="synthetic", wording="train").shop().goals[5]["instruction_text"] not in (
        before[5], shop.goals[5]["instruction_text"])
    with pytest.raises(ValueError, match="wording must be one of original, train, heldout, got 'heldot'"):
        EnvConfig(data_dir="synthetic", wording="heldot").shop()


def test_the_wording_is_part_of_the_cache_keys(tmp_path):
    plain = EnvConfig(data_dir="synthetic")
    assert plain.key_parts() == asdict(plain)  # every setting
    configs = [plain, EnvConfig(data_dir="synthetic", wording="heldout"),
               EnvConfig(data_dir="synthetic", wording="heldout", wording_seed=1),
               EnvConfig(data_dir="synthetic", wording="train")]
    stage1 = [Stage1(VStarConfig(), env, ChatFormat(), RewardSettings(), RolloutSettings(), seed=0)
              .key_parts("ref", [1500]) for env in configs]
    assert all(s["env"] == env.key_parts() for s, env in zip(stage1, configs))
    assert len({json.dumps(s, sort_keys=True) for s in stage1}) == len(configs)
    demos = {demonstration_cache(tmp_path, env, ChatFormat(), str(REPO / "models" / "quickstart-ref"),
                                 {"train": [1500]}, max_new_tokens=64) for env in configs}
    assert len(demos) == len(configs)


# ------------------------------------------------------------------------------------------------ command lines
def test_evaluate_takes_the_wording_and_compare_pairs_the_two_results(tmp_path, capsys):
    common = ["evaluate", "--model", "oracle", "--data-dir", "synthetic", "--limit", "6"]
    eval_main(common + ["--results-dir", str(tmp_path / "original")])
    metrics = eval_main(common + ["--wording", "heldout", "--results-dir", str(tmp_path / "heldout")])
    assert metrics["wording"] == "heldout"
    records = [json.loads(line) for line in (tmp_path / "heldout" / "episodes.jsonl").read_text().splitlines()]
    assert records[0]["method"] == "oracle (heldout wording)"
    assert records[0]["instruction"] == records[0]["goal"]["instruction_text"] != records[0]["goal"][
        "original_instruction_text"]
    capsys.readouterr()
    result = eval_main(["compare", str(tmp_path / "original"), str(tmp_path / "heldout")])
    assert result["goals"] == 6
    assert "the instructions differ on 6 of the 6 goals" in capsys.readouterr().out


def test_a_mistyped_wording_is_one_line_naming_the_option_the_value_and_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_info:
        eval_main(["evaluate", "--model", "rule", "--wording", "heldot"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--wording" in error and "'heldot'" in error and "'original', 'train', 'heldout'" in error


def test_cli_takes_the_wording_setting_and_refuses_a_typo(capfd):
    from apo_lightning.lit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--config", SMOKE, "--data.env.wording", "heldout", "--data.env.wording_seed", "3",
              "--print_config"])
    printed = capfd.readouterr().out
    assert exit_info.value.code == 0 and "wording: heldout" in printed and "wording_seed: 3" in printed
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--config", SMOKE, "--data.env.wording", "heldot"])
    out, err = capfd.readouterr()
    errors = [line for line in (out + err).splitlines() if line.startswith("error:")]
    assert exit_info.value.code == 2
    assert errors == ["error: data.env.wording: expected one of 'original', 'train', 'heldout', got heldot"]
