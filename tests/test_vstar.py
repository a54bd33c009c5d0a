"""Stage-1 bookkeeping: cache keys, weight hashes, the on-disk V* cache, the V* table, and the RL data module's
stage 1 (``lit.stage1``: reused samples) on stubbed samples."""

import json
import math
import os

import pytest
import torch

from apo_lightning.apo.vstar import CACHE_FORMAT_VERSION, VStarCache, VStarCacheWarning, VStarTable
from apo_lightning.utils import files as files_module
from apo_lightning.utils.hashing import cache_key, hash_state_dict

PARTS = {
    "ref_weights": "ab" * 32,
    "goal_ids": [1500, 1501, 1502],
    "n": 8,
    "beta1": 0.5,
    "reward": {"format_penalty": -0.1},
    "env": {"max_turns": 6, "catalog": "synthetic"},
    "prompt_format": "chatml-v1",
}

# rewards of 2 goals × N = 2 samples, and their V* at β1 = 0.5:
#   goal 7: 0.5 · ln((e^{0/0.5} + e^{1/0.5}) / 2) = 0.5 · ln(4.1945280) = 0.7168904
#   goal 8: 0.5 · ln((e^2 + e^2) / 2)              = 1.0
REWARDS = {7: [0.0, 1.0], 8: [1.0, 1.0]}
V_GOAL_7 = 0.5 * math.log((1.0 + math.exp(2.0)) / 2.0)


# ------------------------------------------------------------------------------------------------ cache_key


def test_cache_key_ignores_dict_order():
    reordered = {k: PARTS[k] for k in reversed(list(PARTS))}
    reordered["env"] = {"catalog": "synthetic", "max_turns": 6}
    key = cache_key(PARTS)
    assert key == cache_key(reordered)
    assert len(key) == 64 and all(c in "0123456789abcdef" for c in key)
    # ... but not their content: one nested value changed, the key changes (the comparison above can fail)
    assert cache_key({**reordered, "env": {"catalog": "synthetic", "max_turns": 7}}) != key


def test_cache_key_changes_with_every_part():
    base = cache_key(PARTS)
    changes = {
        "ref_weights": "cd" * 32,
        "goal_ids": [1500, 1501],
        "n": 16,
        "beta1": 0.25,
        "reward": {"format_penalty": -0.2},
        "env": {"max_turns": 7, "catalog": "synthetic"},
        "prompt_format": "chatml-v2",
    }
    keys = {base}
    for name, value in changes.items():
        keys.add(cache_key({**PARTS, name: value}))
    keys.add(cache_key({**PARTS, "extra": None}))
    assert len(keys) == len(changes) + 2  # all distinct
    # list order is meaningful (goal order), floats are compared by repr: 0.1 + 0.2 != 0.3
    assert cache_key({**PARTS, "goal_ids": [1502, 1501, 1500]}) != base
    assert cache_key({"x": 0.1 + 0.2}) != cache_key({"x": 0.3})


def test_cache_key_rejects_unhashable_values():
    with pytest.raises(TypeError, match="parts.w"):
        cache_key({"w": torch.zeros(2)})
    with pytest.raises(TypeError, match="str"):
        cache_key({"m": {1: "a"}})


# ------------------------------------------------------------------------------------------------ hash_state_dict


def test_hash_state_dict_order_independent_and_sensitive():
    a = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.tensor([1, 2], dtype=torch.int64)}
    h = hash_state_dict(a)
    assert h == hash_state_dict({"b": a["b"].clone(), "w": a["w"].clone()})
    changed = {k: v.clone() for k, v in a.items()}
    changed["w"][1, 2] = 5.0000005  # one element of one weight
    assert hash_state_dict(changed) != h
    assert hash_state_dict({"w": a["w"].double(), "b": a["b"]}) != h  # dtype
    assert hash_state_dict({"w": a["w"].reshape(3, 2), "b": a["b"]}) != h  # shape, same bytes
    assert hash_state_dict({"w2": a["w"], "b": a["b"]}) != h  # name
    bf16 = hash_state_dict({"w": a["w"].bfloat16()})
    assert len(bf16) == 64
    with pytest.raises(TypeError, match="'x'"):
        hash_state_dict({"x": 3})


# ------------------------------------------------------------------------------------------------ VStarTable


def test_table_from_rewards_and_lookup():
    table = VStarTable.from_rewards("k", {1: [0.0, 0.0], 2: [0.0, 1.0], 4: [-0.1, 0.0], "3": [0.5, 0.5]}, 0.5)
    assert table.n_samples == 2 and len(table) == 4 and 3 in table and list(table.v_star) == [1, 2, 4, 3]
    # 2 = goal 7's case above: 0.7168904 ; 3 (read from a JSON key): constant 0.5 → 0.5 ; 1: constant 0 → 0
    v = table.lookup([2, 3, torch.tensor(1)])
    assert v.dtype == torch.float32 and v.shape == (3,)
    assert torch.allclose(v, torch.tensor([V_GOAL_7, 0.5, 0.0]), atol=1e-6)
    with pytest.raises(KeyError, match="goal id 99 "):
        table.lookup([1, 99])


def test_table_rejects_ragged_or_bad_rewards():
    with pytest.raises(ValueError, match="same number"):
        VStarTable.from_rewards("k", {1: [0.0, 1.0], 2: [1.0]}, 0.5)
    with pytest.raises(ValueError, match="non-finite"):
        VStarTable.from_rewards("k", {1: [0.0, float("nan")]}, 0.5)
    with pytest.raises(ValueError, match="both goal index 1"):
        VStarTable.from_rewards("k", {1: [0.0], "1": [1.0]}, 0.5)
    with pytest.raises(ValueError, match="'a' is not a goal index"):
        VStarTable.from_rewards("k", {"a": [0.0]}, 0.5)
    with pytest.raises(ValueError, match="empty"):
        VStarTable.from_rewards("k", {}, 0.5)


# ------------------------------------------------------------------------------------------------ VStarCache


class Counter:
    def __init__(self, rewards):
        self.calls = 0
        self.rewards = rewards

    def __call__(self):
        self.calls += 1
        return self.rewards


def test_cache_miss_computes_and_saves(tmp_path):
    cache = VStarCache(tmp_path / "vstar")
    compute = Counter(REWARDS)
    table = cache.get_or_compute(PARTS, compute, beta1=0.5)
    assert compute.calls == 1
    assert table.key == cache_key(PARTS, CACHE_FORMAT_VERSION)
    assert table.v_star[7] == pytest.approx(V_GOAL_7, abs=1e-9)
    assert table.v_star[8] == pytest.approx(1.0, abs=1e-12)
    payload = json.loads((tmp_path / "vstar" / f"{table.key}.json").read_text())
    assert payload["rewards"] == {"7": [0.0, 1.0], "8": [1.0, 1.0]}
    assert payload["v_star"]["7"] == pytest.approx(V_GOAL_7, abs=1e-9)
    assert payload["key_parts"]["goal_ids"] == [1500, 1501, 1502] and "created" in payload


def test_cache_hit_does_not_call_compute_fn(tmp_path):
    cache = VStarCache(tmp_path)
    first = cache.get_or_compute(PARTS, Counter(REWARDS), beta1=0.5)

    def must_not_run():
        raise AssertionError("compute_fn called on a cache hit")

    second = VStarCache(tmp_path).get_or_compute(dict(reversed(list(PARTS.items()))), must_not_run, beta1=0.5)
    assert second.v_star == first.v_star and second.rewards == first.rewards and second.key == first.key
    # a hit returns what the file holds: edit the stored rewards of goal 8 and the next hit has goal 7's V* for it
    path = tmp_path / f"{first.key}.json"
    payload = json.loads(path.read_text())
    payload["rewards"]["8"] = [0.0, 1.0]
    path.write_text(json.dumps(payload))
    edited = VStarCache(tmp_path).get_or_compute(PARTS, must_not_run, beta1=0.5)
    assert edited.v_star[8] == pytest.approx(V_GOAL_7, abs=1e-9) and edited.v_star != first.v_star


def test_changed_key_recomputes(tmp_path):
    cache = VStarCache(tmp_path)
    cache.get_or_compute(PARTS, Counter(REWARDS), beta1=0.5)
    compute = Counter({7: [1.0, 1.0], 8: [0.0, 0.0]})
    table = cache.get_or_compute({**PARTS, "n": 2}, compute, beta1=0.5)
    assert compute.calls == 1
    assert table.v_star[7] == pytest.approx(1.0) and table.v_star[8] == pytest.approx(0.0)
    assert len(list(tmp_path.glob("*.json"))) == 2


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps([1, 2]),
     json.dumps({"format_version": CACHE_FORMAT_VERSION, "key_parts": {}, "v_star": {"7": 1.0}}),
     json.dumps({"format_version": CACHE_FORMAT_VERSION, "key_parts": {}, "v_star": {"7": 1.0},
                 "rewards": {"7": ["x"]}})],
    ids=["not-json", "not-object", "missing-rewards", "bad-reward"],
)
def test_corrupt_file_warns_and_recomputes(tmp_path, content):
    cache = VStarCache(tmp_path)
    path = cache.path_for(cache.key(PARTS))
    path.write_text(content)
    compute = Counter(REWARDS)
    with pytest.warns(VStarCacheWarning, match=path.name):
        table = cache.get_or_compute(PARTS, compute, beta1=0.5)
    assert compute.calls == 1
    assert table.v_star[8] == pytest.approx(1.0)
    # the bad file was replaced by a good one: the next call is a silent hit
    assert VStarCache(tmp_path).load(table.key)["rewards"]["7"] == [0.0, 1.0]


def test_a_file_of_older_code_is_refused_and_rebuilt(tmp_path):
    cache = VStarCache(tmp_path)
    table = cache.get_or_compute(PARTS, Counter(REWARDS), beta1=0.5)
    path = cache.path_for(table.key)
    payload = json.loads(path.read_text())
    path.write_text(json.dumps({**payload, "format_version": CACHE_FORMAT_VERSION - 1}))
    compute = Counter(REWARDS)
    with pytest.warns(VStarCacheWarning, match=rf"{path.name} is unusable \(made by older code: format_version "
                                               rf"{CACHE_FORMAT_VERSION - 1}, .*the file rebuilt"):
        cache.get_or_compute(PARTS, compute, beta1=0.5)
    assert compute.calls == 1
    assert json.loads(path.read_text())["format_version"] == CACHE_FORMAT_VERSION  # rebuilt: the next call is a hit
    assert VStarCache(tmp_path).load(table.key)["rewards"] == payload["rewards"]


def test_atomic_write_leaves_no_temp_files(tmp_path, monkeypatch):
    cache = VStarCache(tmp_path)
    table = cache.get_or_compute(PARTS, Counter(REWARDS), beta1=0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{table.key}.json"]

    # a crash between writing the temp file and renaming it leaves neither a temp file nor a partial target
    other_key = cache_key({**PARTS, "n": 4})

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files_module.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        cache.save(other_key, {"key_parts": {}, "v_star": {}, "rewards": {}})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{table.key}.json"]
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))


def test_cache_validates_key_and_beta1(tmp_path):
    cache = VStarCache(tmp_path)
    with pytest.raises(ValueError, match="cache key"):
        cache.path_for("../../etc/passwd")
    with pytest.raises(ValueError, match="beta1"):
        cache.get_or_compute(PARTS, Counter(REWARDS), beta1=0.0)
    assert cache.load(cache_key(PARTS)) is None  # nothing stored, no warning


# ------------------------------------------------------------------------------------------------ lit.stage1


def stage1(**settings):
    """A :class:`Stage1` on the synthetic catalog whose table holds ``STAGE1_REWARDS``."""
    from apo_lightning.lit.stage1 import Stage1, VStarConfig
    from apo_lightning.rollout.chat import ChatFormat
    from apo_lightning.rollout.settings import RolloutSettings
    from apo_lightning.webshop.settings import EnvConfig, RewardSettings

    stage = Stage1(VStarConfig(num_samples=2, **settings), EnvConfig(data_dir="synthetic"), ChatFormat(),
                   RewardSettings(), RolloutSettings(), seed=0)
    stage.table = VStarTable.from_rewards("k", STAGE1_REWARDS, 0.5)
    return stage


# goal 1: nothing scored; 2: one sample did; 3: both did, equally; 4: a format penalty and a 0
STAGE1_REWARDS = {1: [0.0, 0.0], 2: [0.0, 0.5], 3: [1.0, 1.0], 4: [-0.1, 0.0]}


def test_reused_samples_are_drawn_afresh_per_batch_from_this_ranks_goals():
    record = {"segments": [{"token_ids": [5, 6], "gen_mask": [0, 1], "old_logp": [0.0, -1.0], "first_turn": 0}],
              "score": 0.5, "reward": 0.5, "success": False}
    stage = stage1(reuse=3)
    stage.samples = {g: [{**record, "reward": g + i / 10} for i in range(2)] for g in (1, 2, 3, 4)}
    drawn = [[(t.goal_index, t.reward) for t in stage.reused([1, 3], rank=0, batch_number=b)] for b in range(4)]
    assert all(len(rows) == 3 == len(set(rows)) for rows in drawn)  # without replacement
    assert all(g in (1, 3) and r in (g, g + 0.1) for rows in drawn for g, r in rows)  # this rank's goals only
    assert len({tuple(rows) for rows in drawn}) > 1  # afresh for each batch ...
    assert drawn[1] == [(t.goal_index, t.reward) for t in stage.reused([1, 3], rank=0, batch_number=1)]  # ... seeded
    assert stage1().reused([1, 3], rank=0, batch_number=0) == []  # reuse 0: none
