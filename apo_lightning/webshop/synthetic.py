"""Deterministic synthetic WebShop catalog: the project's embedded default data set.

When no real WebShop data is present, the CLI trains and evaluates on a catalog generated here. The files have
exactly the raw formats of the real 1k set (docs/webshop.md, "What is reproduced"), so the loader,
the goal generator, BM25 search and the reward run on them unchanged:

* ``items_shuffle_1000.json``: a list of raw product records (name, full_description, pricing, images,
  product_category, average_rating, small_description, customization_options, asin, category, query, page);
* ``items_ins_v2_1000.json``: ``{asin: {"attributes": [...]}}`` for every product, plus ``"instruction"`` and a
  non-empty ``"instruction_attributes"`` subset for half of them (synthetic goals);
* ``items_human_ins.json``: ``{asin: [records]}`` in the human-instruction format, for a few dozen products;
* ``title_nouns.json``: ``{"_meta": {...}, asin: [nouns of the name]}``, the table the reward's title_score reads;
* ``SOURCE.md`` (what the folder is) and ``catalog.json`` (generator version, seed, size and file hashes, which
  ``ensure_catalog`` checks).

Products are composed from per-category word tables (product types, made-up brands, attributes, option values),
which are package data (``data/synthetic_vocabulary.json``, read by :func:`vocabulary`), so everything a goal needs
is known by construction: the title nouns, which attributes a product has, and option values that the reward's
colour normalisation maps onto one of their own words (so the target product with the goal's options always reaches
reward 1). The same seed gives byte-identical files; editing the word tables changes them (bump
``GENERATOR_VERSION``).

    python -m apo_lightning.webshop.synthetic --out data/synthetic/seed0 --seed 0 --num-products 600
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import re
import string
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Container

from ..utils.files import atomic_write_bytes
from .catalog import WebShopDataError

log = logging.getLogger(__name__)

#: The generator's name as recorded in the files (not ``__name__``, which is "__main__" under ``python -m``).
GENERATOR = "apo_lightning.webshop.synthetic"
#: Bump whenever the output for a given (seed, num_products) changes, so ``ensure_catalog`` regenerates old folders.
GENERATOR_VERSION = 2

PRODUCTS_FILE = "items_shuffle_1000.json"
ATTRIBUTES_FILE = "items_ins_v2_1000.json"
HUMAN_INSTRUCTIONS_FILE = "items_human_ins.json"
TITLE_NOUNS_FILE = "title_nouns.json"
SOURCE_FILE = "SOURCE.md"
META_FILE = "catalog.json"
#: The data files, in the order they are written; ``catalog.json`` is written last, after all of them.
DATA_FILES = (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_INSTRUCTIONS_FILE, TITLE_NOUNS_FILE, SOURCE_FILE)

#: Fraction of products that carry a synthetic instruction (the real 1k set: 415 / 1000).
INSTRUCTED_FRACTION = 0.5
#: Relative chance of carrying an instruction, by number of option names (real 1k set: 32%, 49%, 60%, 92% of
#: the products with 0, 1, 2, 3 options are instructed).
INSTRUCTION_WEIGHT_BY_OPTIONS = {0: 1.0, 1: 1.6, 2: 2.2, 3: 4.0}
#: How many products get human-style instruction records, and how many of those get a second record.
NUM_HUMAN_PRODUCTS = 36
NUM_HUMAN_SECOND_RECORDS = 6
#: Second records with empty ``instruction_attributes`` (the goal code skips them; <= NUM_HUMAN_SECOND_RECORDS).
NUM_HUMAN_SKIPPED = 2

#: Weights of the number of option names a product gets (0, 1, ...), by how many its type offers. Over the catalog
#: this gives about 55% / 27% / 15% / 2% products with 0 / 1 / 2 / 3 options (real 1k set: 577, 245, 165, 13).
OPTION_COUNT_WEIGHTS = {0: (1.0,), 1: (0.6, 0.4), 2: (0.55, 0.22, 0.23), 3: (0.45, 0.2, 0.2, 0.15)}
#: Values per option name (inclusive range), by how many option names the product has (each capped by its pool).
VALUES_PER_OPTION = {1: (2, 8), 2: (3, 10), 3: (2, 6)}
#: Weights of the number of attributes per product: 0, 1, ..., 6 (real 1k set: 185 of 1000 have none).
ATTRIBUTE_COUNT_WEIGHTS = (0.12, 0.12, 0.2, 0.22, 0.16, 0.1, 0.08)
#: Instruction-attribute subset sizes to draw from (capped by the product's attribute count).
INSTRUCTION_ATTRIBUTE_SIZES = (1, 2, 2, 3, 3, 4)
#: Option names whose values come with a swatch image (the others have ``"image": null``).
IMAGE_OPTIONS = ("Color", "Scent", "Flavor Name")

#: The characters of an ASIN after its "B0" (also what ``baselines.demonstrations`` misspells ASINs with).
ASIN_ALPHABET = string.digits + string.ascii_uppercase
_IMAGE_ALPHABET = string.ascii_letters + string.digits + "+"
#: Image host: a reserved example domain, because nothing ever fetches these images.
IMAGE_URL = "https://images.example.com/webshop-synthetic/{}.jpg"
#: The word tables the products are composed from: package data in ``apo_lightning/webshop/data`` (:func:`vocabulary`).
VOCABULARY_FILE = "synthetic_vocabulary.json"

# ------------------------------------------------------------------------------------------------ word tables


@dataclass(frozen=True)
class ProductType:
    """One kind of product, i.e. one search ``query``; several products of each type compete in search.

    Attributes fall into three kinds that decide where an instruction puts them, as in items_ins_v2
    ("Find me {pre} {query} with {with_} for {for_}").
    """

    query: str  # lower-case product search phrase, e.g. "running shoes"
    titles: tuple[str, ...]  # title phrases; each contains the query's nouns
    product_category: str  # " › "-separated path
    pre: tuple[str, ...]  # adjectival attributes: "water resistant", "gluten free"
    with_: tuple[str, ...]  # feature / material attributes: "shea butter", "memory foam"
    for_: tuple[str, ...]  # use / target attributes: "dry skin", "hiking"
    options: tuple[tuple[str, str], ...]  # (option name, key into Vocabulary.option_values)
    price: tuple[float, float]  # single-price range in dollars


@dataclass(frozen=True)
class Category:
    """A top-level ``category`` with its own vocabulary."""

    name: str
    brands: tuple[str, ...]
    adjectives: tuple[str, ...]  # title words, not nouns
    tails: tuple[str, ...]  # title endings: "for Women", "2 Pack"
    sentences: tuple[str, ...]  # description filler
    bullets: tuple[str, ...]  # generic bullet points
    types: tuple[ProductType, ...]


@dataclass(frozen=True)
class Vocabulary:
    """The word tables of :data:`VOCABULARY_FILE`, in file order (the order the generator draws from)."""

    #: The catalog's top-level categories, each with its vocabulary and product types.
    categories: tuple[Category, ...]
    #: Option value pools by name. Every value that contains a word of the reward's COLOR_SET contains it as a whole
    #: word (no "Lightly Salted" -> 'light', "Grapefruit" -> 'grape'), so the goal product can reach r_option = 1.
    option_values: dict[str, tuple[str, ...]]
    #: Title words that are not nouns (adjectives, participles, prepositions, conjunctions). Every other word of a
    #: title is a noun or proper noun, which is how the title-noun table is built: by construction, not by a tagger.
    non_noun_words: frozenset[str]
    #: Words kept upper-case (or mixed-case) when attributes are title-cased for a product name: ``{"usb": "USB"}``.
    acronyms: dict[str, str]
    #: Synthetic instruction openers, drawn uniformly (a repeated opener is drawn more often).
    instruction_openers: tuple[str, ...]
    #: Human-style openers (lower case, as typed by MTurk workers).
    human_openers: tuple[str, ...]


def _product_type(entry: dict) -> ProductType:
    options = tuple((name, pool) for name, pool in entry["options"])
    return ProductType(entry["query"], tuple(entry["titles"]), entry["product_category"], tuple(entry["pre"]),
                       tuple(entry["with"]), tuple(entry["for"]), options, (entry["price"][0], entry["price"][1]))


@lru_cache(maxsize=None)
def vocabulary() -> Vocabulary:
    """Read the word tables from the package data file ``apo_lightning/webshop/data/synthetic_vocabulary.json``.

    The file is one JSON object: ``option_values`` (``{pool: [values]}``), ``categories`` (a list of ``{name,
    brands, adjectives, tails, sentences, bullets, types}``, each type ``{query, titles, product_category, pre, with,
    for, options: [[option name, pool], ...], price: [low, high]}``), ``non_noun_words``, ``acronyms``,
    ``instruction_openers`` and ``human_openers`` (see :class:`Vocabulary`). Read once per process.

    Raises:
        WebShopDataError: the file is missing from the installed package, is not JSON, lacks a key, or names an
            option pool it does not define (reinstall the package).
    """
    path = resources.files(__package__).joinpath("data", VOCABULARY_FILE)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        option_values = {pool: tuple(values) for pool, values in data["option_values"].items()}
        categories = tuple(
            Category(c["name"], tuple(c["brands"]), tuple(c["adjectives"]), tuple(c["tails"]), tuple(c["sentences"]),
                     tuple(c["bullets"]), tuple(_product_type(t) for t in c["types"]))
            for c in data["categories"])
        vocab = Vocabulary(categories, option_values, frozenset(data["non_noun_words"]), dict(data["acronyms"]),
                           tuple(data["instruction_openers"]), tuple(data["human_openers"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:  # ValueError: not JSON, not UTF-8
        raise WebShopDataError(f"package data {path} is missing or malformed ({e!r}); reinstall apo_lightning "
                               "(pip install -e .)") from e
    unknown = sorted({pool for c in categories for t in c.types for _, pool in t.options} - set(option_values))
    if unknown:
        raise WebShopDataError(f"package data {path}: product types use option pools it does not define: {unknown}")
    return vocab


_LOWER_WORDS = {"and", "for", "with", "of", "to", "in", "the", "a"}

# ------------------------------------------------------------------------------------------------ helpers


def _title_case(phrase: str) -> str:
    """Title-case a lower-case attribute for use in a product name ("bpa free" -> "BPA Free")."""
    acronyms = vocabulary().acronyms
    words = []
    for i, word in enumerate(phrase.split()):
        if word in acronyms:
            words.append(acronyms[word])
        elif word in _LOWER_WORDS and i > 0:
            words.append(word)
        else:
            words.append(word[:1].upper() + word[1:])
    return " ".join(words)


def title_nouns(title: str) -> list[str]:
    """The noun list of a synthetic product name: its lower-cased words, less numbers and ``non_noun_words``.

    Mirrors the real table's expression ``[t.text.lower() for t in nlp(name) if t.pos_ in ('NOUN', 'PROPN')]``
    for names composed from the word tables: duplicates and order kept, possessive ``'s`` dropped
    (spaCy splits it off), numbers dropped (spaCy tags them NUM).
    """
    non_nouns = vocabulary().non_noun_words
    nouns = []
    for token in re.findall(r"[A-Za-z0-9][A-Za-z0-9.']*", title):
        word = token.lower().rstrip(".")
        if word.endswith("'s") and word not in non_nouns:
            word = word[:-2]
        if word in non_nouns or not re.search(r"[a-z]", word):
            continue
        nouns.append(word)
    return nouns


def new_asin(rng: random.Random, taken: Container[str]) -> str:
    """A fresh ASIN: "B0" + 8 upper-case alphanumerics, none of ``taken``."""
    while True:
        asin = "B0" + "".join(rng.choice(ASIN_ALPHABET) for _ in range(8))
        if asin not in taken:
            return asin


def _new_id(rng: random.Random, used: set[str]) -> str:
    """:func:`new_asin`, added to ``used``."""
    asin = new_asin(rng, used)
    used.add(asin)
    return asin


def _image_url(rng: random.Random) -> str:
    """A fake image URL in the real file's shape (an 11-character image id)."""
    return IMAGE_URL.format("".join(rng.choice(_IMAGE_ALPHABET) for _ in range(11)))


def _price_string(rng: random.Random, low: float, high: float) -> str:
    """A raw ``pricing`` string: mostly "$12.99", 10% a range "$10.99 to $14.99", 2% empty (loader: $100.0)."""
    roll = rng.random()
    if roll < 0.02:
        return ""
    cents = rng.choice((0.99, 0.99, 0.95, 0.49, 0.0, round(rng.random(), 2)))
    price = int(rng.uniform(low, high)) + cents
    if roll < 0.12:
        upper = price * rng.uniform(1.1, 1.6)
        return f"${price:.2f} to ${upper:.2f}"
    return f"${price:.2f}"


def _be(noun_phrase: str) -> str:
    """'is' or 'are' for a product noun phrase ("running shoes are", "face serum is")."""
    head = noun_phrase.split(" for ")[0].split()[-1]
    return "are" if head.endswith("s") and not head.endswith("ss") else "is"


def _it(noun_phrase: str) -> str:
    """'it' or 'them', matching ``_be``."""
    return "them" if _be(noun_phrase) == "are" else "it"


def _join(items: list[str], last: str = "and") -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {last} {items[-1]}"


# ------------------------------------------------------------------------------------------------ one product


def _attributes(rng: random.Random, ptype: ProductType) -> list[str]:
    """The product's attribute list (lower-case, no duplicates); empty for about 12% of products."""
    pool = list(dict.fromkeys(ptype.pre + ptype.with_ + ptype.for_))
    k = rng.choices(range(len(ATTRIBUTE_COUNT_WEIGHTS)), weights=ATTRIBUTE_COUNT_WEIGHTS)[0]
    return rng.sample(pool, min(k, len(pool)))


def _kind(ptype: ProductType, attribute: str) -> str:
    """Where an instruction places an attribute: 'pre' (before the query), 'with' or 'for'."""
    if attribute in ptype.pre:
        return "pre"
    return "with" if attribute in ptype.with_ else "for"


def _compose_title(rng: random.Random, category: Category, ptype: ProductType, brand: str,
                   attributes: list[str]) -> str:
    """A product name: brand, adjectives, the type phrase, then some of the product's attributes and a tail."""
    phrase = rng.choice(ptype.titles)
    # Show about 60% of the attributes, never one the type phrase already says ("Raw Honey, Raw").
    shown = [a for a in attributes if rng.random() < 0.6 and a not in phrase.lower()]
    pre = [a for a in shown if _kind(ptype, a) == "pre"]
    with_ = [a for a in shown if _kind(ptype, a) == "with"]
    for_ = [a for a in shown if _kind(ptype, a) == "for"]
    words = [brand] + rng.sample(category.adjectives, rng.choice((0, 1, 1, 2)))
    if pre and rng.random() < 0.5:
        words.append(_title_case(pre.pop(0)))
    words.append(phrase)
    title = " ".join(words)
    if with_:
        title += " with " + " and ".join(_title_case(a) for a in with_)
    extras = [_title_case(a) for a in pre]
    if for_:
        extras.append("for " + ", ".join(_title_case(a) for a in for_))
    if rng.random() < 0.35:
        extras.append(rng.choice(category.tails))
    if extras:
        title += ", " + ", ".join(extras)
    return title


def _compose_description(rng: random.Random, category: Category, ptype: ProductType, brand: str,
                         attributes: list[str]) -> str:
    """``full_description``: a few sentences naming some attributes; empty for about 10% of products."""
    if rng.random() < 0.10:
        return ""
    noun = rng.choice(ptype.titles).lower()
    pre = [a for a in attributes if _kind(ptype, a) == "pre"]
    with_ = [a for a in attributes if _kind(ptype, a) == "with"]
    for_ = [a for a in attributes if _kind(ptype, a) == "for"]
    plural = _be(noun) == "are"
    sentences = []
    if pre:
        sentences.append(f"{'These' if plural else 'This'} {noun} from {brand} {_be(noun)} {_join(pre)}.")
    else:
        sentences.append(f"Meet the {brand} {noun}.")
    if with_:
        sentences.append(f"{'They come' if plural else 'It comes'} with {_join(with_)}.")
    if for_:
        sentences.append(f"Perfect for {_join(for_)}.")
    sentences += rng.sample(category.sentences, rng.choice((1, 2)))
    return " ".join(sentences)


def _compose_bullets(rng: random.Random, category: Category, ptype: ProductType,
                     attributes: list[str]) -> list[str] | str:
    """``small_description``: 2-6 bullet strings (each with the trailing space of the real file); 2% one string."""
    noun = ptype.titles[0].lower()
    bullets = []
    for attribute in attributes[:4]:
        kind = _kind(ptype, attribute)
        if kind == "pre":
            body = f"Our {noun} {_be(noun)} {attribute}, so you can use {_it(noun)} with confidence."
        elif kind == "with":
            body = f"Designed with {attribute} for better everyday performance."
        else:
            body = f"A great choice for {attribute}."
        bullets.append(f"{attribute.upper()}: {body} ")
    bullets += rng.sample(category.bullets, rng.choice((1, 2)))
    if rng.random() < 0.02:
        return "".join(bullets).strip()
    return bullets


def _option_value(rng: random.Random, value: str) -> str:
    """Occasionally vary a value's case or add stray whitespace, as scraped data does (the loader undoes both)."""
    roll = rng.random()
    if roll < 0.03:
        return value.lower()
    if roll < 0.05:
        return value.upper()
    if roll < 0.07:
        return value + " "
    return value


def _customization_options(rng: random.Random, ptype: ProductType, used_ids: set[str]) -> dict | str:
    """``customization_options``: "" or {OptionName: [entries] or None}; about half of products have options."""
    weights = OPTION_COUNT_WEIGHTS[len(ptype.options)]
    k = rng.choices(range(len(weights)), weights=weights)[0]
    if k == 0:
        # A few scraped products list an option name with no values; the loader skips it.
        if ptype.options and rng.random() < 0.05:
            return {ptype.options[0][0]: None}
        return ""
    low, high = VALUES_PER_OPTION[k]
    chosen = rng.sample(ptype.options, k)
    options: dict = {}
    seen_values: set[str] = set()  # a value must not appear under two option names (the env stores clicks by value)
    for name, pool_key in chosen:
        pool = [v for v in vocabulary().option_values[pool_key] if v.lower() not in seen_values]
        n = min(rng.randint(low, high), len(pool))
        picks = sorted(rng.sample(range(len(pool)), n))  # keep the pool's natural order (sizes ascending)
        entries = []
        for i in picks:
            seen_values.add(pool[i].lower())
            entries.append({
                "value": _option_value(rng, pool[i]),
                "image": _image_url(rng) if name in IMAGE_OPTIONS else None,
                "asin": _new_id(rng, used_ids),
                "is_selected": False,
            })
        options[name] = entries
    if len(ptype.options) > k and rng.random() < 0.08:
        options[next(n for n, _ in ptype.options if n not in options)] = None
    return options


def _instruction(rng: random.Random, ptype: ProductType, instruction_attributes: list[str]) -> str:
    """A synthetic instruction in items_ins_v2 style, e.g. "Find me cruelty free face serum with vitamin c"."""
    pre = [a for a in instruction_attributes if _kind(ptype, a) == "pre"]
    with_ = [a for a in instruction_attributes if _kind(ptype, a) == "with"]
    for_ = [a for a in instruction_attributes if _kind(ptype, a) == "for"]
    opener = rng.choice(vocabulary().instruction_openers)
    if pre and rng.random() < 0.2:
        body = f"{ptype.query} that {_be(ptype.query)} {', '.join(pre)}"
    else:
        body = f"{', '.join(pre)} {ptype.query}" if pre else ptype.query
    clauses = []
    if with_:
        clauses.append("with " + ", ".join(with_))
    if for_:
        clauses.append("for " + ", ".join(for_))
    if len(clauses) == 2 and rng.random() < 0.3:
        clauses.reverse()
    return " ".join([opener, body] + clauses)


def _processed_options(customization_options: dict | str) -> dict[str, list[str]]:
    """Option names and values as the loader sees them (lower-case, '/' -> ' | ')."""
    if not customization_options:
        return {}
    return {name.lower(): [e["value"].strip().replace("/", " | ").lower() for e in entries]
            for name, entries in customization_options.items() if entries is not None}


def _option_phrase(name: str, value: str) -> str:
    """How a shopper would say one option: "black color", "size 9", "vanilla flavor"."""
    value = value.replace(" | ", " and ")
    if name == "color":
        return f"{value} color"
    if name in ("size", "width"):
        return f"size {value}"
    if name == "flavor name":
        return f"{value} flavor"
    if name == "scent":
        return f"{value} scent"
    return value


def _human_record(rng: random.Random, ptype: ProductType, product: dict, attributes: list[str],
                  skipped: bool) -> dict:
    """One instruction record in the items_human_ins format (lower-case, conversational, no price text)."""
    options = _processed_options(product["customization_options"])
    selected = {name: rng.choice(values) for name, values in options.items()}
    asked = [name for name in selected if rng.random() < 0.75]
    instruction_options = [selected[name] for name in asked]
    instruction_attributes = [] if skipped else rng.sample(attributes, min(len(attributes), rng.choice((1, 1, 2))))
    pre = [a for a in instruction_attributes if _kind(ptype, a) == "pre"]
    rest = [a for a in instruction_attributes if _kind(ptype, a) != "pre"]
    text = f"{rng.choice(vocabulary().human_openers)} {' '.join(pre + [ptype.query])}".replace("  ", " ")
    if rest:
        text += " " + " and ".join(("with " if _kind(ptype, a) == "with" else "for ") + a for a in rest)
    if asked:
        text += " in " + " and ".join(_option_phrase(name, selected[name]) for name in asked)
    text += rng.choice(("", "", ".", " please", "?"))
    return {
        "asin": product["asin"],
        "instruction": text.lower(),
        "attributes": attributes,
        "options": [f"{name}: {value}" for name, value in selected.items()] or [""],
        "instruction_attributes": instruction_attributes,
        "instruction_options": instruction_options,
        "assignment_id": "".join(rng.choice(ASIN_ALPHABET) for _ in range(30)),
        "worker_id": "A" + "".join(rng.choice(ASIN_ALPHABET) for _ in range(13)),
    }


# ------------------------------------------------------------------------------------------------ catalog


def build_catalog(seed: int = 0, num_products: int = 600) -> dict[str, object]:
    """Build the catalog in memory (no I/O): the JSON content of each data file, keyed by file name.

    Args:
        seed: seeds the one ``random.Random`` that draws everything; the same seed gives the same catalog.
        num_products: number of products, spread evenly over every product type of every category (a catalog of
            at least one product per type, i.e. >= 84, covers all 9 categories).

    Returns:
        ``{PRODUCTS_FILE: [records], ATTRIBUTES_FILE: {asin: {...}}, HUMAN_INSTRUCTIONS_FILE: {asin: [records]},
        TITLE_NOUNS_FILE: {"_meta": {...}, asin: [nouns]}}``.

    Raises:
        ValueError: ``num_products`` < 1.
    """
    if num_products < 1:
        raise ValueError(f"num_products must be >= 1, got {num_products}")
    rng = random.Random(seed)
    types = [(category, ptype) for category in vocabulary().categories for ptype in category.types]
    per_type = [num_products // len(types)] * len(types)
    for i in rng.sample(range(len(types)), num_products % len(types)):
        per_type[i] += 1
    slots = [types[i] for i, n in enumerate(per_type) for _ in range(n)]
    rng.shuffle(slots)  # the real file is pre-shuffled, so categories interleave

    used_ids: set[str] = set()
    products, attributes_of, ptype_of = [], {}, {}
    for category, ptype in slots:
        asin = _new_id(rng, used_ids)
        brand = rng.choice(category.brands)
        attributes = _attributes(rng, ptype)
        rating = "" if rng.random() < 0.35 else round(rng.uniform(3.0, 5.0), 1)
        if isinstance(rating, float) and rating.is_integer():
            rating = int(rating)  # the real file writes 5 and 4, not 5.0
        products.append({
            "name": _compose_title(rng, category, ptype, brand, attributes),
            "full_description": _compose_description(rng, category, ptype, brand, attributes),
            "pricing": _price_string(rng, *ptype.price),
            "images": [_image_url(rng) for _ in range(rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 8, 8)))],
            "product_category": "" if rng.random() < 0.02 else ptype.product_category,
            "average_rating": rating,
            "small_description": _compose_bullets(rng, category, ptype, attributes),
            "customization_options": _customization_options(rng, ptype, used_ids),
            "asin": asin,
            "category": category.name,
            "query": ptype.query,
            "page": rng.randint(1, 60),
        })
        attributes_of[asin] = attributes
        ptype_of[asin] = ptype

    # Synthetic instructions: a fixed fraction of the products, drawn among those with attributes, and more often
    # among products with options, as in the real set (weighted sampling without replacement: the largest
    # u ** (1 / w) win, Efraimidis & Spirakis 2006).
    eligible = [p["asin"] for p in products if attributes_of[p["asin"]]]
    num_instructed = min(len(eligible), round(INSTRUCTED_FRACTION * num_products))
    num_options = {p["asin"]: len(_processed_options(p["customization_options"])) for p in products}
    keys = {asin: rng.random() ** (1.0 / INSTRUCTION_WEIGHT_BY_OPTIONS[num_options[asin]]) for asin in eligible}
    instructed = set(sorted(eligible, key=lambda asin: keys[asin], reverse=True)[:num_instructed])
    attribute_file: dict[str, dict] = {}
    for p in products:
        asin, attributes = p["asin"], attributes_of[p["asin"]]
        entry: dict = {"attributes": attributes}
        if asin in instructed:
            k = min(len(attributes), rng.choice(INSTRUCTION_ATTRIBUTE_SIZES))
            chosen = set(rng.sample(attributes, k))
            instruction_attributes = [a for a in attributes if a in chosen]
            entry["instruction"] = _instruction(rng, ptype_of[asin], instruction_attributes)
            entry["instruction_attributes"] = instruction_attributes
        attribute_file[asin] = entry

    # Human instruction records for a few dozen products (any product with attributes).
    human_asins = rng.sample(eligible, min(len(eligible), NUM_HUMAN_PRODUCTS))
    by_asin = {p["asin"]: p for p in products}
    human_file: dict[str, list[dict]] = {}
    for i, asin in enumerate(human_asins):
        n_records = 2 if i < NUM_HUMAN_SECOND_RECORDS else 1
        human_file[asin] = [
            _human_record(rng, ptype_of[asin], by_asin[asin], attributes_of[asin],
                          skipped=(j == 1 and i < NUM_HUMAN_SKIPPED))
            for j in range(n_records)
        ]

    noun_table: dict[str, object] = {}
    nouns = {p["asin"]: title_nouns(p["name"]) for p in products}
    noun_table["_meta"] = {
        "what": "per product: the nouns of product['name'], lower-cased, duplicates and order kept, in the shape of "
                "title_nouns_en_core_web_sm.json; known by construction (names are composed from word tables), "
                "not tagged by spaCy",
        "generator": GENERATOR,
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "products": len(products),
        "products_with_no_nouns": sum(not v for v in nouns.values()),
        "nouns_total": sum(len(v) for v in nouns.values()),
        "title_score": "title_score = len(set(table[purchased]) & set(table[goal])) / len(table[goal]), "
                       "or 0.2 if the goal's list is empty",
    }
    noun_table.update(nouns)
    return {PRODUCTS_FILE: products, ATTRIBUTES_FILE: attribute_file, HUMAN_INSTRUCTIONS_FILE: human_file,
            TITLE_NOUNS_FILE: noun_table}


def _dumps(obj: object) -> bytes:
    """Serialise as the real files are (json.dump defaults: ', ' / ': ' separators, ASCII escapes)."""
    return json.dumps(obj, ensure_ascii=True, separators=(", ", ": ")).encode("ascii")


def _source_md(seed: int, num_products: int, contents: dict[str, bytes], stats: dict[str, int]) -> str:
    """The folder's SOURCE.md: what it is, how it was made, and the file table."""
    rows = "\n".join(f"| {name} | {len(data):,} | {hashlib.sha256(data).hexdigest()} |"
                     for name, data in contents.items())
    return f"""# Synthetic WebShop catalog (generated)

This folder was written by `{GENERATOR}` (generator version {GENERATOR_VERSION}) with seed {seed} and
{num_products} products. It is **synthetic**: every product, brand, instruction and human record is composed from
the word tables in that module; none comes from Amazon or the WebShop data. The files have the raw formats of the
real WebShop 1k set (docs/webshop.md in the apo_lightning repository), so the same loader, goals, search and reward
run on them.

Regenerate with:

    python -m {GENERATOR} --out <this folder> --seed {seed} --num-products {num_products}

Contents: {stats['products']} products in {stats['categories']} categories and {stats['queries']} queries;
{stats['with_options']} products with options; {stats['instructed']} with a synthetic instruction;
{stats['human_records']} human-style records for {stats['human_products']} products.

Differences from the real data: `title_nouns.json` is known by construction rather than tagged by spaCy; there is no
`search_doc_tokens.jsonl` (search must analyse the documents itself); image URLs point at example.com; option values
avoid the colour-normalisation trap (each colour word a value contains is a whole word of it), so the goal product
with the goal's options always scores 1.

| file | bytes | sha256 |
|---|---|---|
{rows}
"""


def _stats(catalog: dict[str, object]) -> dict[str, int]:
    """Counts for SOURCE.md."""
    products = catalog[PRODUCTS_FILE]
    human = catalog[HUMAN_INSTRUCTIONS_FILE]
    return {
        "products": len(products),
        "categories": len({p["category"] for p in products}),
        "queries": len({p["query"] for p in products}),
        "with_options": sum(bool(_processed_options(p["customization_options"])) for p in products),
        "instructed": sum("instruction" in v for v in catalog[ATTRIBUTES_FILE].values()),
        "human_products": len(human),
        "human_records": sum(len(v) for v in human.values()),
    }


def _meta(seed: int, num_products: int) -> dict[str, object]:
    """The parameters a folder was generated with (compared by ``ensure_catalog``)."""
    return {"generator": GENERATOR, "generator_version": GENERATOR_VERSION, "seed": seed,
            "num_products": num_products}


def generate_catalog(out_dir: str | Path, seed: int = 0, num_products: int = 600) -> Path:
    """Generate the synthetic catalog into ``out_dir`` (created if needed), overwriting what is there.

    Writes ``items_shuffle_1000.json``, ``items_ins_v2_1000.json``, ``items_human_ins.json``, ``title_nouns.json``,
    ``SOURCE.md`` and, last, ``catalog.json`` (parameters and sha256 of each file). Each file is written atomically,
    so an interrupted run never leaves half a file, and a folder without a matching ``catalog.json`` is regenerated
    by ``ensure_catalog``.

    Args:
        out_dir: destination folder.
        seed: random seed; the same seed and size give byte-identical files.
        num_products: number of products (default 600).

    Returns:
        ``Path(out_dir)``.

    Raises:
        ValueError: ``num_products`` < 1.
    """
    out = Path(out_dir)
    catalog = build_catalog(seed, num_products)
    out.mkdir(parents=True, exist_ok=True)
    contents = {name: _dumps(obj) for name, obj in catalog.items()}
    contents[SOURCE_FILE] = _source_md(seed, num_products, contents, _stats(catalog)).encode("utf-8")
    (out / META_FILE).unlink(missing_ok=True)  # the folder is invalid until every file is written
    for name in DATA_FILES:
        atomic_write_bytes(out / name, contents[name])
    meta = _meta(seed, num_products)
    meta["files"] = {name: hashlib.sha256(contents[name]).hexdigest() for name in DATA_FILES}
    atomic_write_bytes(out / META_FILE, json.dumps(meta, indent=1, sort_keys=True).encode("ascii"))
    log.info("wrote synthetic WebShop catalog to %s (seed %d, %d products)", out, seed, num_products)
    return out


def _is_current(out: Path, seed: int, num_products: int) -> bool:
    """Whether ``out`` holds an intact catalog made by this generator version with these parameters."""
    try:
        meta = json.loads((out / META_FILE).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict) or {k: meta.get(k) for k in _meta(seed, num_products)} != _meta(seed, num_products):
        return False
    hashes = meta.get("files") or {}
    for name in DATA_FILES:
        try:
            if hashlib.sha256((out / name).read_bytes()).hexdigest() != hashes.get(name):
                return False
        except OSError:
            return False
    return True


def ensure_catalog(out_dir: str | Path, seed: int = 0, num_products: int = 600) -> Path:
    """Return ``out_dir`` holding the synthetic catalog, generating it only when needed.

    The folder is (re)generated when ``catalog.json`` is missing, records another seed, size or generator version,
    or when a data file is missing or differs from the hash recorded there; otherwise it is returned as is.
    Concurrent callers (e.g. several ranks) are safe: each writes the same bytes through its own temporary files.

    Args:
        out_dir: the catalog folder, e.g. ``data/synthetic/seed0``.
        seed: random seed.
        num_products: number of products.

    Returns:
        ``Path(out_dir)``.

    Raises:
        ValueError: ``num_products`` < 1.
    """
    out = Path(out_dir)
    if _is_current(out, seed, num_products):
        return out
    log.info("synthetic catalog at %s is missing or stale; generating it", out)
    return generate_catalog(out, seed, num_products)


def main(argv: list[str] | None = None) -> Path:
    """Command line: ``python -m apo_lightning.webshop.synthetic --out DIR [--seed S] [--num-products N]``."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog=f"python -m {GENERATOR}",
                                     description="Generate the deterministic synthetic WebShop catalog.")
    parser.add_argument("--out", required=True, help="destination folder, e.g. data/synthetic/seed0")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--num-products", type=int, default=600, help="number of products (default 600)")
    parser.add_argument("--if-needed", action="store_true",
                        help="keep the folder if it already holds this catalog (ensure_catalog) instead of "
                             "rewriting it")
    args = parser.parse_args(argv)
    if args.num_products < 1:
        parser.error(f"--num-products must be >= 1, got {args.num_products}")
    make = ensure_catalog if args.if_needed else generate_catalog
    out = make(args.out, seed=args.seed, num_products=args.num_products)
    stats = _stats({name: json.loads((out / name).read_text()) for name in
                    (PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_INSTRUCTIONS_FILE)})
    print(f"{out}: {stats['products']} products, {stats['categories']} categories, {stats['queries']} queries, "
          f"{stats['with_options']} with options, {stats['instructed']} instructed, "
          f"{stats['human_records']} human records")
    return out


if __name__ == "__main__":
    main()
