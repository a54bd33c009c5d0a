"""The gymnasium env (``apo_lightning/WebShop-v0``): gymnasium's checker, the same episodes as ``WebShopEnv``, the
golden fixtures through the five-tuple, truncation, invalid actions, ``make`` by id, the ``Text`` spaces and the
vector envs."""

import json
import string
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from apo_lightning.baselines.scripted import OraclePolicy, RandomPolicy, RulePolicy, scripted_steps
from apo_lightning.webshop import ENV_ID, WebShopEnv, WebShopGymEnv


def make(**kwargs) -> gymnasium.Env:
    kwargs.setdefault("data_dir", "synthetic")  # generated under data/synthetic/seed0 on first use
    return gymnasium.make(ENV_ID, **kwargs)


def gym_episode(env: gymnasium.Env, policy, goal_index: int) -> list[tuple]:
    """``(action, observation, reward, terminated, truncated, info)`` per step of ``policy`` through gymnasium,
    the reset first (action None)."""
    observation, info = env.reset(options={"goal_index": goal_index})
    policy.reset(env.unwrapped.shop.goals[goal_index])
    steps = [(None, observation, 0.0, False, False, info)]
    while not (steps[-1][3] or steps[-1][4]):
        action = policy.act(observation, info["available_actions"])
        observation, reward, terminated, truncated, info = env.step(action)
        steps.append((action, observation, reward, terminated, truncated, info))
    return steps


@pytest.mark.parametrize("mode", ["text", "text_rich"])
def test_gymnasium_env_checker_passes_without_a_warning(mode):
    env = make(split="test", observation_mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium reports most findings as warnings
        check_env(env.unwrapped)


@pytest.mark.parametrize("mode", ["text", "text_rich"])
def test_scripted_policies_through_gymnasium_play_the_same_episodes_as_the_engine(mode):
    """The oracle, the rule baseline and a random policy, step by step: the same actions, pages, rewards, validity
    and available actions, and at the end the same score, purchase or truncation."""
    env = make(split="test", observation_mode=mode)
    engine = WebShopEnv(env.unwrapped.shop, mode, max_steps=15)
    ends = set()
    for goal_index in range(0, 30):
        for policy in (OraclePolicy, RulePolicy, lambda: RandomPolicy(seed=goal_index)):
            gym_steps = gym_episode(env, policy(), goal_index)
            engine_steps = list(scripted_steps(engine, policy(), goal_index))
            assert [s[0] for s in gym_steps[1:]] == [s.action for s in engine_steps]
            assert [s[1] for s in gym_steps[:-1]] == [s.observation for s in engine_steps]
            assert gym_steps[-1][1] == engine.observation
            assert [s[2] for s in gym_steps[1:]] == [s.score for s in engine_steps]  # the reward of every step
            assert [s[5]["valid"] for s in gym_steps[1:]] == [s.info["valid"] for s in engine_steps]
            assert [s[5]["available_actions"] for s in gym_steps[:-1]] == [s.available_actions for s in engine_steps]
            assert all(s[5]["instruction"] == engine.instruction_text and s[5]["goal_index"] == goal_index
                       for s in gym_steps)
            *_, reward, terminated, truncated, info = gym_steps[-1]
            assert info["score"] == engine.reward and info["won"] == (engine.reward == 1.0)
            assert info.get("reward_info") == engine_steps[-1].info.get("reward_info")
            assert terminated == ("reward_info" in engine_steps[-1].info)
            assert truncated == engine_steps[-1].info["truncated"]
            ends.add("truncated" if truncated else "won" if info["won"] else "bought")
    assert ends == {"won", "bought", "truncated"}  # every way an episode ends was compared


@pytest.mark.parametrize("goals", ["synthetic", "human"])
@pytest.mark.parametrize("mode", ["text", "text_rich"])
def test_the_golden_episodes_through_gymnasium(goals, mode, real_data_dir, golden_dir):
    """Every step of the episodes recorded with the original WebShop code, replayed through ``gymnasium.make``."""
    env = gymnasium.make(ENV_ID, data_dir=real_data_dir, goals=goals, split=None, observation_mode=mode,
                         max_steps=None)
    key = "observation" if mode == "text" else "observation_text_rich"
    steps = 0
    with open(golden_dir / f"episodes_{goals}_seed233.jsonl", encoding="utf-8") as f:
        episodes = [json.loads(line) for line in f if line.strip()]
    for episode in episodes:
        for n, step in enumerate(episode["steps"]):
            where = f"goal {episode['goal_index']} step {n} action {step['action']!r}"
            if step["action"] is None:
                (obs, info), reward, terminated = env.reset(options={"goal_index": episode["goal_index"]}), 0.0, False
            else:
                obs, reward, terminated, truncated, info = env.step(step["action"])
                assert truncated is False, where
            assert obs == step[key] and obs in env.observation_space, where
            assert info["available_actions"] == step["available_actions"], where
            assert reward == step["reward"] and terminated == step["done"], where
            assert info.get("reward_info") == step.get("verbose_info"), where
            steps += 1
    assert steps == (232 if goals == "synthetic" else 67)


def test_the_step_limit_truncates_and_a_purchase_terminates():
    env = make(split="test", max_steps=3)
    env.reset(options={"goal_index": 0})
    results = [env.step("click[nothing]") for _ in range(3)]
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (False, True)]  # truncated at 3
    assert results[-1][1] == 0.0 and results[-1][4]["score"] == 0.0 and results[-1][4]["won"] is False
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("search[anything]")

    oracle = gym_episode(make(split="test", max_steps=15), OraclePolicy(), 0)
    assert oracle[-1][3] is True and oracle[-1][4] is False  # the oracle buys at step n
    at_the_limit = gym_episode(make(split="test", max_steps=len(oracle) - 1), OraclePolicy(), 0)
    assert at_the_limit[-1][3:5] == (True, False)  # a purchase on the last allowed step is a termination
    assert at_the_limit[-1][2] == oracle[-1][2] > 0


def test_an_invalid_action_is_reported_and_changes_nothing():
    env = make(split="test")
    observation, _ = env.reset(options={"goal_index": 1})
    for action in ("click[no such button]", "search[]", "jump[now]", "click[search]"):
        after, reward, terminated, truncated, info = env.step(action)
        assert info["valid"] is False and after == observation and reward == 0.0, action
        assert not terminated and not truncated
    after, _, _, _, info = env.step("search[shoes]")
    assert info["valid"] is True and after != observation and info["num_steps"] == 5


def test_make_by_id_passes_the_settings_and_reset_draws_goals_of_the_split():
    env = make(split="val", observation_mode="text_rich", max_steps=7, show_attrs=True)
    inner = env.unwrapped
    assert isinstance(inner, WebShopGymEnv) and env.spec.id == ENV_ID
    assert inner.engine.observation_mode == "text_rich" and inner.engine.max_steps == 7 and inner.engine.show_attrs
    assert inner.goal_indices == range(500, 1500)
    drawn = [env.reset(seed=seed)[1]["goal_index"] for seed in range(20)]
    assert all(500 <= g < 1500 for g in drawn) and len(set(drawn)) > 10
    assert drawn[:3] == [env.reset(seed=seed)[1]["goal_index"] for seed in range(3)]  # a seed fixes the goal
    assert env.reset(options={"goal_index": 777})[1]["goal_index"] == 777
    with pytest.raises(ValueError, match=r"goal_index'\] must be in split 'val' \[500, 1500\), got 3"):
        env.reset(options={"goal_index": 3})
    with pytest.raises(ValueError, match="may only hold 'goal_index'"):
        env.reset(options={"goal": 3})
    with pytest.raises(ValueError, match="split must be one of"):
        make(split="dev")
    assert make(split=None).unwrapped.goal_indices == range(len(inner.shop.goals))
    # the "module:id" form imports the package itself
    assert gymnasium.make(f"apo_lightning.webshop:{ENV_ID}", data_dir="synthetic").unwrapped.split == "train"


SUB_PAGES = ("description", "features", "reviews", "attributes")
NAV = {"back to search", "< prev", "next >", "buy now", *SUB_PAGES}


class Crawler:
    """A policy that visits every kind of page: it opens each product of each results page in turn, clicks each of
    its options and sub-pages, pages on when a results page is done, and buys after ``budget`` actions."""

    def __init__(self, budget: int):
        self.budget = budget

    def reset(self, goal: dict) -> None:
        self.instruction, self.actions, self.opened, self.item_todo = goal["instruction_text"], 0, set(), []

    def act(self, observation: str, available: dict) -> str:
        self.actions += 1
        clickables = available["clickables"]
        if available["has_search_bar"]:
            return f"search[{self.instruction}]"
        if "buy now" in clickables:  # an item page
            if self.actions >= self.budget:
                return "click[buy now]"
            if self.item_todo is None:  # just opened: each option, each sub-page (it returns with '< prev'), back
                self.item_todo = ([c for c in clickables if c not in NAV] + [c for c in SUB_PAGES if c in clickables]
                                  + ["< prev"])
            return f"click[{self.item_todo.pop(0)}]"
        if "next >" in clickables:  # a results page
            fresh = [c for c in clickables if c not in NAV and c not in self.opened]
            if not fresh:
                return "click[next >]"
            self.opened.add(fresh[0])
            self.item_todo = None
            return f"click[{fresh[0]}]"
        return "click[< prev]"  # a sub-page


@pytest.mark.parametrize("mode", ["text", "text_rich"])
def test_every_page_and_action_lies_in_the_text_spaces(mode, real_data_dir):
    """Random, oracle and crawling episodes on the synthetic and the real catalog: every observation is in the
    observation space and every scripted action in the action space."""
    for data_dir in ("synthetic", real_data_dir):
        env = make(data_dir=data_dir, split="test", observation_mode=mode, max_steps=60, show_attrs=True)
        longest = 0
        for goal_index in range(0, 500, 5):
            for policy in (RandomPolicy(seed=goal_index), OraclePolicy(), Crawler(budget=55)):
                for action, observation, *_ in gym_episode(env, policy, goal_index):
                    assert observation in env.observation_space, (goal_index, action, observation)
                    assert action is None or action in env.action_space, action
                    longest = max(longest, len(observation))
        assert longest <= env.observation_space.max_length < 4 * longest  # a bound, and not a loose one
        charset = env.action_space.character_set
        assert charset == env.observation_space.character_set and set(string.printable) <= charset  # typed ASCII
        assert {c.lower() for c in charset} <= charset  # clicks are lower-cased


def test_a_stored_catalog_keeps_its_space_bound_in_the_store(tmp_path):
    """A catalog stored on disk computes the spaces' bound once and writes it to its seed folder; a later process
    (here: the in-process cache cleared) reads the file instead of passing over the products again."""
    from apo_lightning.webshop import WebShop
    from apo_lightning.webshop.gym_env import _page_bound, text_spaces
    from apo_lightning.webshop.synthetic import generate_catalog

    shop = WebShop.load(generate_catalog(tmp_path / "catalog", seed=5, num_products=300), cache=True,
                        cache_dir=tmp_path / "cache")
    memory = WebShop.load(shop.data_dir, cache=False)
    _page_bound.cache_clear()
    spaces_stored = text_spaces(shop, "text_rich", True, 15)
    assert spaces_stored == text_spaces(memory, "text_rich", True, 15)  # the same bound as the in-memory catalog
    path = shop.products.folder / "seed-233" / "space_bound-text_rich-1-15.json"
    bound = json.loads(path.read_text())
    assert bound["longest_page"] == spaces_stored[0].max_length and bound["longest_action"] > 0
    bound["longest_page"] = 7  # a later process reads the file, not the products
    path.write_text(json.dumps(bound))
    _page_bound.cache_clear()
    assert text_spaces(shop, "text_rich", True, 15)[0].max_length == 7
    assert text_spaces(shop, "text", True, 15)[0].max_length > 7  # other settings, their own file
    _page_bound.cache_clear()


def test_sync_and_async_vector_envs_step_many_episodes():
    kwargs = dict(data_dir="synthetic", split="test")
    singles = [make(**kwargs) for _ in range(3)]
    expected = [env.reset(seed=10 + i)[0] for i, env in enumerate(singles)]
    actions = ["search[shoes]", "click[nothing]", "search[red bag]"]
    expected_steps = [env.step(a) for env, a in zip(singles, actions)]
    for mode, extra in (("sync", {}), ("async", {"shared_memory": False})):
        vector = gymnasium.make_vec(ENV_ID, num_envs=3, vectorization_mode=mode, vector_kwargs=extra, **kwargs)
        try:
            observations, infos = vector.reset(seed=10)
            assert observations == tuple(expected), mode
            observations, rewards, terminated, truncated, infos = vector.step(actions)
            assert observations == tuple(s[0] for s in expected_steps), mode
            assert list(infos["valid"]) == [s[4]["valid"] for s in expected_steps] == [True, False, True]
            assert list(rewards) == [0.0] * 3 and not terminated.any() and not truncated.any()
        finally:
            vector.close()
