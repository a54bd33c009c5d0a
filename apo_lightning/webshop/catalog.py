"""Product catalog: reading WebShop's raw data files and processing them exactly as the original does.

Source: princeton-nlp/WebShop ``web_agent_site/engine/engine.py`` (``load_products``, ``clean_product_keys``,
``generate_product_prices``) at commit 64fa2a5c; docs/webshop.md, "What is reproduced". The processed product dicts
carry the same keys and values as the original's (``Title``, ``Description``, ``BulletPoints``, ``Price``,
``pricing``, ``options``, ``option_to_image``, ``Attributes``, ``Reviews``, ``Rating``, ``MainImage``, ...).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import random
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..utils.files import read_json

log = logging.getLogger(__name__)

#: Candidate file names, first found wins. The real 1k set ships the first name upstream; its reconstruction from the
#: Lucene index is the ``.reconstructed`` file (docs/webshop.md, "Where it differs from the original"); the synthetic
#: catalog writes the first. The full catalog (about 1.18 M products, upstream's ``setup.sh -d all``) is
#: ``items_shuffle.json`` with ``items_ins_v2.json``.
PRODUCT_FILES = ("items_shuffle_1000.json", "items_shuffle_1000.reconstructed.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
#: The attribute file that belongs with each product file, looked for first (a folder holding both sets pairs them).
PAIRED_ATTRIBUTE_FILE = {"items_shuffle.json": "items_ins_v2.json"}
HUMAN_INSTRUCTION_FILES = ("items_human_ins.json", "items_human_ins.subset_1000.json")
#: Optional: Lucene analyzer tokens of every search document (exact BM25 rankings) and the spaCy noun table.
DOC_TOKEN_FILES = ("search_doc_tokens.jsonl",)
TITLE_NOUN_FILES = ("title_nouns_en_core_web_sm.json", "title_nouns.json")
#: The same two tables for the real 1k set, shipped in the package (``apo_lightning/webshop/data``, built by
#: ``scripts/build_package_data.py``) and used for each product whose text hash matches when a data directory
#: lacks the files above. Lines ``{"id": asin, "text_hash": ..., "tokens" | "nouns": [...]}`` after a ``_meta`` line.
PACKAGED_DOC_TOKENS = "search_doc_tokens.jsonl.gz"
PACKAGED_TITLE_NOUNS = "title_nouns_en_core_web_sm.jsonl.gz"
TEXT_HASH_HEX_DIGITS = 16

#: Keys ``clean_product_keys`` deletes from every raw product (engine.py).
DROPPED_KEYS = (
    "product_information", "brand", "brand_url", "list_price", "availability_quantity", "availability_status",
    "total_reviews", "total_answered_questions", "seller_id", "seller_name", "fulfilled_by_amazon",
    "fast_track_message", "aplus_present", "small_description_old",
)
REQUIRED_PRODUCT_KEYS = (
    "asin", "name", "full_description", "pricing", "images", "product_category", "small_description",
    "customization_options", "category", "query",
)
HOW_TO_GET_DATA = (
    "Run `python -m apo_lightning.webshop download` (it fetches and verifies the WebShop 1k files into "
    "data/webshop_1k) and point --data-dir (or APO_WEBSHOP_DATA) at that folder, or omit --data-dir to use the "
    "generated synthetic catalog."
)


class WebShopDataError(ValueError):
    """A WebShop data file is missing or malformed. The message names the file and what was expected."""


@dataclass(frozen=True)
class DataFiles:
    """Resolved paths of one data directory's files; the optional ones are None when absent."""

    products: Path
    attributes: Path
    human_instructions: Path | None
    doc_tokens: Path | None
    title_nouns: Path | None

    @classmethod
    def find(cls, data_dir: str | Path) -> DataFiles:
        """Locate the files in ``data_dir``.

        Raises:
            WebShopDataError: the folder, the product file or the attribute file is missing.
        """
        data_dir = Path(data_dir)
        if not data_dir.is_dir():
            raise WebShopDataError(f"WebShop data directory {data_dir} does not exist. {HOW_TO_GET_DATA}")

        def first(names: tuple[str, ...], required: bool) -> Path | None:
            for name in names:
                if (data_dir / name).is_file():
                    return data_dir / name
            if required:
                raise WebShopDataError(
                    f"{data_dir} has none of {', '.join(names)} (the WebShop product/attribute file). "
                    f"{HOW_TO_GET_DATA}"
                )
            return None

        products = first(PRODUCT_FILES, True)
        paired = PAIRED_ATTRIBUTE_FILE.get(products.name)
        attribute_names = ATTRIBUTE_FILES if paired is None else (paired, *(n for n in ATTRIBUTE_FILES if n != paired))
        return cls(
            products=products,
            attributes=first(attribute_names, True),
            human_instructions=first(HUMAN_INSTRUCTION_FILES, False),
            doc_tokens=first(DOC_TOKEN_FILES, False),
            title_nouns=first(TITLE_NOUN_FILES, False),
        )


def parse_price(pricing: str | None) -> tuple[list[float], str]:
    """Parse a raw ``pricing`` string the way ``load_products`` does.

    Returns ``(pricing floats, Price display string)``: ``"$877.80"`` -> ``([877.8], "$877.8")``,
    ``"$19.99 to $27.99"`` -> ``([19.99, 27.99], "$19.99 to $27.99")``, missing/empty -> ``([100.0], "$100.0")``.

    Raises:
        ValueError: a non-empty string with no parseable ``$`` amount (the original crashes there too).
    """
    if not pricing:
        return [100.0], "$100.0"
    try:
        values = [float(Decimal(re.sub(r"[^\d.]", "", piece))) for piece in pricing.split("$")[1:]]
    except InvalidOperation as e:
        raise ValueError(f"unparseable pricing {pricing!r}") from e
    if not values:
        raise ValueError(f"pricing {pricing!r} has no '$' amount")
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def process_product(p: Any, attributes: Mapping, human_attributes: Mapping, human_goals: bool, source: Path,
                    index: int) -> dict:
    """Clean and enrich one raw product in place, as ``load_products`` does (``web_agent_site/engine/engine.py``).

    Args:
        p: one record of the product file.
        attributes: ``items_ins_v2`` dict ``{asin: {"attributes": [...], "instruction": ..., ...}}``.
        human_attributes: ``items_human_ins`` dict ``{asin: [instruction records]}`` (may be empty).
        human_goals: attach human ``instructions`` (True) or synthetic ``instruction_text`` (False).
        source: the product file, named in errors.
        index: the record's position in the file, named in errors.

    Returns:
        ``p``, processed (the caller skips ``'nan'``, over-long and repeated ASINs before calling this).

    Raises:
        WebShopDataError: the record is not a dict, lacks a required key, has an unparseable price, or (synthetic
            goals) its ASIN is missing from the attribute file.
    """
    check_record(p, source, index)
    for key in DROPPED_KEYS:
        p.pop(key, None)
    asin = p["asin"]
    p["Title"] = p["name"]
    p["Description"] = p["full_description"]
    p["Reviews"] = []  # review loading is commented out upstream: every product has none
    p["Rating"] = "N.A."
    small = p["small_description"]
    p["BulletPoints"] = small if isinstance(small, list) else [small]
    try:
        p["pricing"], p["Price"] = parse_price(p.get("pricing"))
    except ValueError as e:
        raise WebShopDataError(f"{source}: product {asin}: {e}; expected '$X' or '$X to $Y'") from e

    options: dict[str, list[str]] = {}
    option_to_image: dict[str, Any] = {}
    if p["customization_options"]:
        for option_name, contents in p["customization_options"].items():
            if contents is None:
                continue
            values = []
            for content in contents:
                value = content["value"].strip().replace("/", " | ").lower()
                values.append(value)
                option_to_image[value] = content.get("image", None)
            options[option_name.lower()] = values
    p["options"] = options
    p["option_to_image"] = option_to_image

    attrs = attributes.get(asin, {})
    p["Attributes"] = attrs["attributes"] if "attributes" in attrs else ["DUMMY_ATTR"]
    if human_goals:
        if asin in human_attributes:
            p["instructions"] = human_attributes[asin]
    else:
        if asin not in attributes:
            raise WebShopDataError(
                f"{source}: product {asin} is missing from the attribute file (items_ins_v2); "
                "synthetic goals need an entry for every product"
            )
        p["instruction_text"] = attrs.get("instruction", None)
        p["instruction_attributes"] = attrs.get("instruction_attributes", None)
    p["MainImage"] = p["images"][0] if p["images"] else None
    p["query"] = p["query"].lower().strip()
    return p


def check_record(p: Any, source: Path, index: int) -> None:
    """Raise ``WebShopDataError`` (naming ``source`` and the record) unless ``p`` is a dict with every key in
    ``REQUIRED_PRODUCT_KEYS``."""
    if not isinstance(p, dict):
        raise WebShopDataError(f"{source}: record {index} is a {type(p).__name__}; expected a product dict")
    missing = [k for k in REQUIRED_PRODUCT_KEYS if k not in p]
    if missing:
        raise WebShopDataError(f"{source}: product {index} ({p.get('asin')!r}) lacks the keys {missing}")


def is_kept(p: dict, seen: set[str]) -> bool:
    """Whether ``load_products`` keeps a raw record (checked with :func:`check_record`): its ASIN is not
    ``'nan'``, at most 10 characters and not seen before (the first occurrence wins). A kept ASIN joins ``seen``."""
    asin = p["asin"]
    if asin == "nan" or len(asin) > 10 or asin in seen:
        return False
    seen.add(asin)
    return True


def process_products(
    raw_products: Iterable, attributes: Mapping, human_attributes: Mapping, human_goals: bool, source: Path
) -> list[dict]:
    """Clean and enrich raw products in file order, as ``load_products`` does (``web_agent_site/engine/engine.py``).

    Args:
        raw_products: the product file's records (modified in place, like the original).
        attributes: ``items_ins_v2`` dict ``{asin: {"attributes": [...], "instruction": ..., ...}}``.
        human_attributes: ``items_human_ins`` dict ``{asin: [instruction records]}`` (may be empty).
        human_goals: attach human ``instructions`` (True) or synthetic ``instruction_text`` (False).
        source: the product file, named in errors.

    Returns:
        The kept products (first occurrence of each ASIN; ``'nan'`` and over-long ASINs skipped).

    Raises:
        WebShopDataError: a record lacks a required key, has an unparseable price, or (synthetic goals) its ASIN
            is missing from the attribute file.
    """
    seen: set[str] = set()
    products = []
    for i, p in enumerate(raw_products):
        check_record(p, source, i)
        if is_kept(p, seen):
            products.append(process_product(p, attributes, human_attributes, human_goals, source, i))
    return products


def iter_json_array(path: Path, what: str, chunk_chars: int = 1 << 24) -> Iterator[Any]:
    """The elements of a file whose top level is a JSON list, one at a time, reading ``chunk_chars`` characters at
    a time: memory holds one chunk and one element, not the whole file (the full ``items_shuffle.json`` is about
    5 GB of text, and tens of GB once parsed whole).

    Args:
        path: a UTF-8 JSON file.
        what: what the file should hold, for error messages.
        chunk_chars: characters read per refill (a larger element is read across several refills).

    Raises:
        WebShopDataError: the file is not UTF-8 JSON, or its top level is not a list (the message names the file).
    """
    decoder = json.JSONDecoder()
    whitespace = re.compile(r"[ \t\n\r]*")
    try:
        with open(path, encoding="utf-8") as f:
            buffer, pos, at_end = "", 0, False

            def refill() -> None:  # keep the unread tail and append the next chunk
                nonlocal buffer, pos, at_end
                more = f.read(chunk_chars)
                at_end = not more
                buffer, pos = buffer[pos:] + more, 0

            def next_char() -> str:  # the next non-blank character ("" at the end of the file), not consumed
                nonlocal pos
                while True:
                    pos = whitespace.match(buffer, pos).end()
                    if pos < len(buffer) or at_end:
                        return buffer[pos:pos + 1]
                    refill()

            if next_char() != "[":
                raise WebShopDataError(f"{path}: top level is not a JSON list; expected {what}")
            pos += 1
            first = True
            while True:
                char = next_char()
                if char == "]":
                    return
                if char == "":
                    raise WebShopDataError(f"{path}: the file ends before the list's closing ']' (is it complete?); "
                                           f"expected {what}")
                if not first:
                    if char != ",":
                        raise WebShopDataError(f"{path}: expected ',' or ']' between list elements, found "
                                               f"{buffer[pos:pos + 40]!r}; expected {what}")
                    pos += 1
                    next_char()
                first = False
                while True:  # decode one element, reading more until it is complete
                    try:
                        element, end = decoder.raw_decode(buffer, pos)
                        # complete once a delimiter follows: a number cut by the chunk end ("-3." of "-3.25") parses
                        if at_end or (end < len(buffer) and buffer[end] in " \t\n\r,]"):
                            break
                    except json.JSONDecodeError:
                        if at_end:
                            raise
                    refill()
                pos = end
                yield element
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WebShopDataError(f"{path}: cannot read it as JSON ({e}); expected {what}") from e


def sample_prices(pricings: Iterable[Sequence[float]], rng: random.Random) -> list[float]:
    """Each product's price from its parsed ``pricing``: the single price, 100.0 when none, or
    ``rng.uniform(lo, hi)`` for a range, drawn in product order.

    Source: ``generate_product_prices`` (engine.py). ``rng`` plays the part of the global ``random`` module, so
    a ``random.Random(233)`` reproduces the golden prices.
    """
    prices = []
    for pricing in pricings:
        if not pricing:
            prices.append(100.0)
        elif len(pricing) == 1:
            prices.append(pricing[0])
        else:
            prices.append(rng.uniform(*pricing[:2]))
    return prices


def generate_product_prices(products: list[dict], rng: random.Random) -> dict[str, float]:
    """ASIN -> price (:func:`sample_prices`), in product order."""
    return dict(zip((p["asin"] for p in products), sample_prices((p["pricing"] for p in products), rng)))


def load_products(files: DataFiles, human_goals: bool) -> list[dict]:
    """Read and process the product, attribute and human-instruction files of one data directory.

    Raises:
        WebShopDataError: a file is malformed (the message names it and what is expected).
    """
    raw = read_json(files.products, list, "a JSON list of raw product records (items_shuffle_1000.json format)",
                    WebShopDataError)
    attributes, human = load_attribute_files(files, human_goals)
    return process_products(raw, attributes, human, human_goals, files.products)


def load_attribute_files(files: DataFiles, human_goals: bool) -> tuple[dict, dict]:
    """Read the attribute file and the human-instruction file (``{}`` when the data has none) of a data directory.

    Raises:
        WebShopDataError: a file is malformed, or ``human_goals`` and there is no human-instruction file.
    """
    attributes = read_json(files.attributes, dict, 'a JSON object {asin: {"attributes": [...], ...}}',
                           WebShopDataError)
    human: dict = {}
    if files.human_instructions is not None:
        human = read_json(files.human_instructions, dict, "a JSON object {asin: [instruction records]}",
                          WebShopDataError)
    elif human_goals:
        raise WebShopDataError(
            f"{files.products.parent} has none of {', '.join(HUMAN_INSTRUCTION_FILES)}, which human goals need"
        )
    return attributes, human


def load_doc_tokens(path: Path) -> dict[str, list[str]]:
    """Read ``search_doc_tokens.jsonl`` (lines ``{"id": asin, "tokens": [...]}``) into ASIN -> tokens.

    Raises:
        WebShopDataError: a line is not JSON or lacks ``id``/``tokens``.
    """
    tokens = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                tokens[record["id"]] = list(record["tokens"])
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise WebShopDataError(f'{path}:{n}: expected a JSON line {{"id": asin, "tokens": [...]}} ({e})')
    return tokens


def search_document(product: dict) -> str:
    """The indexed text of a product: ``lower(Title + ' ' + Description + ' ' + BulletPoints[0] + ' ' + options)``.

    Source: ``search_engine/convert_product_file_format.py``; docs/webshop.md, "What is reproduced".
    """
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullet = product["BulletPoints"][0] if product["BulletPoints"] else ""
    return f"{product['Title']} {product['Description']} {bullet} {option_text}".lower()


# ------------------------------------------------------------------------------------------------ package data
def text_hash(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of ``text``'s UTF-8 bytes.

    A packaged token or noun list carries the hash of the text it was computed from (the search document for
    tokens, the product name for nouns), so a product whose text differs from the 1k set's is detected.
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:TEXT_HASH_HEX_DIGITS]


@lru_cache(maxsize=None)
def load_packaged_table(file_name: str) -> tuple[dict, dict[str, tuple[str, list[str]]]]:
    """Read a packaged table from ``apo_lightning/webshop/data``: ``(meta, {asin: (text_hash, values)})``.

    The values are the record's ``tokens`` or ``nouns``. Cached: the tables are read once per process (treat the
    result as read-only).

    Raises:
        WebShopDataError: the file is missing from the installed package or malformed (reinstall the package).
    """
    path = resources.files(__package__).joinpath("data", file_name)
    meta: dict = {}
    table: dict[str, tuple[str, list[str]]] = {}
    try:
        with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                record = json.loads(line)
                if "_meta" in record:
                    meta = record["_meta"]
                    continue
                values = record["tokens"] if "tokens" in record else record["nouns"]
                table[record["id"]] = (record["text_hash"], list(values))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise WebShopDataError(f"package data {path} is missing or malformed ({e}); reinstall apo_lightning "
                               "(pip install -e .) or rebuild it with scripts/build_package_data.py") from e
    return meta, table


def match_packaged(table: Mapping[str, tuple[str, list[str]]], texts: Mapping[str, str]
                   ) -> tuple[dict[str, list[str]], list[str]]:
    """Split products by whether a packaged entry applies to them.

    Args:
        table: ``{asin: (text_hash, values)}`` from :func:`load_packaged_table`.
        texts: ``{asin: text}``, the text the values are computed from (``search_document(product)`` for tokens,
            ``product["name"]`` for nouns).

    Returns:
        ``(matched, differing)``: ``{asin: values}`` for the products whose text hash equals the packaged one, and
        the ASINs (in ``texts`` order) that the table has but whose text differs. Products the table does not
        have are in neither.
    """
    matched, differing = {}, []
    for asin, text in texts.items():
        entry = table.get(asin)
        if entry is None:
            continue
        if entry[0] == text_hash(text):
            matched[asin] = entry[1]
        else:
            differing.append(asin)
    return matched, differing


def describe_packaged_use(data_dir: str | Path, what: str, text: str, total: int, matched: int,
                          differing: Sequence[str], fallback: str) -> str:
    """Describe (and log) how much of a catalog a package table covers; warn about products whose text differs.

    Args:
        data_dir: the data directory, named in the log.
        what: the table ("Lucene tokens", "spaCy title nouns").
        text: the text its entries were computed from ("search document", "name").
        total: products in the catalog.
        matched: products the table covered (same text hash).
        differing: ASINs the table has but whose text differs.
        fallback: what the other products use instead.

    Returns:
        ``fallback`` when the table knows none of the products (e.g. a synthetic catalog), else
        ``"package data {what} for {matched} of {total} products, {fallback} for the rest"``.
    """
    if not matched and not differing:
        return fallback
    source = f"package data {what} for {matched} of {total} products, {fallback} for the rest"
    if differing:
        log.warning("%s: %d products' %s differs from the text the packaged %s were computed from (e.g. %s); "
                    "they use %s instead, which may not reproduce the original WebShop exactly",
                    data_dir, len(differing), text, what, ", ".join(differing[:5]), fallback)
    else:
        log.info("%s: %s", data_dir, source)
    return source
