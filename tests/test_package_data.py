"""The exactness tables shipped in the package (Lucene tokens, spaCy title nouns) stand in for the data folder's.

A data directory that holds only the raw files, as ``python -m apo_lightning.webshop download`` leaves it, must
reproduce every golden fixture exactly; a product whose text differs from the 1k set's is reported and falls back
to the project's own analyzer / noun fallback.
"""

import importlib.util
import json
import logging
import shutil
from pathlib import Path

import pytest
import test_webshop_golden as golden  # the golden checks, run here on a folder without the exactness files

from apo_lightning.webshop import WebShop
from apo_lightning.webshop import shop as shop_module
from apo_lightning.webshop.catalog import (
    PACKAGED_DOC_TOKENS,
    PACKAGED_TITLE_NOUNS,
    DataFiles,
    load_doc_tokens,
    load_packaged_table,
    search_document,
    text_hash,
)
from apo_lightning.webshop.reward import alphabetic_nouns
from apo_lightning.webshop.search import analyze

ROOT = Path(__file__).resolve().parents[1]
#: name in the raw folder -> file in the shared folder (as the download installs them)
RAW_FILES = {"items_shuffle_1000.json": "items_shuffle_1000.reconstructed.json",
             "items_ins_v2_1000.json": "items_ins_v2_1000.json",
             "items_human_ins.json": "items_human_ins.subset_1000.json"}


def make_raw_dir(folder: Path, shared: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in RAW_FILES.items():
        shutil.copyfile(shared / source, folder / name)
    return folder


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory, real_data_dir):
    return make_raw_dir(tmp_path_factory.mktemp("webshop_1k"), real_data_dir)


@pytest.fixture(scope="module")
def shops(raw_dir):
    """The raw folder loaded with synthetic and with human goals (seed 233), as the golden checks expect."""
    return {goals: WebShop.load(raw_dir, goals=goals, seed=233) for goals in ("synthetic", "human")}


# ------------------------------------------------------------------------------------------------ exactness
def test_raw_folder_uses_the_package_data(raw_dir, shops):
    files = DataFiles.find(raw_dir)
    assert files.doc_tokens is None and files.title_nouns is None
    synthetic_shop = shops["synthetic"]
    assert synthetic_shop.token_source.startswith("package data Lucene tokens for 1000 of 1000 products")
    assert synthetic_shop.noun_source.startswith("package data spaCy title nouns for 1000 of 1000 products")


def test_golden_goals_and_prices(shops, golden_dir):
    golden.test_all_synthetic_goals_in_seed_233_order(shops["synthetic"], golden_dir)
    golden.test_all_human_goals_in_seed_233_order(shops["human"], golden_dir)
    golden.test_all_prices(shops["synthetic"], shops["human"], golden_dir)


def test_golden_top50_search_rankings(shops, golden_dir):
    golden.test_all_top50_search_rankings(shops["synthetic"], golden_dir)


def test_golden_reward_cases(shops, golden_dir):
    golden.test_all_reward_cases(shops["synthetic"], shops["human"], golden_dir)


@pytest.mark.parametrize("goals", ["synthetic", "human"])
def test_golden_episodes(goals, shops, golden_dir):
    golden.test_every_step_of_the_golden_episodes(goals, "text", shops["synthetic"], shops["human"], golden_dir)


# ------------------------------------------------------------------------------------------------ the tables
def test_package_tables_hold_the_shared_tokens_and_nouns(real_data_dir, shops):
    tokens_meta, tokens = load_packaged_table(PACKAGED_DOC_TOKENS)
    nouns_meta, nouns = load_packaged_table(PACKAGED_TITLE_NOUNS)
    shared_tokens = load_doc_tokens(real_data_dir / "search_doc_tokens.jsonl")
    shared_nouns = json.loads((real_data_dir / "title_nouns_en_core_web_sm.json").read_text())
    assert {a: t for a, (_, t) in tokens.items()} == shared_tokens
    assert {a: n for a, (_, n) in nouns.items()} == {a: n for a, n in shared_nouns.items() if a != "_meta"}
    for product in shops["human"].products:  # keyed by the hash of the text each was computed from
        assert tokens[product["asin"]][0] == text_hash(search_document(product))
        assert nouns[product["asin"]][0] == text_hash(product["name"])
    assert tokens_meta["source"]["sha256"] == "47efaa45b4a9e71142507026e751df546cfccc591f89ca84d0e409c949302fbc"
    assert nouns_meta["source"]["sha256"] == "8660e0798b42df384b814e0b766aa49ef521c1bdf4b91d231838324612ef9e9d"


def test_build_script_reproduces_the_committed_files(real_data_dir):
    spec = importlib.util.spec_from_file_location("build_package_data", ROOT / "scripts" / "build_package_data.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    built = script.build(real_data_dir)
    package = ROOT / "apo_lightning" / "webshop" / "data"
    assert set(built) == {PACKAGED_DOC_TOKENS, PACKAGED_TITLE_NOUNS}
    for name, data in built.items():
        assert (package / name).read_bytes() == data, f"rerun scripts/build_package_data.py ({name} is stale)"


def test_package_tokens_are_what_the_index_uses(raw_dir, monkeypatch):
    """The analyzer gives Lucene's tokens on all 1,000 documents, so mark one packaged list to see it used."""
    meta, table = load_packaged_table(PACKAGED_DOC_TOKENS)
    asin = next(iter(table))
    marked = dict(table)
    marked[asin] = (table[asin][0], table[asin][1] + analyze("zzpackagedmarker"))  # the query's analysed term
    monkeypatch.setattr(shop_module, "load_packaged_table",
                        lambda name: (meta, marked) if name == PACKAGED_DOC_TOKENS else load_packaged_table(name))
    shop = WebShop.load(raw_dir, goals="synthetic", seed=233)
    assert [a for a, _ in shop.search("zzpackagedmarker")] == [asin]


# ------------------------------------------------------------------------------------------------ differing text
def test_product_with_altered_text_is_reported_and_falls_back(tmp_path, real_data_dir, caplog):
    folder = make_raw_dir(tmp_path / "altered", real_data_dir)
    products = json.loads((folder / "items_shuffle_1000.json").read_text())
    described, renamed, untouched = products[3], products[7], products[11]
    described["full_description"] += " zzaltered description"
    old_name = renamed["name"]
    renamed["name"] = "Zzrenamed Walnut Console Table"
    (folder / "items_shuffle_1000.json").write_text(json.dumps(products))

    with caplog.at_level(logging.INFO, logger=shop_module.__name__):
        shop = WebShop.load(folder, goals="synthetic", seed=233)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # one line per table
    token_warning, noun_warning = warnings
    assert "2 products' search document differs" in token_warning  # the new name is in the document too
    assert described["asin"] in token_warning and renamed["asin"] in token_warning
    assert "1 products' name differs" in noun_warning and renamed["asin"] in noun_warning
    assert shop.token_source.startswith("package data Lucene tokens for 998 of 1000 products")
    assert shop.noun_source.startswith("package data spaCy title nouns for 999 of 1000 products")

    # the altered products were analysed from their new text ...
    assert [a for a, _ in shop.search("zzaltered")] == [described["asin"]]
    assert [a for a, _ in shop.search("zzrenamed")] == [renamed["asin"]]
    new_document = search_document(shop.product_by_asin[described["asin"]])
    assert "zzalter" in analyze(new_document)
    # ... the renamed one's nouns are the fallback's, everyone else keeps the spaCy table's
    _, nouns = load_packaged_table(PACKAGED_TITLE_NOUNS)
    assert shop.title_nouns(renamed["name"]) == alphabetic_nouns(renamed["name"]) != nouns[renamed["asin"]][1]
    assert old_name != renamed["name"]
    assert shop.title_nouns(untouched["name"]) == nouns[untouched["asin"]][1]
    assert nouns[untouched["asin"]][1] != alphabetic_nouns(untouched["name"])  # so the line above can fail
