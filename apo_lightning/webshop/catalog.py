"""Product catalog: reading WebShop's raw data files and processing them exactly as the original does.

Source: princeton-nlp/WebShop ``web_agent_site/engine/engine.py`` (``load_products``, ``clean_product_keys``,
``generate_product_prices``) at commit 64fa2a5c; WEBSHOP_SPEC.md §1. The processed product dicts carry the same
keys and values as the original's (``Title``, ``Description``, ``BulletPoints``, ``Price``, ``pricing``,
``options``, ``option_to_image``, ``Attributes``, ``Reviews``, ``Rating``, ``MainImage``, ...).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ..utils.files import read_json

#: Candidate file names, first found wins. The real 1k set ships the first name upstream; the shared copy of it
#: is the ``.reconstructed`` file (see the data folder's SOURCE.md); the synthetic catalog writes the first.
PRODUCT_FILES = ("items_shuffle_1000.json", "items_shuffle_1000.reconstructed.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
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

        return cls(
            products=first(PRODUCT_FILES, True),
            attributes=first(ATTRIBUTE_FILES, True),
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


def process_products(
    raw_products: list[dict], attributes: dict, human_attributes: dict, human_goals: bool, source: Path
) -> list[dict]:
    """Clean and enrich raw products in file order, as ``load_products`` does (WEBSHOP_SPEC.md §1 steps 1–4).

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
    products, seen = [], set()
    for i, p in enumerate(raw_products):
        if not isinstance(p, dict):
            raise WebShopDataError(f"{source}: record {i} is a {type(p).__name__}; expected a product dict")
        missing = [k for k in REQUIRED_PRODUCT_KEYS if k not in p]
        if missing:
            raise WebShopDataError(f"{source}: product {i} ({p.get('asin')!r}) lacks the keys {missing}")
        for key in DROPPED_KEYS:
            p.pop(key, None)
        asin = p["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)

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
        products.append(p)
    return products


def generate_product_prices(products: list[dict], rng: random.Random) -> dict[str, float]:
    """ASIN -> price: the single price, 100.0 when none, or ``rng.uniform(lo, hi)`` for a range.

    Source: ``generate_product_prices`` (engine.py). ``rng`` plays the part of the global ``random`` module, so
    a ``random.Random(233)`` reproduces the golden prices.
    """
    prices = {}
    for p in products:
        pricing = p["pricing"]
        if not pricing:
            prices[p["asin"]] = 100.0
        elif len(pricing) == 1:
            prices[p["asin"]] = pricing[0]
        else:
            prices[p["asin"]] = rng.uniform(*pricing[:2])
    return prices


def load_products(files: DataFiles, human_goals: bool) -> list[dict]:
    """Read and process the product, attribute and human-instruction files of one data directory.

    Raises:
        WebShopDataError: a file is malformed (the message names it and what is expected).
    """
    raw = read_json(files.products, list, "a JSON list of raw product records (items_shuffle_1000.json format)",
                    WebShopDataError)
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
    return process_products(raw, attributes, human, human_goals, files.products)


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

    Source: ``search_engine/convert_product_file_format.py``; WEBSHOP_SPEC.md §4.5.
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
