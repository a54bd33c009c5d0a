"""Tests for the synthetic WebShop catalog (apo_lightning/webshop/synthetic.py): formats, counts, determinism."""

import hashlib
import json
import math
import os
import re
from decimal import Decimal
from pathlib import Path

import pytest

from apo_lightning.webshop import WebShopDataError, synthetic
from apo_lightning.webshop.synthetic import (
    ATTRIBUTES_FILE,
    DATA_FILES,
    HUMAN_INSTRUCTIONS_FILE,
    META_FILE,
    PRODUCTS_FILE,
    TITLE_NOUNS_FILE,
    ensure_catalog,
    generate_catalog,
)

RAW_KEYS = {"name", "full_description", "pricing", "images", "product_category", "average_rating",
            "small_description", "customization_options", "asin", "category", "query", "page"}
HUMAN_KEYS = {"asin", "instruction", "attributes", "options", "instruction_attributes", "instruction_options",
              "assignment_id", "worker_id"}
ASIN_RE = re.compile(r"^B0[0-9A-Z]{8}$")
PRICING_RE = re.compile(r"^(\$\d+\.\d\d( to \$\d+\.\d\d)?)?$")


# ------------------------------------------------------------------------------------------------ helpers


def load(folder: Path, name: str):
    return json.loads((folder / name).read_text())


def parse_pricing(pricing: str) -> list[float]:
    """As WebShop's ``load_products`` (web_agent_site/engine/engine.py): split on '$', drop the first piece, keep
    digits and '.', float via Decimal; '' -> 100."""
    if not pricing:
        return [100.0]
    return [float(Decimal(re.sub(r"[^\d.]", "", piece))) for piece in pricing.split("$")[1:]][:2]


def process_options(customization_options) -> dict[str, list[str]]:
    """As WebShop's ``load_products``: name.lower(); value.strip(), '/' -> ' | ', lower(); None contents skipped."""
    if not customization_options:
        return {}
    return {name.lower(): [c["value"].strip().replace("/", " | ").lower() for c in contents]
            for name, contents in customization_options.items() if contents is not None}


def stem(word: str) -> str:
    """Crude plural stripping, enough to find a query word in a title ("toothbrushes" -> "toothbrush")."""
    word = word.removesuffix("'s")
    return word.rstrip("s").removesuffix("e") if len(word) > 3 else word


def synthetic_goal_count(products: list[dict], attributes: dict) -> int:
    """As WebShop's ``get_synthetic_goals`` (web_agent_site/engine/goal.py): one goal per option-value combination
    of every product with an instruction."""
    return sum(math.prod(len(v) for v in process_options(p["customization_options"]).values())
               for p in products if "instruction" in attributes[p["asin"]])


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory) -> Path:
    """The default catalog (seed 0, 600 products), generated once for the module."""
    return generate_catalog(tmp_path_factory.mktemp("synthetic") / "seed0")


@pytest.fixture(scope="module")
def products(catalog_dir) -> list[dict]:
    return load(catalog_dir, PRODUCTS_FILE)


@pytest.fixture(scope="module")
def attributes(catalog_dir) -> dict:
    return load(catalog_dir, ATTRIBUTES_FILE)


# ------------------------------------------------------------------------------------------------ determinism


def test_same_seed_gives_identical_bytes_and_another_seed_differs(tmp_path):
    a, b, c = (generate_catalog(tmp_path / name, seed=seed) for name, seed in (("a", 0), ("b", 0), ("c", 1)))
    for name in DATA_FILES + (META_FILE,):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for name in (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_INSTRUCTIONS_FILE, TITLE_NOUNS_FILE):
        assert (a / name).read_bytes() != (c / name).read_bytes(), name
    assert not list(tmp_path.glob("*/.*.tmp"))  # no temporary files left behind


#: sha256 of the default catalog's files (seed 0, 600 products: the quick start's). Editing the word tables
#: (apo_lightning/webshop/data/synthetic_vocabulary.json) or the generator changes them: bump GENERATOR_VERSION and
#: record the new hashes here.
SEED0_SHA256 = {
    "SOURCE.md": "d84d2ce3c171ed1bfb1f1eecdddd907c5ed0059b6e56b2a7ef2c45700ed2c9d1",
    "catalog.json": "502573c92fccc5586e1038b33d70806581685aed408a265d7d48ce9d8183b478",
    "items_human_ins.json": "36e93a121ffeb8fd7b51edbe850b9d86bd4069e4b6194320b55965d7d9f9b4ef",
    "items_ins_v2_1000.json": "1d915ce2baeeaf21ef2c297496ef458d5c47d90bf54016b0ae68b6fa4d9f97a9",
    "items_shuffle_1000.json": "ee827227fd9e3b3f90d92b5e989e4122e335cb95308dca9a949482f27d005f5d",
    "title_nouns.json": "3b858831d2a25716017d67feb17e16ddd0a774bc6377770c2eca0389f2417178",
}


def test_the_default_catalog_has_its_recorded_bytes(catalog_dir):
    assert {name: hashlib.sha256((catalog_dir / name).read_bytes()).hexdigest()
            for name in DATA_FILES + (META_FILE,)} == SEED0_SHA256


def test_a_missing_or_malformed_vocabulary_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(synthetic, "VOCABULARY_FILE", "no_such_vocabulary.json")
    synthetic.vocabulary.cache_clear()
    try:
        with pytest.raises(WebShopDataError, match="no_such_vocabulary.json is missing or malformed.*reinstall"):
            synthetic.vocabulary()
    finally:
        monkeypatch.undo()
        synthetic.vocabulary.cache_clear()
    assert synthetic.vocabulary().categories  # the shipped file reads again


def test_written_files_match_build_catalog(catalog_dir):
    built = synthetic.build_catalog(seed=0, num_products=600)
    for name in (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_INSTRUCTIONS_FILE, TITLE_NOUNS_FILE):
        assert load(catalog_dir, name) == built[name]
    meta = load(catalog_dir, META_FILE)
    assert meta["seed"] == 0 and meta["num_products"] == 600
    assert meta["generator_version"] == synthetic.GENERATOR_VERSION
    assert set(meta["files"]) == set(DATA_FILES)
    source = (catalog_dir / "SOURCE.md").read_text()
    assert "seed 0" in source and f"generator version {synthetic.GENERATOR_VERSION}" in source


# ------------------------------------------------------------------------------------------------ counts


def test_counts(products, attributes):
    assert len(products) == 600
    asins = [p["asin"] for p in products]
    assert len(set(asins)) == len(asins)
    assert all(ASIN_RE.match(a) for a in asins)
    assert len({p["category"] for p in products}) >= 8

    num_options = [len(process_options(p["customization_options"])) for p in products]
    without = num_options.count(0) / len(products)
    assert 0.4 <= without <= 0.7  # real 1k set: 57.7% without options
    assert {1, 2, 3} <= set(num_options) and max(num_options) == 3

    queries = {}
    for p in products:
        queries.setdefault(p["query"], []).append(p)
    assert min(len(group) for group in queries.values()) >= 3  # search must pick among look-alikes

    assert set(attributes) == set(asins)
    instructed = [a for a in asins if "instruction" in attributes[a]]
    assert len(instructed) >= 0.4 * len(products)
    for asin in instructed:
        entry = attributes[asin]
        assert entry["instruction_attributes"], asin
        assert set(entry["instruction_attributes"]) <= set(entry["attributes"]), asin
    assert any(not attributes[a]["attributes"] for a in asins)  # some products have no attributes, as in the real set
    assert synthetic_goal_count(products, attributes) > 1500  # enough for test [0,500) + val [500,1500) + train


def test_small_catalog_and_invalid_size():
    built = synthetic.build_catalog(seed=3, num_products=12)
    assert len(built[PRODUCTS_FILE]) == 12
    assert sum("instruction" in v for v in built[ATTRIBUTES_FILE].values()) >= 0.4 * 12
    with pytest.raises(ValueError, match="num_products"):
        synthetic.build_catalog(num_products=0)


# ------------------------------------------------------------------------------------------------ formats


def test_raw_fields_have_the_real_types(products):
    for p in products:
        assert set(p) == RAW_KEYS, p["asin"]
        assert isinstance(p["name"], str) and p["name"]
        assert isinstance(p["full_description"], str)
        assert PRICING_RE.match(p["pricing"]), p["pricing"]
        assert p["images"] and all(isinstance(u, str) and u.startswith("https://") for u in p["images"])
        assert p["product_category"] == "" or " › " in p["product_category"]
        assert p["average_rating"] == "" or isinstance(p["average_rating"], (int, float))
        small = p["small_description"]
        assert isinstance(small, str) or (isinstance(small, list) and all(isinstance(b, str) for b in small))
        assert p["query"] == p["query"].lower().strip() and p["query"]
        assert isinstance(p["category"], str) and p["category"] == p["category"].lower()
        assert isinstance(p["page"], int)
        options = p["customization_options"]
        assert options == "" or isinstance(options, dict)
        for name, entries in (options or {}).items():
            assert name[:1].isupper(), name
            if entries is None:
                continue
            for entry in entries:
                assert set(entry) == {"value", "image", "asin", "is_selected"}
                assert isinstance(entry["value"], str) and entry["value"].strip()
                assert entry["image"] is None or entry["image"].startswith("https://")
                assert ASIN_RE.match(entry["asin"]) and entry["is_selected"] is False
    # The loader's corner cases all occur: no price, price ranges, one-string bullets, empty descriptions,
    # option names with no values, values with '/' or stray case and whitespace.
    assert any(p["pricing"] == "" for p in products)
    assert any(" to " in p["pricing"] for p in products)
    assert any(isinstance(p["small_description"], str) for p in products)
    assert any(p["full_description"] == "" for p in products)
    entries = [e for p in products for v in (p["customization_options"] or {}).values() if v for e in v]
    assert any(v is None for p in products for v in (p["customization_options"] or {}).values())
    assert any("/" in e["value"] for e in entries)
    assert any(e["value"] != e["value"].strip() for e in entries)
    assert any(e["value"].isupper() for e in entries)


def test_products_process_as_the_spec_describes(products):
    for p in products:
        prices = parse_pricing(p["pricing"])
        assert all(v > 0 for v in prices) and prices == sorted(prices) and len(prices) in (1, 2)
        options = process_options(p["customization_options"])
        assert len(options) <= 3
        values = [v for vs in options.values() for v in vs]
        assert len(values) == len(set(values)), p["asin"]  # a click is stored by value: no value under two names
        for name, vs in options.items():
            assert name == name.lower() and 2 <= len(vs) <= 10
            assert all(v and v == v.strip() and "/" not in v for v in vs)


def test_option_values_survive_colour_normalisation(products):
    """The target product with the goal's options must be able to score r_option = 1: a colour word that
    normalize_color finds in a value must be a whole word of it (not 'red' in 'unflavored')."""
    reward = pytest.importorskip("apo_lightning.webshop.reward")
    for p in products:
        for values in process_options(p["customization_options"]).values():
            for v in values:
                normalized = reward.normalize_color(v)
                assert normalized == v or normalized in re.findall(r"[a-z0-9]+", v), (v, normalized)


def test_titles_contain_the_query_words(products):
    for p in products:
        title = p["name"].lower()
        for word in p["query"].split():
            assert stem(word) in title, (p["query"], p["name"])


def test_instructions_read_like_items_ins_v2(products, attributes):
    by_asin = {p["asin"]: p for p in products}
    openers = ("Find me ", "I need ", "I am looking for ", "Show me ", "Help me find ")
    instructions = [v for v in attributes.values() if "instruction" in v]
    assert sum(v["instruction"].startswith("Find me ") for v in instructions) > len(instructions) / 2
    for asin, entry in attributes.items():
        if "instruction" not in entry:
            continue
        text = entry["instruction"]
        assert text.startswith(openers), text
        assert by_asin[asin]["query"] in text, text
        assert all(a in text for a in entry["instruction_attributes"]), text
        assert "price" not in text and ":" not in text  # option and price text are added by the goal code


def test_human_records(products, catalog_dir):
    human = load(catalog_dir, HUMAN_INSTRUCTIONS_FILE)
    by_asin = {p["asin"]: p for p in products}
    assert 24 <= len(human) <= 60
    records = [r for rs in human.values() for r in rs]
    assert any(len(rs) > 1 for rs in human.values())
    assert sum(bool(r["instruction_attributes"]) for r in records) >= 24
    assert any(not r["instruction_attributes"] for r in records)  # the goal code's "skipped" case
    for asin, rs in human.items():
        options = process_options(by_asin[asin]["customization_options"])
        all_values = {v for vs in options.values() for v in vs}
        for r in rs:
            assert set(r) == HUMAN_KEYS and r["asin"] == asin
            assert r["instruction"] == r["instruction"].lower() and "price" not in r["instruction"]
            assert set(r["instruction_attributes"]) <= set(r["attributes"])
            assert set(r["instruction_options"]) <= all_values
            if options:
                assert all(o.split(": ", 1)[0] in options and o.split(": ", 1)[1] in options[o.split(": ", 1)[0]]
                           for o in r["options"])
            else:
                assert r["options"] == [""]
            assert len(r["assignment_id"]) == 30 and r["worker_id"].startswith("A")


def test_title_nouns_cover_every_asin(products, catalog_dir):
    table = load(catalog_dir, TITLE_NOUNS_FILE)
    assert set(table) == {"_meta"} | {p["asin"] for p in products}
    assert table["_meta"]["products"] == len(products)
    for p in products:
        nouns = table[p["asin"]]
        assert nouns and all(isinstance(n, str) and n == n.lower() and n in p["name"].lower() for n in nouns)
        head = stem(p["query"].split()[-1])
        assert any(n.startswith(head) for n in nouns), (p["name"], nouns)
    assert synthetic.title_nouns("Velora Hydrating Face Serum with Vitamin C, for Dry Skin, 1.7 Fl Oz") == [
        "velora", "face", "serum", "vitamin", "c", "skin", "fl", "oz"]
    assert synthetic.title_nouns("Trevano Men's Polo Shirt, 2 Pack") == ["trevano", "men", "polo", "shirt", "pack"]


# ------------------------------------------------------------------------------------------------ ensure / write


def test_ensure_catalog_regenerates_only_when_needed(tmp_path, monkeypatch):
    folder = tmp_path / "cat"
    calls = []
    real_generate = synthetic.generate_catalog

    def counting_generate(*args, **kwargs):
        calls.append(args)
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(synthetic, "generate_catalog", counting_generate)
    assert ensure_catalog(folder, seed=0, num_products=100) == folder and len(calls) == 1
    for path in folder.iterdir():  # a stamp from 2001, so that a file written from now on shows a new one (a
        os.utime(path, ns=(10**18, 10**18))  # rewrite right after the first write can keep its coarse mtime)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    ensure_catalog(folder, seed=0, num_products=100)
    assert len(calls) == 1 and {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before  # kept as is

    ensure_catalog(folder, seed=0, num_products=120)  # another size
    assert len(calls) == 2 and len(load(folder, PRODUCTS_FILE)) == 120
    assert (folder / PRODUCTS_FILE).stat().st_mtime_ns != before[PRODUCTS_FILE]  # a rewrite shows
    ensure_catalog(folder, seed=1, num_products=120)  # another seed
    assert len(calls) == 3 and load(folder, META_FILE)["seed"] == 1
    monkeypatch.setattr(synthetic, "GENERATOR_VERSION", synthetic.GENERATOR_VERSION + 1)  # another generator
    ensure_catalog(folder, seed=1, num_products=120)
    assert len(calls) == 4
    ensure_catalog(folder, seed=1, num_products=120)
    assert len(calls) == 4

    (folder / ATTRIBUTES_FILE).write_text("{}")  # an edited or truncated file
    ensure_catalog(folder, seed=1, num_products=120)
    assert len(calls) == 5 and len(load(folder, ATTRIBUTES_FILE)) == 120
    (folder / TITLE_NOUNS_FILE).unlink()  # a missing file
    ensure_catalog(folder, seed=1, num_products=120)
    assert len(calls) == 6 and (folder / TITLE_NOUNS_FILE).is_file()


def test_interrupted_generation_leaves_no_partial_files(tmp_path, monkeypatch):
    folder = generate_catalog(tmp_path / "cat", seed=0, num_products=90)
    import apo_lightning.utils.files as files

    real_replace = files.os.replace
    replaced = []

    def failing_replace(src, dst):
        if len(replaced) == 2:
            raise OSError("disk full")
        replaced.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        generate_catalog(folder, seed=5, num_products=90)
    monkeypatch.setattr(files.os, "replace", real_replace)

    assert not (folder / META_FILE).exists()  # the folder no longer claims to be a valid catalog
    assert not list(folder.glob(".*.tmp"))
    for name in (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_INSTRUCTIONS_FILE, TITLE_NOUNS_FILE):
        load(folder, name)  # every file present is complete JSON (old or new, never half-written)
    ensure_catalog(folder, seed=5, num_products=90)
    clean = generate_catalog(tmp_path / "clean", seed=5, num_products=90)
    for name in DATA_FILES + (META_FILE,):
        assert (folder / name).read_bytes() == (clean / name).read_bytes()


def test_command_line(tmp_path, capsys):
    out = synthetic.main(["--out", str(tmp_path / "cli"), "--seed", "2", "--num-products", "90"])
    assert "90 products" in capsys.readouterr().out
    reference = generate_catalog(tmp_path / "ref", seed=2, num_products=90)
    for name in DATA_FILES + (META_FILE,):
        assert (out / name).read_bytes() == (reference / name).read_bytes()
    with pytest.raises(SystemExit):
        synthetic.main(["--out", str(tmp_path / "bad"), "--num-products", "0"])


# ------------------------------------------------------------------------------------------------ integration


def test_loader_goals_search_and_reward_run_on_the_catalog(catalog_dir, products, attributes):
    """The project's WebShop loader reads the folder unchanged; each goal product, bought with the goal's
    options, scores 1, and a search with the instruction finds it near the top."""
    webshop = pytest.importorskip("apo_lightning.webshop")
    shop = webshop.WebShop.load(catalog_dir, goals="synthetic", seed=233)
    assert len(shop.products) == len(products)
    assert len(shop.goals) == synthetic_goal_count(products, attributes)

    first_goal = {}
    for goal in shop.goals:
        first_goal.setdefault(goal["asin"], goal)
    assert len(first_goal) == sum("instruction" in v for v in attributes.values())
    ranks = []
    for goal in first_goal.values():
        reward, _ = shop.reward(goal, goal["asin"], goal["goal_options"])
        assert reward == 1.0, goal["instruction_text"]
        hits = [asin for asin, _ in shop.search(goal["instruction_text"].lower())]
        ranks.append(hits.index(goal["asin"]) if goal["asin"] in hits else len(hits))
    assert sum(r < 10 for r in ranks) >= 0.9 * len(ranks)  # on the first results page
    assert sum(r == 0 for r in ranks) < len(ranks)  # but not trivially first every time

    human = webshop.WebShop.load(catalog_dir, goals="human", seed=233)
    records = load(catalog_dir, HUMAN_INSTRUCTIONS_FILE)
    assert len(human.goals) == sum(bool(r["instruction_attributes"]) for rs in records.values() for r in rs)
