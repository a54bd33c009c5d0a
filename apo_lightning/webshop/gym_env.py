"""WebShop through gymnasium's API, ``gymnasium.make("apo_lightning/WebShop-v0", ...)``: a thin wrapper of the engine.

    import gymnasium
    import apo_lightning.webshop  # registers "apo_lightning/WebShop-v0"

    env = gymnasium.make("apo_lightning/WebShop-v0", data_dir="synthetic", split="test", observation_mode="text")
    observation, info = env.reset(seed=0)                      # a test goal drawn with the seed
    observation, info = env.reset(options={"goal_index": 3})   # or goal 3
    observation, reward, terminated, truncated, info = env.step("search[red running shoes]")

``WebShopEnv`` stays the engine: pages, actions, the step limit and the reward are its own; this module only maps
its ``reset(goal_index) -> str`` / ``step -> (obs, reward, done, info)`` onto gymnasium's five-tuple and declares
``Text`` spaces. Importing it (``apo_lightning.webshop`` does) registers the id; without that import,
``gymnasium.make("apo_lightning.webshop:apo_lightning/WebShop-v0")`` imports the package itself.

Many episodes at once: ``gymnasium.make_vec(ENV_ID, num_envs=n, vectorization_mode="sync", ...)``, or
``vectorization_mode="async", vector_kwargs={"shared_memory": False}`` for one process per env (each loads its own
catalog). gymnasium batches a ``Text`` space as a ``Tuple`` of ``Text`` spaces, so a vector env's observations are a
tuple of ``n`` strings and its actions a sequence of ``n`` strings; ``info`` is merged by key as for any env. The
async env's default shared memory does not work for ``Text``: it writes each page into the buffer but decodes the
buffer into strings only once, when the vector env is built, so every later observation would be that first,
blank one (the same cause as Farama-Foundation/Gymnasium#1164 for ``Dict``); without it, pages travel through the
pipes. A vector env is a loop over independent episodes (the engine is plain Python, there is no array to batch):
"sync" gains nothing in speed over a Python loop, "async" gains the processes. ``reset(seed=s)`` gives sub-env
``i`` the seed ``s + i`` and so its own goal; ``options`` go to every sub-env alike, so ``{"goal_index": i}`` puts
all of them on goal ``i``.
"""

from __future__ import annotations

import json
import os
import string
from functools import lru_cache
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from ..utils.files import atomic_write_text, read_json
from . import pages
from .env import PRODUCT_WINDOW, WebShopEnv
from .settings import EnvConfig
from .shop import SEARCH_RETURN_N, WebShop
from .store import ProductStore

ENV_ID = "apo_lightning/WebShop-v0"
SPLITS = ("train", "val", "test")
#: The float whose ``str`` is longest (24 characters): the done page prints the score with ``str``.
_LONGEST_FLOAT = -2.2250738585072014e-308
#: Results-page number used for the length bound when the episode has no step limit (each 'Next >' adds one).
_UNLIMITED_PAGE = 10**18
#: The buttons a page can show, as an action clicks them (lower case).
_BUTTONS = ("search", "back to search", "< prev", "next >", "description", "features", "reviews", "attributes",
            "buy now")


class WebShopGymEnv(gym.Env[str, str]):
    """One WebShop episode at a time through gymnasium's API, over a ``WebShopEnv``.

    Args:
        data_dir: WebShop data folder; "synthetic" = the generated synthetic catalog (``data/synthetic/seed0`` in
            the current directory, generated on first use); None = the data-location rule of every command
            (``$APO_WEBSHOP_DATA``, else ``data/webshop_1k`` if present, else the synthetic catalog; said once per
            process on stderr). Catalogs are loaded once per process and shared by every env on the same
            ``(data_dir, goals, catalog_seed)``.
        split: the goals ``reset`` draws from: "train" | "val" | "test" (test [0, 500), val [500, 1500), train
            [1500, N)), or None for every goal.
        observation_mode: "text" (' [SEP] '-joined) or "text_rich" (marked buttons).
        goals: "synthetic" (attribute-based, as the paper's IL/RL) or "human" goals.
        catalog_seed: the catalog seed: prices, goals and their order (233 reproduces WebShop). Not the seed of
            ``reset``.
        max_steps: steps per episode; the step that reaches it without a purchase ends the episode with
            ``truncated=True`` and reward 0. None = no limit (as the original).
        show_attrs: show the item page's Attributes button (off upstream).

    Attributes:
        engine: the wrapped ``WebShopEnv``.
        shop: the loaded catalog.
        goal_indices: the indices into ``shop.goals`` that ``reset`` draws from.
        observation_space: ``Text`` covering every page of this catalog (see :func:`text_spaces`).
        action_space: ``Text`` long enough for ``search[...]`` with any instruction or ``click[...]`` with any
            clickable; an action outside it is still passed to the engine, which decides whether it is valid.

    Raises:
        ValueError: an unknown ``split``, ``goals`` or ``observation_mode``, ``max_steps`` < 1,
            or an empty split (the message names the value and what is allowed).
        WebShopDataError: a missing or malformed data file (named in the message).
    """

    metadata = {"render_modes": []}  # the observation is the page: print it

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        split: str | None = "train",
        observation_mode: str = "text",
        goals: str = "synthetic",
        catalog_seed: int = 233,
        max_steps: int | None = 15,
        show_attrs: bool = False,
    ):
        if split is not None and split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")
        config = EnvConfig(data_dir=None if data_dir is None else str(data_dir), goals=goals, seed=catalog_seed)
        self.shop: WebShop = config.shop()  # loaded once per process (EnvConfig's cache)
        self.engine = WebShopEnv(self.shop, observation_mode, max_steps=max_steps, show_attrs=show_attrs)
        self.goal_indices = range(len(self.shop.goals)) if split is None else self.shop.split(split)
        self.split = split
        self.observation_space, self.action_space = text_spaces(self.shop, observation_mode, show_attrs, max_steps)
        self._ended = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode: on ``options["goal_index"]`` if given, else on a goal of the split drawn with the env's
        random generator (seeded by ``seed``).

        Args:
            seed: seeds the generator that draws goals (gymnasium's ``np_random``); None keeps its state.
            options: None or ``{"goal_index": int}``, an index into ``shop.goals`` inside the split.

        Returns:
            ``(observation, info)``: the search page, and ``info`` as :meth:`step` gives it, without ``valid``.

        Raises:
            ValueError: an unknown key in ``options``, or a goal index outside the split (the message names the
                split's range).
        """
        super().reset(seed=seed)
        options = options or {}
        unknown = set(options) - {"goal_index"}
        if unknown:
            raise ValueError(f"reset options may only hold 'goal_index', got {sorted(unknown)}")
        if "goal_index" in options:
            goal_index = int(options["goal_index"])
            if goal_index not in self.goal_indices:
                raise ValueError(f"options['goal_index'] must be in split {self.split!r} "
                                 f"[{self.goal_indices.start}, {self.goal_indices.stop}), got {goal_index}")
        else:
            goal_index = self.goal_indices[int(self.np_random.integers(len(self.goal_indices)))]
        observation = self.engine.reset(goal_index)
        self._ended = False
        return observation, self._info({})

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Take one action, ``search[keywords]`` or ``click[value]``; anything else is an invalid no-op step.

        Returns:
            ``(observation, reward, terminated, truncated, info)``. ``reward``: the WebShop score (0…1) at Buy Now,
            else 0. ``terminated``: the action bought a product. ``truncated``: the step limit ended the episode
            without a purchase. ``info``: ``instruction``, ``available_actions`` (``{"has_search_bar": bool,
            "clickables": [str, ...]}`` of the new page), ``goal_index``, ``score`` (the episode's WebShop score so
            far, 0…1), ``won`` (score == 1), ``valid`` (the engine executed the action), ``page``, ``num_steps``, and
            after Buy Now ``reward_info``, ``asin`` and ``options`` (as ``WebShopEnv.step`` gives them).

        Raises:
            RuntimeError: the episode has ended (call ``reset``) or never started.
        """
        if self._ended:
            raise RuntimeError("the episode has ended (a purchase or the step limit); call reset() before step()")
        observation, reward, done, info = self.engine.step(action)
        truncated = bool(info["truncated"])
        terminated = done and not truncated
        self._ended = done
        return observation, float(reward), terminated, truncated, self._info(info)

    def _info(self, engine_info: dict[str, Any]) -> dict[str, Any]:
        """A fresh info dict (the engine's is new at every step, as are its available actions)."""
        score = float(self.engine.reward)
        return {"page": self.engine.page.kind, "num_steps": self.engine.num_steps, **engine_info,
                "instruction": self.engine.instruction_text,
                "available_actions": self.engine.available_actions(), "goal_index": self.engine.goal_index,
                "score": score, "won": score == 1.0}


def text_spaces(shop: WebShop, observation_mode: str = "text", show_attrs: bool = False,
                max_steps: int | None = 15) -> tuple[spaces.Text, spaces.Text]:
    """The observation and action spaces of ``shop``'s episodes (cached per catalog and settings).

    Observation: ``Text(1, L)`` where ``L`` is the length of the longest page any episode can show, computed with
    the engine's own page builders (``pages``): the search page and every product's item page (every option label
    marked as clicked in "text_rich") and four sub-pages with the longest instruction; the done page with each
    product's longest option values; a results page of the ten products whose entries are longest (a product's
    entry adds the same length to any results page), numbered as the step limit allows. Its character set is every
    character of those pages and of every goal's instruction, their lower-case forms (clicks are lower-cased), and
    the printable ASCII characters (fixed page words, numbers, markup, JSON escapes, and what an agent types).

    Action: ``Text(0, A)`` over the same characters, where ``A`` fits ``search[...]`` around the longest instruction
    and ``click[...]`` around the longest clickable (an option value, an ASIN, a button).

    Args:
        shop: the loaded catalog.
        observation_mode: "text" or "text_rich".
        show_attrs: whether item pages show the Attributes button.
        max_steps: the episode's step limit (bounds the results-page number), or None.

    Returns:
        ``(observation_space, action_space)``, new spaces each call. The bound takes one pass over the products; it
        is computed once per process, catalog and settings, and for a catalog stored on disk (``store``) kept in
        the store's seed folder, so that later processes read it.

    Raises:
        ValueError: ``observation_mode`` is not "text" or "text_rich".
    """
    if observation_mode not in ("text", "text_rich"):
        raise ValueError(f"observation_mode must be one of ('text', 'text_rich'), got {observation_mode!r}")
    max_length, longest_action, charset = _page_bound(shop, observation_mode, show_attrs, max_steps)
    return (spaces.Text(max_length, min_length=1, charset=charset),
            spaces.Text(longest_action, min_length=0, charset=charset))


@lru_cache(maxsize=8)
def _page_bound(shop: WebShop, mode: str, show_attrs: bool, max_steps: int | None) -> tuple[int, int, frozenset[str]]:
    """``(longest page, longest action, characters)``; see :func:`text_spaces`. A stored catalog keeps it in
    ``<store>/seed-<seed>/space_bound-<mode>-<show_attrs>-<max_steps>.json`` (written atomically)."""
    if not isinstance(shop.products, ProductStore):
        return _measure_page_bound(shop, mode, show_attrs, max_steps)
    path = shop.products.seed_folder(shop.seed) / f"space_bound-{mode}-{int(show_attrs)}-{max_steps}.json"
    if path.is_file():
        bound = read_json(path, dict, "a JSON object {longest_page, longest_action, characters}")
        return bound["longest_page"], bound["longest_action"], frozenset(bound["characters"])
    longest_page, longest_action, chars = _measure_page_bound(shop, mode, show_attrs, max_steps)
    atomic_write_text(path, json.dumps({"longest_page": longest_page, "longest_action": longest_action,
                                        "characters": "".join(sorted(chars))}))
    return longest_page, longest_action, chars


def _measure_page_bound(shop: WebShop, mode: str, show_attrs: bool,
                        max_steps: int | None) -> tuple[int, int, frozenset[str]]:
    """``(longest page, longest action, characters)`` from one pass over ``shop``'s products and goals."""
    chars: set[str] = set(string.printable)

    def length(page: pages.Page, url: str = "", visited: set[str] | None = None) -> int:
        text = pages.to_text(page) if mode == "text" else pages.to_text_rich(page, url, visited or set())
        chars.update(text)
        return len(text)

    for goal in shop.goals:
        chars.update(goal["instruction_text"])
    instructions = {max((g["instruction_text"] for g in shop.goals), key=key) for key in (len, _stripped_length)}
    page_number = max_steps + 1 if max_steps is not None else _UNLIMITED_PAGE
    total = max(SEARCH_RETURN_N, len(shop.products))
    longest_page = 0
    for instruction in instructions:
        base = length(pages.results_page(instruction, page_number, total, []))
        entries = []
        longest_page = max(longest_page, length(pages.search_page(instruction)))
        for product in shop.products:
            shown = length(pages.results_page(instruction, page_number, total, [product]), visited={product["asin"]})
            entries.append(shown - base)
            labels = [value for values in product["options"].values() for value in values]
            clicked = " ".join(f'"{label}"' for label in labels)  # a URL in which every option label reads as clicked
            longest_page = max(longest_page, length(pages.item_page(instruction, product, show_attrs), url=clicked),
                               *(length(pages.item_sub_page(instruction, product, sub)) for sub in pages.SUB_PAGES))
        longest_page = max(longest_page, base + sum(sorted(entries, reverse=True)[:PRODUCT_WINDOW]))
    longest_click = max(len(button) for button in _BUTTONS)
    for product in shop.products:
        longest = {name: max(values, key=lambda v: len(pages.flask_tojson(v)))
                   for name, values in product["options"].items() if values}
        for options in (longest, {name.lower(): value for name, value in longest.items()}):
            longest_page = max(longest_page, length(pages.done_page(product["asin"], options, _LONGEST_FLOAT)))
        values = [value for values in product["options"].values() for value in values]
        longest_click = max([longest_click, len(product["asin"])] + [len(v.lower()) for v in values])
    chars.update("".join(chars).lower())
    longest_action = max(len("search[]") + max(len(t) for t in instructions), len("click[]") + longest_click)
    return longest_page, longest_action, frozenset(chars)


def _stripped_length(text: str) -> int:
    return len(text.strip())


gym.register(id=ENV_ID, entry_point=f"{__name__}:WebShopGymEnv", nondeterministic=False)
