"""Goals (instructions): synthetic and human goal generation, the seed-233 order, and the splits.

Source: princeton-nlp/WebShop ``web_agent_site/engine/goal.py`` (``get_synthetic_goals``, ``get_human_goals``) and
``envs/web_agent_text_env.py`` (``SimServer.__init__``: ``random.seed(233); random.shuffle(goals)``);
WEBSHOP_SPEC.md §2. A goal is the original dict: asin, category, query, name, product_category, instruction_text,
attributes, price_upper, goal_options (dict for synthetic goals, list of value strings for human goals), weight.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

#: Price ceilings offered to goals: 10, 20, ..., 990 dollars (goal.py ``PRICE_RANGE``).
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
#: The ``price_upper`` of a goal without a price limit (a product above the last ceiling): no price clause.
NO_PRICE_UPPER = 1000000
#: Goal index ranges of the WebShop paper / RAGEN convention: test [0, 500), val [500, 1500), train [1500, N).
SPLITS = {"test": (0, 500), "val": (500, 1500), "train": (1500, None)}
#: verl-agent's convention on the 1k set: test (= val) [0, 500), train [500, N).
VERL_SPLITS = {"test": (0, 500), "val": (0, 500), "train": (500, None)}


def _price_upper(price: float, rng: random.Random) -> tuple[float, str]:
    """Draw the goal's price ceiling above ``price`` (goal.py): two of the next four PRICE_RANGE steps, keep the
    larger."""
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        _, price_upper = sorted(rng.sample(price_range, 2))
        return price_upper, f", and price lower than {price_upper:.2f} dollars"
    return NO_PRICE_UPPER, ""


def synthetic_goals(products: list[dict], prices: dict[str, float], rng: random.Random) -> list[dict]:
    """One goal per option-value combination of every product with an ``instruction_text`` (goal.py).

    Raises:
        ValueError: an instructed product has no ``instruction_attributes`` (the original asserts).
    """
    goals = []
    attribute_counts: dict[str, int] = defaultdict(int)
    for product in products:
        if product.get("instruction_text") is None:
            continue
        attributes = product["instruction_attributes"]
        if not attributes:
            raise ValueError(f"product {product['asin']} has an instruction but no instruction_attributes")
        price_upper, price_text = _price_upper(prices[product["asin"]], rng)
        option_names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][name] for name in option_names)):
            goal_options = dict(zip(option_names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append({
                "asin": product["asin"],
                "category": product["category"],
                "query": product["query"],
                "name": product["Title"],  # the dict literal upstream names `name` twice; the Title wins
                "product_category": product["product_category"],
                "instruction_text": f"{product['instruction_text']}{option_text}{price_text}",
                "attributes": attributes,
                "price_upper": price_upper,
                "goal_options": goal_options,
            })
            for attribute in attributes:
                attribute_counts[attribute] += 1
    for goal in goals:
        goal["weight"] = sum(1.0 / attribute_counts[a] for a in goal["attributes"]) / len(goal["attributes"])
    return goals


def human_goals(products: list[dict], prices: dict[str, float], rng: random.Random) -> list[dict]:
    """One goal per human instruction record with non-empty ``instruction_attributes`` (goal.py)."""
    goals = []
    for item in products:
        for record in item.get("instructions", ()):
            attributes = record["instruction_attributes"]
            if len(attributes) == 0:
                continue  # counted as "skipped" upstream
            price_upper, price_text = _price_upper(prices[item["asin"]], rng)
            goals.append({
                "asin": item["asin"],
                "category": item["category"],
                "query": item["query"],
                "name": item["name"],
                "product_category": item["product_category"],
                "instruction_text": record["instruction"].strip(".") + price_text,
                "attributes": attributes,
                "price_upper": price_upper,
                "goal_options": record["instruction_options"],
                "weight": 1,
            })
    return goals


def instruction_goal(instruction: str) -> dict:
    """A goal that is only an instruction, e.g. one a person typed: ``{"instruction_text": instruction}``. An env
    shows it and lets an episode buy, but with no ``asin`` (no product behind it) the purchase is not scored
    (``WebShopEnv``: score 0, empty ``reward_info``)."""
    return {"instruction_text": instruction}


def split_range(split: str, num_goals: int, scheme: str = "webshop") -> range:
    """Goal indices of ``split`` ("train" | "val" | "test") under ``scheme`` ("webshop" | "verl").

    Raises:
        ValueError: unknown split or scheme, or the split is empty for this many goals.
    """
    table = {"webshop": SPLITS, "verl": VERL_SPLITS}.get(scheme)
    if table is None:
        raise ValueError(f"unknown split scheme {scheme!r}; expected 'webshop' or 'verl'")
    if split not in table:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(table)}")
    start, stop = table[split]
    indices = range(start, min(num_goals, stop if stop is not None else num_goals))
    if len(indices) == 0:
        raise ValueError(f"split {split!r} ({scheme}) is empty: the catalog has only {num_goals} goals")
    return indices
