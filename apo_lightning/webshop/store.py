"""The on-disk catalog: processed products, title nouns, prices, goals and the search index of a large WebShop catalog,
built once from the raw files and then memory-mapped, so that loading takes seconds and memory holds only what is read.

Why: the original keeps every product as a Python dict and its Lucene index in a JVM (about 15 GB and 30-90 s to load
the full 1.18 M-product catalog). Here a catalog is read once, streaming (``catalog.iter_json_array``: one product in
memory at a time), and written to a cache folder as flat NumPy arrays and one blob of product JSON records. Opening it
maps the files (``numpy.load(mmap_mode="r")``); a product is decoded from its JSON record when it is first asked for
(and kept in a small LRU cache), a goal is built from its product when it is asked for (``goals.SyntheticGoals``), and
a query reads only the posting lists it needs (``search.SearchEngine``). Resident memory per product is a few dozen
bytes of arrays plus the pages that searches and episodes touch.

Everything is the same as the in-memory load (``WebShop.load`` without the cache): each record is processed by
``catalog.process_product``, tokens and title nouns come from the same sources in the same order of preference, prices
and goals are drawn from the same RNG calls in the same order, and the same search engine ranks; the tests compare the
two loads on the real 1k data and the golden fixtures.

Cache folder ``<cache_dir>/<goal kind>-<key[:16]>/`` (``key`` is :func:`catalog_key`: the raw files' SHA-256, the goal
kind and the format versions; the folder is built in a temporary sibling and renamed into place, so a reader never sees
a partial one, and concurrent builders keep the first that finishes):

* ``catalog_store.json``: the format version, the key, counts, and where tokens and nouns came from;
* ``products.bin`` + ``product_offsets.npy``: each processed product as ASCII JSON, one after another ((N + 1,) int64
  offsets); ``asins.npy`` (N,) bytes in file order; ``sorted_asins.npy`` and ``sorted_asin_rows.npy`` for lookups;
* ``pricing.npy`` (N, 2) float64 parsed prices (NaN second column for a single price);
* ``goal_counts.npy`` (N,) int64 synthetic goals per product (-1 without an instruction); ``goal_weights.npy`` (N,)
  float64; ``human_rows.npy`` (H,) int32 rows with human instruction records;
* ``noun_hashes.npy`` (M,) uint64 sorted, ``noun_offsets.npy`` (M + 1,) int64, ``nouns.bin``: the title-noun table by
  product name, each entry the JSON ``[name, [nouns]]``;
* ``index/``: the search index (``SearchEngine.save``);
* ``seed-<seed>/``: per catalog seed, ``prices.npy`` (N,) float64, and for synthetic goals ``price_uppers.npy`` (N,)
  float64, ``goal_rows.npy`` and ``goal_combinations.npy`` (num_goals,) int32 in goal (shuffled) order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..utils.files import atomic_directory, read_json
from ..utils.sequences import RowSequence
from .catalog import (
    PACKAGED_DOC_TOKENS,
    PACKAGED_TITLE_NOUNS,
    DataFiles,
    WebShopDataError,
    check_record,
    describe_packaged_use,
    is_kept,
    load_attribute_files,
    iter_json_array,
    load_packaged_table,
    process_product,
    sample_prices,
    search_document,
    text_hash,
)
from .goals import (
    SyntheticGoals,
    human_goals,
    option_combinations,
    shuffled_order,
    synthetic_goal_table,
    synthetic_goal_weights,
)
from .search import INDEX_FORMAT_VERSION, SearchEngine, SearchIndexBuilder, analyze

log = logging.getLogger(__name__)

#: Version of the files :func:`build_store` writes, part of the cache key: bump it whenever product processing, the
#: analyzer, the token or noun sources, or these files change, so that old folders are rebuilt.
STORE_FORMAT_VERSION = 1
MANIFEST_FILE = "catalog_store.json"
#: The environment variable naming the cache root when ``cache_dir`` is not given.
CACHE_ENV_VAR = "APO_WEBSHOP_CACHE"
#: The cache root otherwise, relative to the current directory (beside ``data/synthetic``, ``data/vstar``).
DEFAULT_CACHE_DIR = Path("data") / "webshop_cache"
#: Decoded products kept per store (an episode reads the same few products again and again).
PRODUCT_CACHE_SIZE = 4096
#: Products between two progress lines while building.
_LOG_EVERY = 100_000


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where catalog caches live: ``cache_dir``, else ``$APO_WEBSHOP_CACHE``, else ``data/webshop_cache``."""
    if cache_dir is not None and str(cache_dir) != "":
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_ENV_VAR, "")
    return Path(from_env).expanduser() if from_env else DEFAULT_CACHE_DIR


def _file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, read 16 MB at a time (about 1 GB/s)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def catalog_key(files: DataFiles, goal_kind: str) -> str:
    """The cache key of a catalog: SHA-256 (hex) over the name and SHA-256 of every data file ``files`` names, the
    package tables the load falls back on, the goal kind and the store and index format versions. Hashing reads every
    file once: O(total bytes).

    Raises:
        OSError: a file cannot be read.
    """
    parts: dict[str, Any] = {"store_format": STORE_FORMAT_VERSION, "index_format": INDEX_FORMAT_VERSION,
                             "goal_kind": goal_kind, "files": {}, "package": {}}
    for role in ("products", "attributes", "human_instructions", "doc_tokens", "title_nouns"):
        path = getattr(files, role)
        parts["files"][role] = None if path is None else [path.name, _file_digest(path)]
    for name in (PACKAGED_DOC_TOKENS, PACKAGED_TITLE_NOUNS):
        parts["package"][name] = hashlib.sha256(
            resources.files(__package__).joinpath("data", name).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("ascii")).hexdigest()


def _name_hash(name: str) -> int:
    """64-bit hash of a product name (its noun-table slot)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


# ------------------------------------------------------------------------------------------------ reading
def _map(path: Path) -> np.ndarray:
    """A saved array, memory-mapped read-only, as a plain ndarray view (np.memmap's slicing runs Python code)."""
    return np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))


class _Blob:
    """Variable-length byte records in one memory-mapped file: record i is ``data[offsets[i]:offsets[i + 1]]``."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self._data = data  # (B,) uint8
        self._offsets = offsets  # (R + 1,) int64

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        return self._data[self._offsets.item(i):self._offsets.item(i + 1)].tobytes()


def _open_blob(folder: Path, data_name: str, offsets_name: str) -> _Blob:
    offsets = _map(folder / offsets_name)
    size = (folder / data_name).stat().st_size
    data = np.asarray(np.memmap(folder / data_name, dtype=np.uint8, mode="r")) if size else np.zeros(0, np.uint8)
    return _Blob(data, offsets)


class NounTable:
    """Title nouns by product name (the reward's ``title_score``), read from a store: ``get(name)`` gives the noun
    list of the first product with that name that the data's noun table covers, as ``WebShop`` does in memory, or
    None. O(log M) per lookup."""

    def __init__(self, hashes: np.ndarray, records: _Blob) -> None:
        self._hashes = hashes  # (M,) uint64, sorted
        self._records = records  # M JSON records [name, nouns]

    def __len__(self) -> int:
        return len(self._hashes)

    def get(self, name: str, default: Any = None) -> Any:
        slot = np.uint64(_name_hash(name))
        i = int(np.searchsorted(self._hashes, slot))
        while i < len(self._hashes) and self._hashes[i] == slot:
            entry_name, nouns = json.loads(self._records[i])
            if entry_name == name:
                return nouns
            i += 1
        return default


class ProductStore(RowSequence):
    """A stored catalog's processed products, in file order, as a read-only sequence of dicts decoded on access.

    ``store[i]`` is the product dict ``catalog.process_product`` made (equal to the in-memory load's, keys in the same
    order); the last ``PRODUCT_CACHE_SIZE`` decoded products are kept, so the same dict comes back while it is cached.
    Treat the dicts as read-only, as the in-memory catalog's. Open with :func:`open_store`.

    Attributes:
        folder: the cache folder.
        manifest: the contents of ``catalog_store.json`` (counts, key, ``token_source``, ``noun_source``).
        by_asin: ASIN -> product (a read-only mapping over this store).
        nouns: the title-noun table (:class:`NounTable`).
    """

    def __init__(self, folder: Path, manifest: dict) -> None:
        self.folder = folder
        self.manifest = manifest
        self._records = _open_blob(folder, "products.bin", "product_offsets.npy")
        self._asins = _map(folder / "asins.npy")  # (N,) bytes
        self._sorted_asins = _map(folder / "sorted_asins.npy")  # (N,) bytes, ascending
        self._sorted_asin_rows = _map(folder / "sorted_asin_rows.npy")  # (N,) int32
        self.pricing = _map(folder / "pricing.npy")  # (N, 2) float64
        self.goal_counts = _map(folder / "goal_counts.npy")  # (N,) int64
        self.goal_weights = _map(folder / "goal_weights.npy")  # (N,) float64
        self.human_rows = _map(folder / "human_rows.npy")  # (H,) int32
        self.nouns = NounTable(_map(folder / "noun_hashes.npy"),
                               _open_blob(folder, "nouns.bin", "noun_offsets.npy"))
        self.by_asin = ProductsByAsin(self)
        self._decode = lru_cache(maxsize=PRODUCT_CACHE_SIZE)(self._decode_uncached)

    def __len__(self) -> int:
        return len(self._asins)

    def _item(self, i: int) -> dict:
        return self._decode(i)

    def _decode_uncached(self, i: int) -> dict:
        return json.loads(self._records[i])

    def __iter__(self) -> Iterator[dict]:
        for i in range(len(self)):
            yield self._decode(i)

    def asin(self, i: int) -> str:
        """The ASIN of row ``i``."""
        return self._asins[i].decode("utf-8", "surrogatepass")

    def row(self, asin: str) -> int | None:
        """The row of ``asin`` (as stored, case-sensitive), or None. O(log N)."""
        if not isinstance(asin, str):
            return None
        key = asin.encode("utf-8", "surrogatepass")
        if len(key) > self._asins.dtype.itemsize or not len(self):
            return None
        i = int(np.searchsorted(self._sorted_asins, key))
        if i < len(self) and self._sorted_asins[i] == key:
            return self._sorted_asin_rows.item(i)
        return None

    def search_engine(self) -> SearchEngine:
        """The catalog's search index, memory-mapped."""
        return SearchEngine.load(self.folder / "index")

    def seed_folder(self, seed: int) -> Path:
        """Where what depends on the catalog seed is kept: ``seed-<seed>/`` (:meth:`seed_tables`, and what callers
        derive from the seeded goals)."""
        return self.folder / f"seed-{seed}"

    def seed_tables(self, seed: int, goal_kind: str) -> dict[str, np.ndarray]:
        """The seed-dependent arrays (prices, and for synthetic goals the goal table), built on first use and kept
        in ``seed-<seed>/``: ``{"prices": (N,) float64}`` plus, for synthetic goals, ``price_uppers`` (N,) float64,
        ``goal_rows`` and ``goal_combinations`` (num_goals,) int32 in shuffled goal order.

        Raises:
            ValueError: synthetic goals and a product with an instruction but no ``instruction_attributes`` (the
                original asserts).
        """
        folder = self.seed_folder(seed)
        names = ("prices",) if goal_kind == "human" else ("prices", "price_uppers", "goal_rows", "goal_combinations")
        if not all((folder / f"{name}.npy").is_file() for name in names):
            tables = self._draw_seed_tables(seed, goal_kind)
            with atomic_directory(folder, replace=False) as tmp:
                for name, values in tables.items():
                    np.save(tmp / f"{name}.npy", values, allow_pickle=False)
        return {name: _map(folder / f"{name}.npy") for name in names}

    def draw_prices(self, rng: random.Random) -> list[float]:
        """Every product's price, drawn from ``rng`` as ``catalog.generate_product_prices`` draws them (a range price
        is ``rng.uniform(lo, hi)``, in file order)."""
        pricing = np.asarray(self.pricing)
        single = np.isnan(pricing[:, 1]).tolist()
        return sample_prices(((lo,) if one else (lo, hi) for (lo, hi), one in zip(pricing.tolist(), single)), rng)

    def _draw_seed_tables(self, seed: int, goal_kind: str) -> dict[str, np.ndarray]:
        """Prices, then synthetic goals' price ceilings, from ``random.Random(seed)`` in the original's order, then the
        seed shuffle of the goals (``WebShop.load``)."""
        rng = random.Random(seed)
        prices = self.draw_prices(rng)
        tables = {"prices": np.array(prices, dtype=np.float64)}
        if goal_kind == "human":
            return tables
        bad = self.manifest.get("instruction_without_attributes")
        if bad is not None:
            raise ValueError(f"product {bad} has an instruction but no instruction_attributes")
        counts = np.asarray(self.goal_counts)
        instructed = np.flatnonzero(counts >= 0)  # -1 marks products without an instruction
        uppers, rows, combinations = synthetic_goal_table(prices, instructed.tolist(), counts[instructed].tolist(),
                                                          rng)
        price_uppers = np.full(len(self), np.nan)
        price_uppers[instructed] = uppers
        order = shuffled_order(len(rows), seed)
        tables.update(price_uppers=price_uppers, goal_rows=rows[order], goal_combinations=combinations[order])
        return tables

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.folder}, {len(self)} products)"


class _ByAsin(Mapping):
    """ASIN -> ``self._value(row)`` over a :class:`ProductStore`'s rows (iteration in file order)."""

    def __init__(self, store: ProductStore) -> None:
        self._store = store

    def _value(self, row: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, asin: str) -> Any:
        row = self._store.row(asin)
        if row is None:
            raise KeyError(asin)
        return self._value(row)

    def __contains__(self, asin: object) -> bool:
        return self._store.row(asin) is not None  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return (self._store.asin(i) for i in range(len(self._store)))

    def __len__(self) -> int:
        return len(self._store)


class ProductsByAsin(_ByAsin):
    """ASIN -> product over a :class:`ProductStore` (iteration in file order)."""

    def _value(self, row: int) -> dict:
        return self._store[row]


class PriceTable(_ByAsin):
    """ASIN -> price in dollars over a :class:`ProductStore` and its per-seed prices (iteration in file order)."""

    def __init__(self, store: ProductStore, prices: np.ndarray) -> None:
        super().__init__(store)
        self._prices = prices  # (N,) float64

    def _value(self, row: int) -> float:
        return self._prices.item(row)


def store_goals(store: ProductStore, tables: Mapping[str, np.ndarray], goal_kind: str, seed: int) -> Sequence[dict]:
    """The goals of a stored catalog in seed order: :class:`goals.SyntheticGoals` over the goal table, or the human
    goals built at once (upstream's full catalog has about 12 k)."""
    if goal_kind == "synthetic":
        return SyntheticGoals(store, tables["goal_rows"], tables["goal_combinations"], tables["price_uppers"],
                              store.goal_weights)
    rng = random.Random(seed)
    store.draw_prices(rng)  # the same draws as the stored prices, so the ceilings below start from the same state
    prices = PriceTable(store, tables["prices"])
    goals = human_goals([store[row] for row in np.asarray(store.human_rows).tolist()], prices, rng)
    random.Random(seed).shuffle(goals)
    return goals


# ------------------------------------------------------------------------------------------------ building
class _LineIndex:
    """Byte offsets of the lines of a JSON-lines token file by their ``id``, so that one document's tokens can be
    read without holding the whole file (``search_doc_tokens.jsonl`` of the full catalog is several GB)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offsets: dict[str, int] = {}
        with open(path, "rb") as f:
            offset = 0
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        self._offsets[json.loads(line)["id"]] = offset
                    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
                        raise WebShopDataError(f'{path}:{n}: expected a JSON line {{"id": asin, "tokens": [...]}} '
                                               f"({e})") from e
                offset += len(line)
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()

    def __contains__(self, asin: str) -> bool:
        return asin in self._offsets

    def tokens(self, asin: str) -> list[str]:
        self._file.seek(self._offsets[asin])
        return list(json.loads(self._file.readline())["tokens"])

    def close(self) -> None:
        self._file.close()


def build_store(files: DataFiles, goal_kind: str, out: Path, key: str) -> None:
    """Read a catalog's raw files once and write its store into the (empty) folder ``out``.

    The products are streamed in file order and processed as ``catalog.load_products`` does; each kept product's
    search tokens come from the data's Lucene token file, else the package's 1k table when its text hash matches, else
    ``search.analyze`` (as ``WebShop.load``); the title-noun table from the data's noun file, else the package's.
    Time: O(products + tokens + postings log postings); memory: the attribute file, one product, and the index's
    postings while they are sorted.

    Raises:
        WebShopDataError: a data file is missing or malformed (named in the message).
    """
    started = time.monotonic()
    human = goal_kind == "human"
    attributes, human_attributes = load_attribute_files(files, human)
    lucene = _LineIndex(files.doc_tokens) if files.doc_tokens is not None else None
    packaged_tokens = load_packaged_table(PACKAGED_DOC_TOKENS)[1] if lucene is None else {}
    if files.title_nouns is not None:
        table = read_json(files.title_nouns, dict, "a JSON object {asin: [nouns]} (title_nouns format)",
                          WebShopDataError)
        noun_entries = {asin: (None, nouns) for asin, nouns in table.items() if not asin.startswith("_")}
    else:
        noun_entries = load_packaged_table(PACKAGED_TITLE_NOUNS)[1]

    builder = SearchIndexBuilder()
    seen: set[str] = set()
    asins: list[bytes] = []
    offsets = [0]
    pricing: list[tuple[float, float]] = []
    goal_counts: list[int] = []
    instructed_attributes: list[list[str]] = []
    human_rows: list[int] = []
    nouns_by_name: dict[str, list[str]] = {}
    token_counts = {"matched": 0, "differing": []}
    noun_counts = {"matched": 0, "differing": []}
    first_bad_instruction = None
    with open(out / "products.bin", "wb") as records:
        for index, raw in enumerate(iter_json_array(files.products, "a JSON list of raw product records "
                                                                    "(items_shuffle.json format)")):
            check_record(raw, files.products, index)
            if not is_kept(raw, seen):
                continue
            product = process_product(raw, attributes, human_attributes, human, files.products, index)
            asin = product["asin"]
            record = json.dumps(product, ensure_ascii=True).encode("ascii")
            records.write(record)
            offsets.append(offsets[-1] + len(record))
            asins.append(asin.encode("utf-8", "surrogatepass"))
            prices = product["pricing"]
            pricing.append((prices[0], prices[1] if len(prices) > 1 else float("nan")))
            if not human and product["instruction_text"] is not None:
                if not product["instruction_attributes"] and first_bad_instruction is None:
                    first_bad_instruction = asin
                goal_counts.append(option_combinations(product["options"]))
                instructed_attributes.append(product["instruction_attributes"] or [])
            else:
                goal_counts.append(-1)
            if "instructions" in product:
                human_rows.append(len(asins) - 1)

            if lucene is not None:
                if asin not in lucene:
                    raise WebShopDataError(f"{files.doc_tokens}: no tokens for product {asin}")
                tokens = lucene.tokens(asin)
            else:
                document = search_document(product)
                entry = packaged_tokens.get(asin)
                if entry is not None and entry[0] == text_hash(document):
                    tokens = entry[1]
                    token_counts["matched"] += 1
                else:
                    if entry is not None:
                        token_counts["differing"].append(asin)
                    tokens = analyze(document)
            builder.add(asin, tokens)

            entry = noun_entries.get(asin)
            if entry is not None:
                if entry[0] is None or entry[0] == text_hash(product["name"]):
                    nouns_by_name.setdefault(product["name"], entry[1])
                    noun_counts["matched"] += 1
                else:
                    noun_counts["differing"].append(asin)
            if len(asins) % _LOG_EVERY == 0:
                log.info("%s: %d products stored (%.0f s)", files.products, len(asins), time.monotonic() - started)
    if lucene is not None:
        lucene.close()
    if not asins:
        raise WebShopDataError(f"{files.products}: no products to store (every record was skipped or the list is "
                               "empty)")

    n = len(asins)
    np.save(out / "product_offsets.npy", np.array(offsets, dtype=np.int64))
    asin_array = np.array(asins, dtype=f"S{max(map(len, asins))}")
    np.save(out / "asins.npy", asin_array)
    by_asin = np.argsort(asin_array, kind="stable")
    np.save(out / "sorted_asins.npy", asin_array[by_asin])
    np.save(out / "sorted_asin_rows.npy", by_asin.astype(np.int32))
    np.save(out / "pricing.npy", np.array(pricing, dtype=np.float64).reshape(n, 2))
    counts = np.array(goal_counts, dtype=np.int64)
    np.save(out / "goal_counts.npy", counts)
    weights = np.zeros(n, dtype=np.float64)
    weights[counts >= 0] = synthetic_goal_weights(instructed_attributes, counts[counts >= 0].tolist())
    np.save(out / "goal_weights.npy", weights)
    np.save(out / "human_rows.npy", np.array(human_rows, dtype=np.int32))
    entries = sorted(((_name_hash(name), json.dumps([name, nouns], ensure_ascii=True).encode("ascii"))
                      for name, nouns in nouns_by_name.items()), key=lambda entry: entry[0])
    np.save(out / "noun_hashes.npy", np.array([h for h, _ in entries], dtype=np.uint64))
    np.save(out / "noun_offsets.npy", np.cumsum([0] + [len(r) for _, r in entries], dtype=np.int64))
    (out / "nouns.bin").write_bytes(b"".join(r for _, r in entries))
    del nouns_by_name, entries, attributes, human_attributes

    log.info("%s: %d products stored; building the search index (%.0f s)", files.products, n,
             time.monotonic() - started)
    builder.build().save(out / "index")

    if lucene is not None:
        token_source = f"token file {files.doc_tokens.name}"
    else:
        token_source = describe_packaged_use(files.products.parent, "Lucene tokens", "search document", n,
                                             token_counts["matched"], token_counts["differing"],
                                             "the project's analyzer (search.analyze)")
    if files.title_nouns is not None:
        noun_source = f"noun table {files.title_nouns.name}"
    elif noun_counts["matched"]:
        noun_source = describe_packaged_use(files.products.parent, "spaCy title nouns", "name", n,
                                            noun_counts["matched"], noun_counts["differing"],
                                            "alphabetic tokens of the name")
    else:
        noun_source = "fallback: alphabetic tokens of the name (no title-noun table in the data directory)"
    manifest = {"format_version": STORE_FORMAT_VERSION, "key": key, "goal_kind": goal_kind, "products": n,
                "synthetic_goals": int(counts[counts > 0].sum()), "human_products": len(human_rows),
                "token_source": token_source, "noun_source": noun_source,
                "instruction_without_attributes": first_bad_instruction,
                "files": {role: None if getattr(files, role) is None else str(getattr(files, role))
                          for role in ("products", "attributes", "human_instructions", "doc_tokens", "title_nouns")},
                "build_seconds": round(time.monotonic() - started, 1)}
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def open_store(files: DataFiles, goal_kind: str, cache_dir: str | os.PathLike | None = None) -> ProductStore:
    """The store of a catalog: opened from the cache, or built there first (once; see the module docstring).

    Args:
        files: the data directory's files (``catalog.DataFiles.find``).
        goal_kind: "synthetic" or "human" (the processed products differ: instruction fields).
        cache_dir: the cache root (:func:`cache_root`).

    Raises:
        WebShopDataError: a data file is missing or malformed.
        OSError: the cache root cannot be written (name another with ``cache_dir`` or ``$APO_WEBSHOP_CACHE``).
    """
    key = catalog_key(files, goal_kind)
    folder = cache_root(cache_dir) / f"{goal_kind}-{key[:16]}"
    manifest = _read_manifest(folder, key)
    if manifest is None:
        log.warning("building the on-disk catalog for %s in %s (once; later loads map it)", files.products, folder)
        # replace only a folder that is there but unreadable; two builders racing keep the first to finish
        with atomic_directory(folder, replace=folder.exists()) as tmp:
            build_store(files, goal_kind, tmp, key)
        manifest = _read_manifest(folder, key)
        if manifest is None:
            raise WebShopDataError(f"{folder}: the catalog store just built cannot be read back; delete the folder "
                                   "and load again")
    return ProductStore(folder, manifest)


def _read_manifest(folder: Path, key: str) -> dict | None:
    """The folder's manifest if it is a complete store of this key and format, else None."""
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("key") != key or \
            manifest.get("format_version") != STORE_FORMAT_VERSION:
        return None
    return manifest
