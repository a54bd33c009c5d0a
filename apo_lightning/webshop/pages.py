"""WebShop pages as the text env sees them: visible text nodes, clickables, and the two text observations.

The original renders Jinja templates to HTML and strips them with BeautifulSoup
(``WebAgentTextEnv.convert_html_to_text``, ``get_available_actions``). Here each page is built directly as the list
of visible text nodes that BeautifulSoup would return for the rendered template, which gives the same
observations without HTML (docs/webshop.md, "What is reproduced"; checked against the golden episode files).

A node is ``(kind, text)`` with kind ``TEXT`` (plain text), ``BUTTON`` (text inside a <button>), ``LABEL`` (an
option's label) or ``LINK`` (a product link on the results page). ``text`` is the raw node string.
"""

from __future__ import annotations

import json
from typing import NamedTuple

TEXT, BUTTON, LABEL, LINK = "text", "button", "label", "link"
_ASCII_SPACES = " \n\t\x0c\r"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")  # engine.py ACTION_TO_TEMPLATE order


class Clickable(NamedTuple):
    """What a clickable key refers to: a button, a product link (``asin``) or an option radio (``option``)."""

    kind: str
    option: str | None = None


class Page(NamedTuple):
    """One rendered page: its kind, visible text nodes and clickables (key -> Clickable, in the original order)."""

    kind: str  # "index" | "search_results" | "item_page" | "item_sub_page" | "done"
    nodes: list[tuple[str, str]]
    clickables: dict[str, Clickable]
    has_search_bar: bool = False


def _add(nodes: list, kind: str, text: str) -> None:
    """Append a text node as BeautifulSoup would keep it.

    bs4 collapses a whitespace-only string to "\\n" if it holds a newline (then the env drops it) and to " "
    otherwise; an empty element has no text node at all.
    """
    if not text:
        return
    if not text.strip(_ASCII_SPACES):
        if "\n" in text:
            return
        text = " "
    nodes.append((kind, text))


def _header(nodes: list, instruction: str, prev: bool) -> None:
    _add(nodes, TEXT, "Instruction:")
    _add(nodes, TEXT, instruction)
    _add(nodes, BUTTON, "Back to Search")
    if prev:
        _add(nodes, BUTTON, "< Prev")


def _clickables(nodes: list, options: dict[str, list[str]] | None = None) -> dict[str, Clickable]:
    """Buttons and product links (lower-cased text), then option radio values; a later duplicate key overrides."""
    clickables: dict[str, Clickable] = {}
    for kind, text in nodes:
        if kind == BUTTON:
            clickables[text.lower()] = Clickable(BUTTON)
    for kind, text in nodes:
        if kind == LINK:
            clickables[text.lower()] = Clickable(LINK)
    for name, values in (options or {}).items():
        for value in values:
            clickables[value] = Clickable("option", name)
    return clickables


def shown_text(page: Page, key: str) -> str:
    """The text ``page`` shows for its clickable ``key``: a button's or a product link's text as written ("Buy Now",
    "B07XYZ1234"; keys are lower-cased), an option value as is.

    Raises:
        KeyError: ``key`` is not one of ``page.clickables``.
    """
    clickable = page.clickables[key]
    if clickable.kind != "option":
        for kind, text in page.nodes:
            if kind == clickable.kind and text.lower() == key:
                return text
    return key


def search_page(instruction: str) -> Page:
    """The start page (``search_page.html``): has the search bar; its only clickable, 'search', is refused."""
    nodes: list = []
    _add(nodes, TEXT, "WebShop")
    _add(nodes, TEXT, "Instruction: ")
    _add(nodes, TEXT, instruction)
    _add(nodes, BUTTON, "Search")
    return Page("index", nodes, _clickables(nodes), has_search_bar=True)


def results_page(instruction: str, page: int, total: int, products: list[dict]) -> Page:
    """``results_page.html``: page ``page`` of ``total`` hits showing ``products`` (at most 10).

    'Next >' is always shown, even past the last hit; '< Prev' only when page > 1.
    """
    nodes: list = []
    _header(nodes, instruction, prev=False)
    _add(nodes, TEXT, f"Page {page} (Total results: {total})")
    if page > 1:
        _add(nodes, BUTTON, "< Prev")
    _add(nodes, BUTTON, "Next >")
    for product in products:
        _add(nodes, LINK, product["asin"])
        _add(nodes, TEXT, product["Title"])
        _add(nodes, TEXT, product["Price"])
    return Page("search_results", nodes, _clickables(nodes))


def item_page(instruction: str, product: dict, show_attrs: bool = False) -> Page:
    """``item_page.html``: options (name, then a label per value), title, price, rating, sub-page buttons, Buy Now."""
    nodes: list = []
    _header(nodes, instruction, prev=True)
    for name, values in product["options"].items():
        _add(nodes, TEXT, name)
        for value in values:
            _add(nodes, LABEL, value)
    _add(nodes, TEXT, product["Title"])
    _add(nodes, TEXT, f"Price: {product['Price']}")
    _add(nodes, TEXT, f"Rating: {product['Rating']}")
    for sub_page in SUB_PAGES[:4 if show_attrs else 3]:
        _add(nodes, BUTTON, sub_page)
    _add(nodes, BUTTON, "Buy Now")
    return Page("item_page", nodes, _clickables(nodes, product["options"]))


def item_sub_page(instruction: str, product: dict, sub_page: str) -> Page:
    """A product's Description / Features / Reviews / Attributes page (reviews are always empty)."""
    nodes: list = []
    _header(nodes, instruction, prev=True)
    if sub_page == "Description":
        _add(nodes, TEXT, product["Description"])
    elif sub_page == "Features":
        for bullet in product["BulletPoints"]:
            _add(nodes, TEXT, f" {bullet}")
    elif sub_page == "Attributes":
        for attribute in product["Attributes"]:
            _add(nodes, TEXT, f" {attribute}")
        for key in ("category", "query", "product_category"):
            _add(nodes, TEXT, product[key])
    return Page("item_sub_page", nodes, _clickables(nodes))


def flask_tojson(value: object) -> str:
    """Jinja's ``tojson`` filter under Flask: sorted keys, ASCII-only, and <, >, &, ' escaped as \\u00XX."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=True)
    return (
        text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")
    )


def done_page(asin: str, options: dict[str, str], reward: float) -> Page:
    """``done_page.html`` as the text env renders it: hidden blocks included, goal fields empty, no clickables."""
    nodes: list = []
    for text in ("Thank you for shopping with us!", "Your code: ", "None", " (Paste it in your MTurk interface.)",
                 "Purchased", "asin", asin, "options", flask_tojson(options), "attrs", "None", "category", "None",
                 "query", "None", "product category", "None", "Target", "asin", "options", "attrs",
                 "price upper", "instuction text", "category", "product category", "query", "Goal ", "None",
                 "Reward", "Your score (min 0.0, max 1.0)", str(reward), "Reward Details ", "None"):
        _add(nodes, TEXT, text)
    return Page("done", nodes, {})


def to_text(page: Page) -> str:
    """The ``text`` ("simple") observation: every node stripped, joined by ' [SEP] '."""
    return " [SEP] ".join(text.strip() for _, text in page.nodes)


def to_text_rich(page: Page, url: str, visited_asins: set[str]) -> str:
    """The ``text_rich`` observation: buttons, option labels and product links marked, one node per line.

    An option label counts as clicked when ``"label"`` (with double quotes) occurs in the page URL, which carries
    the selected options as JSON; each clicked label also prepends ``You have clicked {label}.`` to the whole
    observation. A product link is a clicked button when its ASIN was visited in this search session.
    """
    observation = ""
    for kind, text in page.nodes:
        if kind == BUTTON:
            piece = f"[button] {text} [button_]"
        elif kind == LABEL:
            if f'"{text}"' in url:
                piece = f"  [clicked button] {text} [clicked button_]"
                observation = f"You have clicked {text}.\n" + observation
            else:
                piece = f"  [button] {text} [button_]"
        elif kind == LINK:
            state = "clicked button" if text in visited_asins else "button"
            piece = f"\n[{state}] {text} [{state}_]"
        else:
            piece = text
        observation += piece + "\n"
    return observation
