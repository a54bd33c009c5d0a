"""The WebShop reward, with every quirk of the original.

Source: princeton-nlp/WebShop ``web_agent_site/engine/goal.py`` (``get_reward``, ``get_type_reward``,
``get_attribute_reward``, ``get_option_reward``) and ``engine/normalize.py`` (``COLOR_SET``, ``normalize_color``) at
commit 64fa2a5c; docs/webshop.md, "What is reproduced". Fuzzy matching is ``thefuzz.fuzz.token_set_ratio`` as
thefuzz 0.22 computes it, reproduced with ``rapidfuzz``: ``str()`` of the input, code points 128–255 deleted
(``force_ascii``), rapidfuzz's default processing, then ``int(round(score))``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Mapping

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

#: normalize.py ``COLOR_SET``, in its (alphabetical) order; it includes non-colours such as 'dark' and 'light'.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite",
    "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon",
    "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink",
    "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise",
    "violet", "walnut", "wheat", "white", "wine", "yellow",
)
FUZZY_THRESHOLD = 85  # a match needs token_set_ratio > 85
_LATIN1_UPPER = {i: None for i in range(128, 256)}  # thefuzz's "ascii dammit" table
_ALPHA_TOKEN = re.compile(r"[a-z]+")


def normalize_color(value: Any) -> Any:
    """Return the first COLOR_SET word contained in ``value``, else ``value`` unchanged.

    For a string this is a substring test ('rectangular' -> 'tan'); for a synthetic goal's ``(name, value)``
    tuple it is Python's element test (``('color', 'black')`` -> 'black', ``('size', 'large')`` unchanged), exactly
    as the original applies ``in`` to whatever it is given.
    """
    for color in COLOR_SET:
        if color in value:
            return color
    return value


@lru_cache(maxsize=65536)
def _fuzz_process(text: str) -> str:
    return default_process(text.translate(_LATIN1_UPPER))


def token_set_ratio(a: Any, b: Any) -> int:
    """thefuzz 0.22 ``fuzz.token_set_ratio(a, b)`` with its defaults (force_ascii, full_process): 0…100 int."""
    pa, pb = _fuzz_process(str(a)), _fuzz_process(str(b))
    return int(round(fuzz.token_set_ratio(pa, pb, processor=None)))


def alphabetic_nouns(name: str) -> list[str]:
    """Fallback "noun" tagger when no spaCy noun table is available: every alphabetic token, lower-cased.

    This is the stub tagger the first golden episode files used; against real spaCy it changes r_type only for
    some non-target purchases (docs/webshop.md, "How it is checked").
    """
    return _ALPHA_TOKEN.findall(name.lower())


def type_reward(purchased: Mapping, goal: Mapping, purchased_nouns: list[str], goal_nouns: list[str]) -> dict:
    """``get_type_reward``: r_type in {0, 0.1, 0.5, 1} from query, category and title-noun overlap.

    Args:
        purchased_nouns / goal_nouns: the spaCy NOUN/PROPN tokens (lower-cased, duplicates kept) of the purchased
            product's name and the goal's name.
    """
    query_match = purchased["query"] == goal["query"]
    purchased_category = {x.strip() for x in purchased["product_category"].split("›")}
    goal_category = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(purchased_category & goal_category) >= 2
    if len(goal_nouns) == 0:
        title_score = 0.2
    else:
        title_score = len(set(purchased_nouns) & set(goal_nouns)) / len(goal_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return dict(r_type=r_type, query_match=query_match, category_match=category_match, title_score=title_score)


def attribute_matches(purchased: Mapping, goal_attributes: list[str]) -> int:
    """``get_attribute_reward``: how many goal attributes the product has (fuzzy on Attributes, else substring)."""
    title = purchased["Title"].lower()
    bullets = " ".join(purchased["BulletPoints"]).lower()
    description = purchased["Description"].lower()
    matches = 0
    for g_attr in goal_attributes:
        if any(token_set_ratio(p_attr, g_attr) > FUZZY_THRESHOLD for p_attr in purchased["Attributes"]):
            matches += 1
        elif g_attr in title or g_attr in bullets or g_attr in description:
            matches += 1
    return matches


def option_matches(purchased_options: list[str], goal_options: list[Any]) -> int:
    """``get_option_reward``: how many goal options some purchased option value matches (both colour-normalised)."""
    purchased_norm = [normalize_color(o) for o in purchased_options]
    matches = 0
    for g_option in (normalize_color(o) for o in goal_options):
        if any(token_set_ratio(p_option, g_option) > FUZZY_THRESHOLD for p_option in purchased_norm):
            matches += 1
    return matches


def get_reward(
    purchased: Mapping,
    goal: Mapping,
    price: float,
    options: Mapping[str, str],
    purchased_nouns: list[str],
    goal_nouns: list[str],
) -> tuple[float, dict]:
    """The WebShop score of buying ``purchased`` with ``options`` selected, for ``goal`` (goal.py ``get_reward``).

    ``reward = (attribute matches + option matches + [price <= price_upper]) / (|A| + |O| + 1) * r_type``.

    Args:
        purchased: the processed product bought.
        goal: the goal dict (``goal_options`` a dict for synthetic goals, a list for human goals).
        price: the product's (per-run sampled) price in dollars.
        options: the session's selected options ``{option name: value}`` (only what was clicked).
        purchased_nouns / goal_nouns: title nouns of the two names (see ``type_reward``).

    Returns:
        ``(reward in [0, 1], info)`` with info keys r_type, r_att, w_att, query_match, category_match,
        title_score, then r_option, w_option (only if the goal has options), r_price (bool), w_price.
    """
    type_info = type_reward(purchased, goal, purchased_nouns, goal_nouns)
    price_upper = goal["price_upper"]
    r_price = (price <= price_upper) if price_upper > 0 else None
    n_attributes = len(goal["attributes"])
    n_attr_matches = attribute_matches(purchased, goal["attributes"])
    goal_options = goal["goal_options"]
    goal_option_list = list(goal_options.items()) if isinstance(goal_options, dict) else list(goal_options)
    n_option_matches = option_matches(list(options.values()), goal_option_list)
    r_option = n_option_matches / len(goal_option_list) if goal_option_list else None

    denominator = n_attributes + len(goal_options) + 1
    reward = (n_attr_matches + n_option_matches + r_price) / denominator * type_info["r_type"]
    info = {
        "r_type": type_info["r_type"],
        "r_att": n_attr_matches / n_attributes,
        "w_att": n_attributes / denominator,
        "query_match": type_info["query_match"],
        "category_match": type_info["category_match"],
        "title_score": type_info["title_score"],
    }
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = len(goal_options) / denominator
    if r_price is not None:
        info["r_price"] = r_price
        info["w_price"] = 1 / denominator
    return reward, info
