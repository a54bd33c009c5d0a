"""Goals (instructions): synthetic and human goal generation, the seed-233 order, and the splits.

Source: princeton-nlp/WebShop ``web_agent_site/engine/goal.py`` (``get_synthetic_goals``, ``get_human_goals``) and
``envs/web_agent_text_env.py`` (``SimServer.__init__``: ``random.seed(233); random.shuffle(goals)``);
docs/webshop.md, "What is reproduced". A goal is the original dict: asin, category, query, name, product_category,
instruction_text, attributes, price_upper, goal_options (dict for synthetic goals, list of value strings for human
goals), weight.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from ..utils.sequences import RowSequence

#: Price ceilings offered to goals: 10, 20, ..., 990 dollars (goal.py ``PRICE_RANGE``).
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
#: The ``price_upper`` of a goal without a price limit (a product above the last ceiling): no price clause.
NO_PRICE_UPPER = 1000000
#: Goal index ranges of the WebShop paper / RAGEN convention: test [0, 500), val [500, 1500), train [1500, N).
SPLITS = {"test": (0, 500), "val": (500, 1500), "train": (1500, None)}


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
            goals.append(_synthetic_goal(product, dict(zip(option_names, combination)), price_upper, price_text))
            for attribute in attributes:
                attribute_counts[attribute] += 1
    for goal in goals:
        goal["weight"] = sum(1.0 / attribute_counts[a] for a in goal["attributes"]) / len(goal["attributes"])
    return goals


def _synthetic_goal(product: Mapping, goal_options: dict[str, str], price_upper: float, price_text: str) -> dict:
    """One synthetic goal dict (goal.py ``get_synthetic_goals``), without its ``weight``."""
    option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
    option_text = " with " + option_text if option_text else ""
    return {
        "asin": product["asin"],
        "category": product["category"],
        "query": product["query"],
        "name": product["Title"],  # the dict literal upstream names `name` twice; the Title wins
        "product_category": product["product_category"],
        "instruction_text": f"{product['instruction_text']}{option_text}{price_text}",
        "attributes": product["instruction_attributes"],
        "price_upper": price_upper,
        "goal_options": goal_options,
    }


def option_combinations(options: Mapping[str, Sequence[str]]) -> int:
    """How many synthetic goals a product with an instruction gets: the product of its options' value counts (1
    without options, 0 if an option has no value), as ``itertools.product`` in :func:`synthetic_goals` yields."""
    return math.prod(len(values) for values in options.values())


def goal_options_at(options: Mapping[str, Sequence[str]], combination: int) -> dict[str, str]:
    """The ``combination``-th (0-based) option choice :func:`synthetic_goals` makes for a product: entry
    ``combination`` of ``itertools.product`` over the values of the sorted option names (the last name varies
    fastest), as ``{name: value}`` in sorted name order.

    Raises:
        IndexError: ``combination`` is not below :func:`option_combinations`.
    """
    names = sorted(options)
    if not 0 <= combination < option_combinations(options):
        raise IndexError(f"option combination {combination} out of range [0, {option_combinations(options)})")
    chosen = []
    for name in reversed(names):
        combination, i = divmod(combination, len(options[name]))
        chosen.append(options[name][i])
    return dict(zip(names, reversed(chosen)))


def synthetic_goal_weights(attribute_lists: Sequence[Sequence[str]], combinations: Sequence[int]) -> list[float]:
    """The ``weight`` :func:`synthetic_goals` gives every goal of each instructed product, from the products'
    ``instruction_attributes`` and goal counts (:func:`option_combinations`), in product order: the mean over the
    product's attributes of 1 / (how many goals carry that attribute), summed in the same order as there."""
    attribute_counts: dict[str, int] = defaultdict(int)
    for attributes, n in zip(attribute_lists, combinations):
        for attribute in attributes:
            attribute_counts[attribute] += n
    return [sum(1.0 / attribute_counts[a] for a in attributes) / len(attributes) if n and attributes else 0.0
            for attributes, n in zip(attribute_lists, combinations)]


def synthetic_goal_table(prices: Sequence[float], instructed: Sequence[int], combinations: Sequence[int],
                         rng: random.Random) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seed-dependent part of :func:`synthetic_goals` for a stored catalog, before the shuffle.

    Args:
        prices: every product's price (``catalog.sample_prices``, drawn from ``rng`` first).
        instructed: the rows (product indices) with an ``instruction_text``, ascending.
        combinations: their goal counts (:func:`option_combinations`), one per entry of ``instructed``.
        rng: the catalog RNG, right after the price draws; each instructed product draws its ``price_upper`` in
            row order, as :func:`synthetic_goals` does.

    Returns:
        ``(price_uppers, goal_rows, goal_combinations)``: (len(instructed),) float64 ceilings (``NO_PRICE_UPPER``
        for none), and for each goal in generation order its product row and combination index, (num_goals,) int32 each.
    """
    price_uppers = np.array([_price_upper(prices[row], rng)[0] for row in instructed], dtype=np.float64)
    counts = np.asarray(combinations, dtype=np.int64)
    goal_rows = np.repeat(np.asarray(instructed, dtype=np.int32), counts)  # (num_goals,)
    starts = np.repeat(np.cumsum(counts) - counts, counts)  # (num_goals,) first goal of each goal's product
    goal_combinations = (np.arange(len(goal_rows), dtype=np.int64) - starts).astype(np.int32)  # (num_goals,)
    return price_uppers, goal_rows, goal_combinations


def shuffled_order(num_goals: int, seed: int) -> np.ndarray:
    """The permutation ``random.Random(seed).shuffle`` applies to any list of ``num_goals`` items (it depends only
    on the length): goal i after the shuffle is goal ``order[i]`` before it. (num_goals,) int64."""
    order = list(range(num_goals))
    random.Random(seed).shuffle(order)
    return np.array(order, dtype=np.int64)


class SyntheticGoals(RowSequence):
    """The synthetic goals of a stored catalog as a read-only sequence of goal dicts, each built on access, equal to
    the entries of the list :func:`synthetic_goals` makes and the seed shuffle orders (memory: 8 bytes per goal
    instead of a dict).

    Args:
        products: the catalog's processed products by row (``store.ProductStore``).
        goal_rows: (num_goals,) int32, each goal's product row, in goal (shuffled) order.
        goal_combinations: (num_goals,) int32, each goal's option combination (:func:`goal_options_at`).
        price_uppers: (N,) float64 by product row, the goal's ``price_upper`` (``NO_PRICE_UPPER`` for none).
        weights: (N,) float64 by product row, the goal's ``weight`` (:func:`synthetic_goal_weights`).
    """

    item_name = "goal"

    def __init__(self, products: Sequence[Mapping], goal_rows: np.ndarray, goal_combinations: np.ndarray,
                 price_uppers: np.ndarray, weights: np.ndarray) -> None:
        self._products = products
        self._rows = goal_rows
        self._combinations = goal_combinations
        self._price_uppers = price_uppers
        self._weights = weights

    def __len__(self) -> int:
        return len(self._rows)

    def _item(self, i: int) -> dict:
        row = self._rows.item(i)
        product = self._products[row]
        price_upper = self._price_uppers.item(row)
        if price_upper == NO_PRICE_UPPER:
            price_upper, price_text = NO_PRICE_UPPER, ""
        else:
            price_text = f", and price lower than {price_upper:.2f} dollars"
        goal_options = goal_options_at(product["options"], self._combinations.item(i))
        goal = _synthetic_goal(product, goal_options, price_upper, price_text)
        goal["weight"] = self._weights.item(row)
        return goal

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # mutable-sequence semantics: equal to a list, so not hashable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} goals)"


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


def split_range(split: str, num_goals: int) -> range:
    """Goal indices of ``split`` ("train" | "val" | "test"): :data:`SPLITS`.

    Raises:
        ValueError: unknown split, or the split is empty for this many goals.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLITS)}")
    start, stop = SPLITS[split]
    indices = range(start, min(num_goals, stop if stop is not None else num_goals))
    if len(indices) == 0:
        raise ValueError(f"split {split!r} is empty: the catalog has only {num_goals} goals")
    return indices
