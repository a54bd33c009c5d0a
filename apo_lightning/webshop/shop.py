"""``WebShop``: one loaded catalog with its prices, goals, search engine and reward — shared by many envs.

This plays the part of the original's ``SimServer`` minus the per-session state (that lives in
``WebShopEnv``): ``load_products`` + ``generate_product_prices`` + ``get_goals`` + the seed-233 shuffle +
``init_search_engine`` (``web_agent_site/envs/web_agent_text_env.py``; docs/webshop.md, "What is reproduced").
"""

from __future__ import annotations

import copy
import logging
import os
import random
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from ..utils.files import read_json
from .catalog import (
    PACKAGED_DOC_TOKENS,
    PACKAGED_TITLE_NOUNS,
    DataFiles,
    WebShopDataError,
    describe_packaged_use,
    generate_product_prices,
    load_doc_tokens,
    load_packaged_table,
    load_products,
    match_packaged,
    search_document,
)
from .goals import human_goals, split_range, synthetic_goals
from .reward import alphabetic_nouns, get_reward
from .search import SearchEngine, analyze
from .store import NounTable, PriceTable, ProductStore, open_store, store_goals

log = logging.getLogger(__name__)

#: Where the embedded default (the synthetic catalog) is generated when no data directory is given.
DEFAULT_SYNTHETIC_DIR = Path("data") / "synthetic" / "seed0"
SEARCH_RETURN_N = 50  # engine.py: top-50 hits per query
#: ``WebShop.load(cache=None)`` stores a catalog on disk (``store``) when its product file has at least this many bytes
#: (about 40 k products); smaller ones load into memory, which is faster for them. Both give the same shop.
LARGE_CATALOG_BYTES = 64 << 20
SPECIAL_PREFIXES = ("<r>", "<a>", "<c>", "<q>")


class WebShop:
    """A loaded WebShop catalog.

    Attributes:
        products: processed product dicts in file order: a list, or for a catalog stored on disk a
            ``store.ProductStore`` (a read-only sequence that decodes each product when it is read).
        product_by_asin: ASIN -> processed product (a dict, or a read-only mapping over the store).
        prices: ASIN -> price in dollars (range prices sampled with the seeded RNG).
        goals: the goal dicts in seed order (index i is goal i; splits are index ranges): a list, or for a stored
            catalog with synthetic goals a ``goals.SyntheticGoals`` that builds each goal when it is read.
        data_dir: the folder the files were read from.
        goal_kind: "synthetic" or "human".
        noun_source: where title nouns come from ("spacy table: <file>", the package data, or the fallback).
        token_source: where the search documents' tokens come from (the data directory's Lucene token file, the
            package data, or the project's analyzer).
    """

    def __init__(
        self,
        products: Sequence[dict],
        prices: Mapping[str, float],
        goals: Sequence[dict],
        search_engine: SearchEngine,
        title_nouns: Mapping[str, list[str]] | NounTable | None,
        data_dir: Path,
        goal_kind: str,
        seed: int,
        noun_source: str,
        special_queries: bool = False,
        token_source: str = "",
    ):
        self.products = products
        self.product_by_asin = products.by_asin if isinstance(products, ProductStore) else \
            {p["asin"]: p for p in products}
        self.prices = prices
        self.goals = goals
        self.search_engine = search_engine
        self.data_dir = data_dir
        self.goal_kind = goal_kind
        self.seed = seed
        self.noun_source = noun_source
        self.token_source = token_source
        self.special_queries = special_queries
        # title nouns by product *name*: both names in the reward formula are catalog product names.
        self._nouns_by_name: dict[str, list[str]] | NounTable = {}
        if isinstance(title_nouns, NounTable):  # a stored catalog's table, already by name
            self._nouns_by_name = title_nouns
        elif title_nouns is not None:
            for p in products:
                if p["asin"] in title_nouns:
                    self._nouns_by_name.setdefault(p["name"], title_nouns[p["asin"]])
        self._cached_search = lru_cache(maxsize=8192)(self._search_uncached)
        self._special_rng = random.Random(seed)

    @classmethod
    def load(
        cls,
        data_dir: str | Path | None = None,
        goals: str = "synthetic",
        seed: int = 233,
        special_queries: bool = False,
        cache: bool | None = None,
        cache_dir: str | os.PathLike | None = None,
    ) -> WebShop:
        """Load a data directory (or generate/reuse the synthetic catalog when ``data_dir`` is None).

        Args:
            data_dir: folder with the raw WebShop files (see ``catalog.DataFiles``); None = the embedded default,
                the synthetic catalog under ``data/synthetic/seed0`` (generated on first use). Without
                ``search_doc_tokens.jsonl`` or a title-noun table there, the package's tables for the real 1k set
                are used for every product whose text matches (``catalog.PACKAGED_DOC_TOKENS``,
                ``PACKAGED_TITLE_NOUNS``); products whose text differs are logged in one warning per table and
                fall back to ``search.analyze`` / alphabetic nouns (see ``token_source`` and ``noun_source``).
            goals: "synthetic" (one goal per option combination of instructed products; RAGEN / verl-agent) or
                "human" (the human instruction records; the paper's setting).
            seed: seeds range prices and price ceilings, and shuffles the goals. 233 reproduces the original
                (``random.seed(233)`` before loading and again before the shuffle).
            special_queries: honour the original's debug prefixes ``<r>``/``<c>``/``<q>`` in search (off: they
                are ordinary words, so an agent cannot list a whole category).
            cache: keep the catalog on disk (``store``: built once from the raw files into a folder keyed by their
                SHA-256, then memory-mapped: the full catalog loads in seconds and holds little memory), or load it
                into memory (False). None: on disk when the product file has at least ``LARGE_CATALOG_BYTES``. The
                shop is the same either way (products, prices, goals, rankings and rewards).
            cache_dir: the cache root for ``cache``: None = ``$APO_WEBSHOP_CACHE``, else ``data/webshop_cache`` in
                the current directory.

        Raises:
            WebShopDataError: a missing or malformed data file (named in the message).
            ValueError: ``goals`` is not "synthetic" or "human".
            OSError: the cache folder cannot be written (name another with ``cache_dir`` or ``$APO_WEBSHOP_CACHE``).
        """
        if goals not in ("synthetic", "human"):
            raise ValueError(f"goals must be 'synthetic' or 'human', got {goals!r}")
        if data_dir is None:
            from .synthetic import ensure_catalog

            data_dir = ensure_catalog(DEFAULT_SYNTHETIC_DIR)
        files = DataFiles.find(data_dir)
        if cache or (cache is None and files.products.stat().st_size >= LARGE_CATALOG_BYTES):
            store = open_store(files, goals, cache_dir)
            tables = store.seed_tables(seed, goals)
            return cls(store, PriceTable(store, tables["prices"]), store_goals(store, tables, goals, seed),
                       store.search_engine(), store.nouns, Path(data_dir), goals, seed,
                       store.manifest["noun_source"], special_queries, store.manifest["token_source"])
        rng = random.Random(seed)
        products = load_products(files, human_goals=(goals == "human"))
        prices = generate_product_prices(products, rng)
        goal_list = (human_goals if goals == "human" else synthetic_goals)(products, prices, rng)
        random.Random(seed).shuffle(goal_list)

        asins = [p["asin"] for p in products]
        if files.doc_tokens is not None:
            tokens = load_doc_tokens(files.doc_tokens)
            missing = [a for a in asins if a not in tokens]
            if missing:
                raise WebShopDataError(f"{files.doc_tokens}: no tokens for {len(missing)} products, e.g. {missing[:3]}")
            engine = SearchEngine(asins, [tokens[a] for a in asins])
            token_source = f"token file {files.doc_tokens.name}"
        else:  # the packaged Lucene tokens where the document text matches, the project's analyzer elsewhere
            documents = {p["asin"]: search_document(p) for p in products}
            packaged, differing = match_packaged(load_packaged_table(PACKAGED_DOC_TOKENS)[1], documents)
            engine = SearchEngine(asins, [packaged[a] if a in packaged else analyze(documents[a]) for a in asins])
            token_source = describe_packaged_use(data_dir, "Lucene tokens", "search document", len(asins),
                                                 len(packaged), differing, "the project's analyzer (search.analyze)")

        title_nouns = None
        noun_source = "fallback: alphabetic tokens of the name (no title-noun table in the data directory)"
        if files.title_nouns is not None:
            table = read_json(files.title_nouns, dict, "a JSON object {asin: [nouns]} (title_nouns format)",
                              WebShopDataError)
            title_nouns = {k: v for k, v in table.items() if not k.startswith("_")}
            noun_source = f"noun table {files.title_nouns.name}"
        else:
            names = {p["asin"]: p["name"] for p in products}
            title_nouns, differing = match_packaged(load_packaged_table(PACKAGED_TITLE_NOUNS)[1], names)
            if title_nouns:
                noun_source = describe_packaged_use(data_dir, "spaCy title nouns", "name", len(names),
                                                    len(title_nouns), differing, "alphabetic tokens of the name")
            else:
                log.warning("%s has no title-noun table; title_score uses %s", data_dir, noun_source)
                title_nouns = None
        return cls(products, prices, goal_list, engine, title_nouns, Path(data_dir), goals, seed, noun_source,
                   special_queries, token_source)

    def with_goals(self, goals: list[dict]) -> WebShop:
        """This catalog with another goal list (e.g. reworded instructions, ``wording``); products, prices, the
        search engine and its cache are shared, not copied."""
        other = copy.copy(self)
        other.goals = goals
        return other

    # ------------------------------------------------------------------------------------------------ search
    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[tuple[str, float]]:
        """BM25 top-``k`` hits for ``query`` as ``[(ASIN, score), ...]``, best first (Lucene ranking, §4.5)."""
        return list(self._cached_search(query, k))

    def _search_uncached(self, query: str, k: int) -> tuple[tuple[str, float], ...]:
        return tuple(self.search_engine.search(query, k))

    def search_products(self, keywords: list[str]) -> Sequence[dict]:
        """The products a ``search[...]`` action lists, in rank order (engine.py ``get_top_n_product_from_keywords``).

        A sequence whose products are looked up when they are read: a results page reads the 10 it shows of the 50
        hits, and in a stored catalog each product read may be decoded.

        With ``special_queries`` the original's prefixes work: ``<r>`` 50 random products, ``<c> cat`` every
        product of a category, ``<q> query`` every product with that query (``<a>`` crashed upstream; here it
        returns nothing).
        """
        if self.special_queries and keywords and keywords[0] in SPECIAL_PREFIXES:
            head, rest = keywords[0], keywords[1:]
            if head == "<r>":
                return self._special_rng.sample(self.products, k=min(SEARCH_RETURN_N, len(self.products)))
            if head == "<c>" and rest:
                return [p for p in self.products if p["category"] == rest[0].strip()]
            if head == "<q>":
                query = " ".join(rest).strip()
                return [p for p in self.products if p["query"] == query]
            return []
        hits = self._cached_search(" ".join(keywords), SEARCH_RETURN_N)
        return _HitProducts([asin for asin, _ in hits], self.product_by_asin)

    # ------------------------------------------------------------------------------------------------ reward
    def title_nouns(self, name: str) -> list[str]:
        """Title nouns of a product name: the spaCy table when the data has one, else alphabetic tokens."""
        nouns = self._nouns_by_name.get(name)
        return nouns if nouns is not None else alphabetic_nouns(name)

    def reward(self, goal: Mapping, asin: str, options: Mapping[str, str]) -> tuple[float, dict]:
        """WebShop score (0…1) and verbose info for buying ``asin`` with ``options`` selected (§5).

        Raises:
            KeyError: ``asin`` is not in the catalog.
        """
        product = self.product_by_asin[asin]
        return get_reward(product, goal, self.prices[asin], options,
                          self.title_nouns(product["name"]), self.title_nouns(goal["name"]))

    # ------------------------------------------------------------------------------------------------ splits
    def split(self, name: str) -> range:
        """Goal indices of split ``name``: test [0, 500), val [500, 1500), train [1500, N)."""
        return split_range(name, len(self.goals))

    def __repr__(self) -> str:
        return (f"WebShop({self.data_dir}, {len(self.products)} products, {len(self.goals)} {self.goal_kind} goals, "
                f"seed={self.seed})")


class _HitProducts(Sequence):
    """Search hits as products, each looked up in ``by_asin`` when it is read (an index or a slice)."""

    def __init__(self, asins: list[str], by_asin: Mapping[str, dict]) -> None:
        self._asins = asins
        self._by_asin = by_asin

    def __len__(self) -> int:
        return len(self._asins)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._by_asin[asin] for asin in self._asins[i]]
        return self._by_asin[self._asins[i]]
