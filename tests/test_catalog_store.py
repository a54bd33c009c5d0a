"""The on-disk catalog (apo_lightning/webshop/store.py) and the loader's streaming reader (catalog.iter_json_array):
a stored shop equals the in-memory shop, the cache is keyed by the files and written atomically, and the full
catalog's file names load. The golden fixtures run through both loads in tests/test_webshop_golden.py."""

import itertools
import json
import random
import shutil
from pathlib import Path

import pytest

from apo_lightning.webshop import WebShop, WebShopDataError, WebShopEnv, store
from apo_lightning.webshop.catalog import DataFiles, iter_json_array
from apo_lightning.webshop.goals import goal_options_at, option_combinations, synthetic_goal_weights, synthetic_goals
from apo_lightning.webshop.synthetic import generate_catalog


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory) -> Path:
    return generate_catalog(tmp_path_factory.mktemp("catalog"), seed=5, num_products=1500)


def assert_same_shop(stored: WebShop, memory: WebShop, queries: int = 200) -> None:
    """Products (equal, and the same JSON bytes: same key order), prices, goals, sources, nouns and rankings."""
    assert isinstance(stored.products, store.ProductStore) and isinstance(memory.products, list)
    assert len(stored.products) == len(memory.products)
    assert [json.dumps(p) for p in stored.products] == [json.dumps(p) for p in memory.products]
    assert stored.prices == memory.prices and list(stored.prices) == list(memory.prices)
    assert len(stored.goals) == len(memory.goals)
    assert [json.dumps(g) for g in stored.goals] == [json.dumps(g) for g in memory.goals]
    assert stored.goals == memory.goals
    assert (stored.token_source, stored.noun_source) == (memory.token_source, memory.noun_source)
    for p in memory.products[:300]:
        assert stored.title_nouns(p["name"]) == memory.title_nouns(p["name"])
        assert stored.product_by_asin[p["asin"]] == p
    texts = [g["instruction_text"] for g in memory.goals[:queries]] + [g["query"] for g in memory.goals[:queries]]
    assert all(stored.search(q) == memory.search(q) for q in texts)


@pytest.mark.parametrize("goals", ["synthetic", "human"])
def test_a_stored_synthetic_catalog_equals_the_in_memory_one(catalog_dir, tmp_path, goals):
    stored = WebShop.load(catalog_dir, goals=goals, seed=11, cache=True, cache_dir=tmp_path)
    assert_same_shop(stored, WebShop.load(catalog_dir, goals=goals, seed=11, cache=False))
    assert not stored.search_engine._posting_doc.flags.writeable  # mapped read-only
    again = WebShop.load(catalog_dir, goals=goals, seed=11, cache=True, cache_dir=tmp_path)  # from the cache
    assert again.products.folder == stored.products.folder and again.goals == stored.goals
    other_seed = WebShop.load(catalog_dir, goals=goals, seed=12, cache=True, cache_dir=tmp_path)
    assert other_seed.products.folder == stored.products.folder  # one store, one seed table each
    assert_same_shop(other_seed, WebShop.load(catalog_dir, goals=goals, seed=12, cache=False), queries=20)
    assert sorted(p.name for p in stored.products.folder.glob("seed-*")) == ["seed-11", "seed-12"]


def test_episodes_in_a_stored_catalog_equal_those_in_memory(catalog_dir, tmp_path):
    stored = WebShop.load(catalog_dir, cache=True, cache_dir=tmp_path)
    memory = WebShop.load(catalog_dir, cache=False)
    rng = random.Random(0)
    for goal_index in rng.sample(range(len(memory.goals)), 40):
        envs = [WebShopEnv(shop, observation_mode="text_rich") for shop in (stored, memory)]
        observations = {env.reset(goal_index) for env in envs}
        assert len(observations) == 1
        goal = memory.goals[goal_index]
        actions = [f"search[{goal['query']}]", "click[next >]", "click[< prev]", f"click[{goal['asin'].lower()}]",
                   *(f"click[{value}]" for value in goal["goal_options"].values()), "click[description]",
                   "click[< prev]", "click[buy now]"]
        for action in actions:
            results = [env.step(action) for env in envs]
            assert results[0] == results[1], (goal_index, action)
            assert envs[0].available_actions() == envs[1].available_actions()


def test_the_automatic_choice_follows_the_product_file_size(catalog_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert isinstance(WebShop.load(catalog_dir).products, list)  # 1,500 products: a few MB, in memory
    monkeypatch.setattr("apo_lightning.webshop.shop.LARGE_CATALOG_BYTES", 1)
    monkeypatch.setenv("APO_WEBSHOP_CACHE", str(tmp_path / "from_env"))
    shop = WebShop.load(catalog_dir)
    assert isinstance(shop.products, store.ProductStore)
    assert shop.products.folder.parent == tmp_path / "from_env"
    monkeypatch.delenv("APO_WEBSHOP_CACHE")
    assert WebShop.load(catalog_dir).products.folder.parent.resolve() == (tmp_path / "data" / "webshop_cache").resolve()


def test_the_cache_key_follows_every_file_byte(catalog_dir, tmp_path):
    copy = Path(shutil.copytree(catalog_dir, tmp_path / "copy"))
    key = store.catalog_key(DataFiles.find(copy), "synthetic")
    assert key == store.catalog_key(DataFiles.find(catalog_dir), "synthetic")  # content, not place
    assert key != store.catalog_key(DataFiles.find(copy), "human")
    nouns = copy / "title_nouns.json"
    nouns.write_bytes(nouns.read_bytes().replace(b'"_meta": {', b'"_meta": { ', 1))
    assert store.catalog_key(DataFiles.find(copy), "synthetic") != key


def test_a_failed_build_leaves_no_folder_and_a_broken_one_is_rebuilt(catalog_dir, tmp_path, monkeypatch):
    def fail(*args):
        raise RuntimeError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(store.SearchIndexBuilder, "build", fail)
        with pytest.raises(RuntimeError, match="disk full"):
            WebShop.load(catalog_dir, cache=True, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary left behind
    shop = WebShop.load(catalog_dir, cache=True, cache_dir=tmp_path)
    folder = shop.products.folder
    (folder / store.MANIFEST_FILE).write_text("{")  # a damaged folder
    rebuilt = WebShop.load(catalog_dir, cache=True, cache_dir=tmp_path)
    assert rebuilt.products.folder == folder and json.loads((folder / store.MANIFEST_FILE).read_text())["products"]
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]


def test_the_full_catalogs_file_names_load(catalog_dir, tmp_path):
    """A folder as upstream's ``setup.sh -d all`` leaves it (items_shuffle.json, items_ins_v2.json, items_human_ins
    .json), and one that also holds the 1k set's pair: each product file is read with its own attribute file."""
    full = tmp_path / "full"
    full.mkdir()
    raw = json.loads((catalog_dir / "items_shuffle_1000.json").read_text())
    skipped = [{**raw[0], "name": "a repeated ASIN: the first record wins"}, {**raw[1], "asin": "nan"},
               {**raw[2], "asin": "B0TOOLONGAS"}]
    (full / "items_shuffle.json").write_text(json.dumps(raw[:5] + skipped + raw[5:]))
    shutil.copy(catalog_dir / "items_ins_v2_1000.json", full / "items_ins_v2.json")
    shutil.copy(catalog_dir / "items_human_ins.json", full / "items_human_ins.json")
    files = DataFiles.find(full)
    assert (files.products.name, files.attributes.name) == ("items_shuffle.json", "items_ins_v2.json")
    memory = WebShop.load(full, cache=False)
    stored = WebShop.load(full, cache=True, cache_dir=tmp_path / "cache")
    assert_same_shop(stored, memory, queries=20)
    assert len(stored.products) == len(raw) and stored.products[0]["name"] == raw[0]["name"]
    assert memory.goals == WebShop.load(catalog_dir, cache=False).goals
    (full / "items_ins_v2_1000.json").write_text("{}")  # a stray 1k attribute file is not paired with the full set
    assert DataFiles.find(full).attributes.name == "items_ins_v2.json"


def test_stored_lookups(catalog_dir, tmp_path):
    shop = WebShop.load(catalog_dir, cache=True, cache_dir=tmp_path)
    products = shop.products
    first = products[0]
    assert products[-1] == products[len(products) - 1] and products[:2] == [products[0], products[1]]
    assert products[0] is first  # decoded once while it stays in the cache
    with pytest.raises(IndexError):
        products[len(products)]
    assert first["asin"] in shop.product_by_asin and "B0NOTHERE0" not in shop.product_by_asin
    assert "B0TOOLONGASIN" not in shop.product_by_asin and 12 not in shop.prices
    with pytest.raises(KeyError):
        shop.product_by_asin["b0" + first["asin"][2:].lower()]  # ASINs are looked up as stored
    assert shop.prices.get("B0NOTHERE0") is None and len(shop.prices) == len(products)
    assert list(shop.product_by_asin)[:3] == [p["asin"] for p in products[:3]]
    assert shop.goals[-1] == shop.goals[len(shop.goals) - 1] and shop.goals[:2] == [shop.goals[0], shop.goals[1]]
    with pytest.raises(IndexError):
        shop.goals[len(shop.goals)]
    assert shop.products.nouns.get("no such name") is None
    assert random.Random(0).sample(shop.products, 2)  # a Sequence: special queries (<r>) sample it


def test_synthetic_goals_raise_for_an_instruction_without_attributes(catalog_dir, tmp_path):
    copy = Path(shutil.copytree(catalog_dir, tmp_path / "copy"))
    attributes = json.loads((copy / "items_ins_v2_1000.json").read_text())
    asin = next(a for a, entry in attributes.items() if "instruction" in entry)
    attributes[asin]["instruction_attributes"] = []
    (copy / "items_ins_v2_1000.json").write_text(json.dumps(attributes))
    with pytest.raises(ValueError, match=f"{asin} has an instruction but no instruction_attributes"):
        WebShop.load(copy, cache=False)
    with pytest.raises(ValueError, match=f"{asin} has an instruction but no instruction_attributes"):
        WebShop.load(copy, cache=True, cache_dir=tmp_path / "cache")
    assert WebShop.load(copy, goals="human", cache=True, cache_dir=tmp_path / "cache").goals  # human goals: fine


# ------------------------------------------------------------------------------------------------ goal tables
def test_goal_options_at_walks_itertools_product():
    options = {"size": ["s", "m", "l"], "color": ["red", "blue"], "fit": ["a"]}
    names = sorted(options)
    expected = [dict(zip(names, combo)) for combo in itertools.product(*(options[n] for n in names))]
    assert option_combinations(options) == len(expected) == 6
    assert [goal_options_at(options, i) for i in range(6)] == expected
    assert option_combinations({}) == 1 and goal_options_at({}, 0) == {}
    assert option_combinations({"size": []}) == 0
    with pytest.raises(IndexError):
        goal_options_at(options, 6)


def test_goal_weights_equal_the_goal_generators(catalog_dir):
    shop = WebShop.load(catalog_dir, cache=False)
    instructed = [p for p in shop.products if p.get("instruction_text") is not None]
    goals = synthetic_goals(instructed, shop.prices, random.Random(0))
    weights = synthetic_goal_weights([p["instruction_attributes"] for p in instructed],
                                     [option_combinations(p["options"]) for p in instructed])
    by_asin = dict(zip((p["asin"] for p in instructed), weights))
    assert [g["weight"] for g in goals] == [by_asin[g["asin"]] for g in goals]


# --------------------------------------------------------------------------------------------- streaming reads
@pytest.mark.parametrize("chunk_chars", [1, 7, 1 << 24])
def test_iter_json_array_reads_what_json_load_reads(catalog_dir, tmp_path, chunk_chars):
    records = [{"a": 1, "b": [1.5, "x \u2603 \"]"]}, 12, -3.25e-7, "s", [], {}, None, True, 1234567890]
    path = tmp_path / "list.json"
    path.write_text(" \n[ " + " ,\n".join(json.dumps(r) for r in records) + " ] \n", encoding="utf-8")
    assert list(iter_json_array(path, "a list", chunk_chars)) == records
    products = catalog_dir / "items_shuffle_1000.json"
    if chunk_chars > 1:
        assert list(iter_json_array(products, "products", chunk_chars)) == json.loads(products.read_text())
    path.write_text("[]")
    assert list(iter_json_array(path, "a list", chunk_chars)) == []


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": 1}', "top level is not a JSON list"),
    ("[1, 2", "ends before the list's closing"),
    ("[1, 2,", "cannot read it as JSON"),
    ("[1 2]", "expected ',' or ']'"),
    ("[1, {]", "cannot read it as JSON"),
    ("", "top level is not a JSON list"),
])
def test_iter_json_array_names_the_file_and_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "items_shuffle.json"
    path.write_text(text)
    with pytest.raises(WebShopDataError, match=message) as error:
        list(iter_json_array(path, "a JSON list of raw product records", 3))
    assert "items_shuffle.json" in str(error.value)
