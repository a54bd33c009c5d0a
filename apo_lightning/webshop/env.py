"""``WebShopEnv``: one shopping session over a shared ``WebShop``, step by step, as the original text env.

Source: princeton-nlp/WebShop ``web_agent_site/envs/web_agent_text_env.py`` (``WebAgentTextEnv.step``,
``get_available_actions``, ``SimServer.receive`` and its page handlers, ``SimBrowser``) and ``engine/engine.py``
(``parse_action``); docs/webshop.md, "What is reproduced". The session keeps the original's URL string because two
behaviours depend on it: which page '< Prev' returns to, and which option labels ``text_rich`` shows as clicked.
"""

from __future__ import annotations

import json
from typing import Any

from . import pages
from .pages import Page
from .shop import WebShop

BASE_URL = "http://127.0.0.1:3000"
PRODUCT_WINDOW = 10  # results per page
OBSERVATION_MODES = ("text", "text_rich")


def parse_action(action: str) -> tuple[str, str | None]:
    """Split ``name[arg]`` as ``re.match(r'(.+)\\[(.+)\\]', action)`` does, in linear time.

    Greedy first group, anchored at the start only, ``.`` not crossing a newline: the argument runs from the last
    '[' (at index >= 1) that has a ']' at least two characters later, to the last ']' of the first line. Anything
    after that ']' is ignored. No match gives ``(action, None)``. (The regex itself backtracks quadratically on
    long bracket-heavy strings, which an LLM can produce.)
    """
    line = action.split("\n", 1)[0]
    close = line.rfind("]")
    if close < 3:
        return action, None
    open_ = line.rfind("[", 1, close - 1)
    if open_ < 1:
        return action, None
    return line[:open_], line[open_ + 1:close]


def page_name(url: str | None) -> str | None:
    """Which page a URL points at (``SimServer.get_page_name``): a substring test, in this order."""
    if url is None:
        return None
    for name in ("search_results", "item_page", "item_sub_page", "done"):
        if name in url:
            return name
    return ""


class WebShopEnv:
    """A WebShop text environment for one episode at a time.

    Args:
        shop: the loaded catalog (shared, read-only; many envs can use one).
        observation_mode: "text" (' [SEP] '-joined, as RAGEN and verl-agent) or "text_rich" (marked buttons).
        max_steps: end the episode with reward 0 after this many steps without a purchase (ReAct / verl-agent
            use 15); None = no limit, as the original.
        show_attrs: show the item page's Attributes button (leaks labels; off upstream).

    Raises:
        ValueError: unknown ``observation_mode`` or ``max_steps`` < 1.
    """

    def __init__(self, shop: WebShop, observation_mode: str = "text", max_steps: int | None = 15,
                 show_attrs: bool = False):
        if observation_mode not in OBSERVATION_MODES:
            raise ValueError(f"observation_mode must be one of {OBSERVATION_MODES}, got {observation_mode!r}")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
        self.shop = shop
        self.observation_mode = observation_mode
        self.max_steps = max_steps
        self.show_attrs = show_attrs
        self.goal: dict | None = None
        self.goal_index: int | None = None

    # ------------------------------------------------------------------------------------------------ API
    def reset(self, goal_index: int) -> str:
        """Start an episode on goal ``goal_index`` (an index into ``shop.goals``) and return the search page.

        Raises:
            IndexError: ``goal_index`` is out of range.
        """
        if not 0 <= goal_index < len(self.shop.goals):
            raise IndexError(f"goal_index {goal_index} out of range [0, {len(self.shop.goals)})")
        self.goal_index = goal_index
        self.goal = self.shop.goals[goal_index]
        self.session_id = str(goal_index)
        self.num_steps = 0
        self.done = False
        self.reward = 0.0
        self.reward_info: dict | None = None
        self._back_to_search()
        return self.observation

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Take one action: ``search[keywords]`` or ``click[value]``; anything else is a no-op.

        Returns:
            ``(observation, reward, done, info)``. ``reward`` is the WebShop score at Buy Now, else 0.
            ``info``: ``valid`` (the action was executed), ``page`` (page kind after the step), ``num_steps``,
            ``truncated`` (the step limit ended the episode), and at Buy Now ``reward_info`` (the verbose reward
            dict; empty, and the reward 0, for a goal without an ``asin``: ``goals.instruction_goal``), ``asin``
            and ``options``.

        Raises:
            RuntimeError: ``reset`` was never called.
        """
        if self.goal is None:
            raise RuntimeError("call reset(goal_index) before step()")
        if self.done:
            return self.observation, 0.0, True, self._info(valid=False)
        self.num_steps += 1
        name, arg = parse_action(action) if isinstance(action, str) else (action, None)
        if arg is not None:
            arg = arg.lower()
        reward, valid = 0.0, True
        if name == "search" and arg:
            self._search_results(arg.split(" "), page=1)
        elif name == "click" and arg in self.page.clickables and arg != "search":
            reward = self._click(arg)
        else:
            valid = False
        truncated = not self.done and self.max_steps is not None and self.num_steps >= self.max_steps
        if truncated:
            self.done = True
        info = self._info(valid=valid, truncated=truncated)
        return self.observation, reward, self.done, info

    def available_actions(self) -> dict[str, Any]:
        """``{"has_search_bar": bool, "clickables": [str, ...]}`` of the current page, in the original order."""
        return {"has_search_bar": self.page.has_search_bar, "clickables": list(self.page.clickables)}

    @property
    def observation(self) -> str:
        """The current page in this env's observation mode."""
        if self.observation_mode == "text":
            return pages.to_text(self.page)
        return pages.to_text_rich(self.page, self.url, self.visited_asins)

    @property
    def instruction_text(self) -> str:
        """The current goal's instruction."""
        return self.goal["instruction_text"]

    # ------------------------------------------------------------------------------------------------ pages
    def _info(self, valid: bool, truncated: bool = False) -> dict[str, Any]:
        info = {"valid": valid, "page": self.page.kind, "num_steps": self.num_steps, "truncated": truncated}
        if self.reward_info is not None:
            info.update(reward_info=self.reward_info, asin=self.asin, options=dict(self.options))
        return info

    def _back_to_search(self) -> None:
        """The index page; resets keywords, page, product, visited set and options (``SimServer.receive``)."""
        self.keywords: list[str] | None = None
        self.results_page: int | None = None
        self.asin: str | None = None
        self.visited_asins: set[str] = set()
        self.options: dict[str, str] = {}
        self.url = f"{BASE_URL}/{self.session_id}"
        self.page: Page = pages.search_page(self.instruction_text)

    def _search_results(self, keywords: list[str], page: int) -> None:
        self.keywords, self.results_page = keywords, page
        self.asin, self.options = None, {}
        products = self.shop.search_products(keywords)
        shown = products[(page - 1) * PRODUCT_WINDOW:page * PRODUCT_WINDOW]
        self.url = f"{BASE_URL}/search_results/{self.session_id}/{'+'.join(keywords)}/{page}"
        self.page = pages.results_page(self.instruction_text, page, len(products), shown)

    def _item_page(self, clicked: str) -> None:
        target = self.page.clickables[clicked]
        if target.kind == pages.LINK:
            self.asin = clicked.upper()
            self.visited_asins.add(self.asin)
        elif target.kind == "option":
            self.options[target.option.lower()] = clicked
        product = self.shop.product_by_asin[self.asin]
        self.url = (f"{BASE_URL}/item_page/{self.session_id}/{self.asin}/{'+'.join(self.keywords)}/"
                    f"{self.results_page}/{json.dumps(self.options)}")
        self.page = pages.item_page(self.instruction_text, product, self.show_attrs)

    def _item_sub_page(self, clicked: str) -> None:
        sub_page = next(name for name in pages.SUB_PAGES if name.lower() == clicked)
        product = self.shop.product_by_asin[self.asin]
        self.url = (f"{BASE_URL}/item_sub_page/{self.session_id}/{self.asin}/{'+'.join(self.keywords)}/"
                    f"{self.results_page}/{sub_page}/{self.options}")
        self.page = pages.item_sub_page(self.instruction_text, product, sub_page)

    def _buy(self) -> float:
        if "asin" in self.goal:
            self.reward, self.reward_info = self.shop.reward(self.goal, self.asin, self.options)
        else:  # only an instruction (goals.instruction_goal): nothing to score the purchase against
            self.reward, self.reward_info = 0.0, {}
        self.done = True
        self.url = f"{BASE_URL}/done/{self.session_id}/{self.asin}/{self.options}"
        self.page = pages.done_page(self.asin, self.options, self.reward)
        return self.reward

    def _click(self, clicked: str) -> float:
        """Route a click as ``SimServer.receive`` does; returns the reward (non-zero only at Buy Now)."""
        current = page_name(self.url)
        if clicked == "buy now":
            return self._buy()
        if clicked == "back to search":
            self._back_to_search()
        elif clicked == "next >" and current == "search_results":
            self._search_results(self.keywords, self.results_page + 1)
        elif clicked == "< prev" and current == "search_results":
            self._search_results(self.keywords, self.results_page - 1)
        elif clicked == "< prev" and current == "item_sub_page":
            self._item_page(clicked)
        elif clicked == "< prev" and current == "item_page":
            self._search_results(self.keywords, self.results_page)
        elif clicked in ("description", "features", "reviews", "attributes"):
            self._item_sub_page(clicked)
        else:
            self._item_page(clicked)
        return 0.0
