"""HTML for people: a ``WebShopEnv``'s current page drawn as the original WebShop site draws it.

The original site's templates (princeton-nlp/WebShop ``web_agent_site/templates``: search, results, item,
description/features/reviews and done pages) give the layout; the content comes only from the env. Every text node
of ``env.page`` is shown, in the env's order, and every clickable of the page is one submit button whose value is
the env action ``click[<key>]`` (a product link, an option value, Back to Search, < Prev, Next >, a sub-page,
Buy Now); the search page's form sends its query, which the server turns into ``search[<query>]``. So a person sees
exactly the page an agent is shown as text, and can do exactly what the agent can. Nothing here changes the env.

:func:`render_page` builds a whole page: a bar of the server's own controls (goal, step, new goal, replay
navigation), notices, the env's page inside one form, and a folded view of the text observation an agent gets.
"""

from __future__ import annotations

import html
from typing import Iterable, Sequence

from . import pages
from .env import WebShopEnv, parse_action
from .pages import BUTTON, LABEL, LINK, TEXT

#: The score line of the done page, after which the env's done page holds the score.
SCORE_LABEL = "Your score (min 0.0, max 1.0)"

STYLE = """
body { font-family: Arial, Helvetica, sans-serif; margin: 0; color: #222; background: white; }
.bar { background: #f4f4f4; border-bottom: 1px solid #ddd; padding: 6px 16px; font-size: 14px; }
.bar form { display: inline; }
.bar .sep { color: #aaa; padding: 0 6px; }
.bar button, .bar a { font-size: 13px; }
.notice { margin: 10px 16px; padding: 8px 12px; border-radius: 4px; background: #eef5ff; border: 1px solid #bcd4f5; }
.notice.warning { background: #fff6e0; border-color: #f0c36d; }
.notice.error { background: #fde8e8; border-color: #e99; }
main { max-width: 1100px; margin: 0 auto; padding: 10px 16px 30px; }
#logo { text-align: center; color: #666; }
#logo h2 { font-size: 48px; margin: 40px 0 10px; text-shadow: 1px 2px 3px #999; letter-spacing: -1px; }
#instruction-text { margin: 10px 0; border: 3px solid #797474; border-radius: 20px; padding: 5px 14px; }
#instruction-text h4 { margin: 6px 0; font-size: 17px; font-weight: normal; }
.index #instruction-text { text-align: center; }
.search-row { display: flex; gap: 6px; margin: 18px auto; max-width: 640px; }
.search-row input { flex: 1; height: 38px; font-size: 16px; padding: 0 10px; border: 1px solid #ccc; }
.nav { margin: 10px 0; display: flex; gap: 10px; align-items: center; flex-wrap: wrap; }
.btn { font-size: 13px; letter-spacing: 1px; padding: 7px 14px; border-radius: 40px; background: transparent;
       cursor: pointer; }
.btn-success { color: rgb(64, 150, 64); border: 2px solid rgba(103, 192, 103, 0.75); }
.btn-success:hover:enabled { color: #fff; background: rgba(103, 192, 103, 0.75); }
.btn-primary { color: rgb(40, 110, 165); border: 2px solid rgba(58, 133, 191, 0.75); }
.btn-primary:hover:enabled { color: #fff; background: rgba(58, 133, 191, 0.75); }
.btn.purchase { color: #000; background: rgb(250, 167, 13); border: 2px solid rgb(230, 150, 5); font-size: 17px;
                padding: 10px 22px; }
.btn.purchase:hover:enabled { background: rgb(253, 199, 98); }
button:disabled { cursor: default; }
.option:disabled { color: #222; }
.product-link:disabled { color: #116396; }
.grid-container { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); padding: 10px 0; }
.grid-item { border: 1px solid #d8d8d8; margin: 5px; padding: 16px; text-align: center; }
.product-link { background: none; border: none; color: #116396; font-size: 17px; font-weight: bold;
                text-decoration: underline; cursor: pointer; padding: 0; }
.product-title { font-weight: bold; font-size: 16px; }
.result-img { max-height: 200px; max-width: 260px; }
.item { display: grid; grid-template-columns: 1fr 1.5fr auto; gap: 24px; margin-top: 14px; }
.item-page-img { max-height: 400px; max-width: 100%; }
.option-group h4 { margin: 14px 0 6px; }
.radio-toolbar { display: flex; flex-wrap: wrap; gap: 6px; }
.option { background: rgb(245, 241, 241); padding: 9px 10px; font-size: 14px; border: 1px solid #444;
          border-radius: 4px; cursor: pointer; }
.option:hover:enabled { background: rgb(255, 247, 217); }
.option.selected { background: rgb(255, 234, 163); font-weight: bold; }
.sub-pages { display: flex; gap: 10px; margin-top: 16px; flex-wrap: wrap; }
.product-info { font-size: 17px; white-space: pre-line; }
#thankyou { text-align: center; color: #666; }
#thankyou h1 { font-size: 44px; margin: 40px 0 10px; letter-spacing: -1px; }
#reward { text-align: center; }
#reward pre { font-size: 28px; margin: 8px 0; }
pre { white-space: pre-wrap; }
table.details { border-collapse: collapse; margin: 8px 0; }
table.details td, table.details th { border: 1px solid #ddd; padding: 4px 8px; text-align: left; font-size: 14px; }
.next-action { outline: 4px solid #e8590c; outline-offset: 2px; }
#agent-view { max-width: 1100px; margin: 0 auto 30px; padding: 0 16px; font-size: 14px; color: #444; }
#agent-view pre { background: #f8f8f8; border: 1px solid #ddd; padding: 8px; }
.turn { max-width: 1100px; margin: 10px auto; padding: 8px 16px; background: #fafafa; border: 1px solid #ddd; }
"""


def esc(text: object) -> str:
    """``text`` as HTML text or attribute value (``&``, ``<``, ``>`` and both quotes escaped)."""
    return html.escape(str(text), quote=True)


class _Controls:
    """Buttons that send env actions; disabled on a read-only page; the replay's next action outlined."""

    def __init__(self, env: WebShopEnv, active: bool, highlight: str | None):
        self.env, self.active = env, active
        name, arg = parse_action(highlight) if highlight else (None, None)
        self.next_click = arg.lower() if name == "click" and arg is not None else None
        self.next_search = arg if name == "search" else None

    def click(self, key: str, label: str, css: str, extra: str = "") -> str:
        """A submit button for ``click[key]`` showing ``label``; ``key`` must be a clickable of the page."""
        if key not in self.env.page.clickables:
            raise ValueError(f"{key!r} is not a clickable of the {self.env.page.kind} page")
        if key == self.next_click:
            css += " next-action"
        disabled = "" if self.active else " disabled"
        return (f'<button type="submit" name="action" value="{esc(f"click[{key}]")}" class="{css}"{extra}'
                f'{disabled}>{esc(label)}</button>')


def _texts(nodes: Iterable[tuple[str, str]]) -> list[str]:
    return [text for _, text in nodes]


def _header(nodes: Sequence[tuple[str, str]], c: _Controls) -> tuple[str, int]:
    """The instruction box and the Back to Search / < Prev buttons of every page but search and done; returns the
    HTML and how many nodes it drew."""
    assert _texts(nodes[:3])[::2] == ["Instruction:", "Back to Search"], nodes[:3]
    buttons = [c.click("back to search", nodes[2][1], "btn btn-success")]
    used = 3
    if len(nodes) > 3 and nodes[3] == (BUTTON, "< Prev"):
        buttons.append(c.click("< prev", "< Prev", "btn btn-primary"))
        used = 4
    box = f'<div id="instruction-text"><h4>Instruction:<br>{esc(nodes[1][1])}</h4></div>'
    return box + f'<div class="nav">{"".join(buttons)}</div>', used


def _image(url: str | None, css: str, show: bool) -> str:
    return f'<img src="{esc(url)}" class="{css}" alt="" referrerpolicy="no-referrer">' if show and url else ""


def _search_page(env: WebShopEnv, c: _Controls) -> str:
    texts = _texts(env.page.nodes)  # "WebShop", "Instruction: ", the instruction, "Search"
    value = f' value="{esc(c.next_search)}"' if c.next_search is not None else ""
    disabled = "" if c.active else " disabled"
    search_css = "btn btn-success" + (" next-action" if c.next_search is not None else "")
    return (f'<div id="logo"><h2>{esc(texts[0])}</h2></div>'
            f'<div id="instruction-text"><h4>{esc(texts[1])}<br>{esc(texts[2])}</h4></div>'
            f'<div class="search-row"><input id="search_input" type="text" name="search_query" '
            f'placeholder="Search..." required autofocus{value}{disabled}>'
            f'<button type="submit" class="{search_css}" id="search_button"{disabled}>{esc(texts[3])}</button></div>')


def _results_page(env: WebShopEnv, c: _Controls, images: bool) -> str:
    nodes = env.page.nodes
    head, i = _header(nodes, c)
    nav = [f'<span class="page-count">{esc(nodes[i][1])}</span>']
    i += 1
    while i < len(nodes) and nodes[i][0] == BUTTON:  # < Prev (page > 1), Next >
        nav.append(c.click(nodes[i][1].lower(), nodes[i][1], "btn btn-primary"))
        i += 1
    items = []
    while i < len(nodes):
        kind, asin = nodes[i]
        assert kind == LINK, nodes[i]
        i += 1
        texts = []  # the title and the price (an empty title has no node)
        while i < len(nodes) and nodes[i][0] == TEXT:
            texts.append(nodes[i][1])
            i += 1
        css = ["product-title", "product-price"] if len(texts) == 2 else ["product-price"] * len(texts)
        product = env.shop.product_by_asin.get(asin.upper(), {})
        items.append(f'<div class="grid-item">{_image(product.get("MainImage"), "result-img", images)}'
                     f'<h4 class="product-asin">{c.click(asin.lower(), asin, "product-link")}</h4>'
                     + "".join(f'<h4 class="{k}">{esc(t)}</h4>' for k, t in zip(css, texts)) + "</div>")
    return (f'{head}<div class="nav results-nav">{"".join(nav)}</div>'
            f'<div class="grid-container">{"".join(items)}</div>')


def _item_page(env: WebShopEnv, c: _Controls, images: bool) -> str:
    nodes = env.page.nodes
    head, i = _header(nodes, c)
    product = env.shop.product_by_asin[env.asin]
    image = product.get("MainImage")
    groups = []
    while i < len(nodes) and (nodes[i][0] == LABEL or nodes[i][0] == TEXT and i + 1 < len(nodes)
                              and nodes[i + 1][0] == LABEL):  # an option's name (none when empty), its values
        name = ""
        if nodes[i][0] == TEXT:
            name, i = nodes[i][1], i + 1
        buttons = []
        while i < len(nodes) and nodes[i][0] == LABEL:
            value = nodes[i][1]
            option = env.page.clickables[value].option or ""  # the option a click on this value sets
            selected = env.options.get(option.lower()) == value
            if selected and product.get("option_to_image", {}).get(value):
                image = product["option_to_image"][value]
            buttons.append(c.click(value, value, "option selected" if selected else "option",
                                   f' aria-pressed="{"true" if selected else "false"}"'))
            i += 1
        groups.append(f'<div class="option-group"><h4>{esc(name)}</h4>'
                      f'<div class="radio-toolbar">{"".join(buttons)}</div></div>')
    info = []  # title, price, rating (an empty title has no node)
    while i < len(nodes) and nodes[i][0] == TEXT:
        info.append(nodes[i][1])
        i += 1
    tags = ["h2", "h4", "h4"] if len(info) == 3 else ["h4"] * len(info)
    info_html = "".join(f'<{t} class="product-info-line">{esc(text)}</{t}>' for t, text in zip(tags, info))
    sub_pages, buy = [], ""
    for kind, text in nodes[i:]:
        assert kind == BUTTON, (kind, text)
        if text == "Buy Now":
            buy = c.click("buy now", text, "btn purchase")
        else:
            sub_pages.append(c.click(text.lower(), text, "btn btn-primary"))
    return (f'{head}<div class="item"><div>{_image(image, "item-page-img", images)}{"".join(groups)}</div>'
            f'<div>{info_html}'
            f'<div class="sub-pages">{"".join(sub_pages)}</div></div><div>{buy}</div></div>')


def sub_page_name(env: WebShopEnv) -> str:
    """Which sub-page (``pages.SUB_PAGES``) an ``item_sub_page`` env shows, read from the env's page URL.

    Raises:
        ValueError: the env is not on a sub-page.
    """
    for name in pages.SUB_PAGES:
        if env.page.kind == "item_sub_page" and env.url.endswith(f"/{name}/{env.options}"):
            return name
    raise ValueError(f"the env is on a {env.page.kind} page, not an item sub-page (url {env.url})")


def _sub_page(env: WebShopEnv, c: _Controls) -> str:
    nodes = env.page.nodes
    head, i = _header(nodes, c)
    name = sub_page_name(env)
    content = _texts(nodes[i:])
    if name == "Features":
        body = "<ul>" + "".join(f'<li><p class="product-info">{esc(t)}</p></li>' for t in content) + "</ul>"
    else:
        body = "".join(f'<p class="product-info">{esc(t)}</p>' for t in content)
    if not content:
        body = f"<h4>No {name.lower()} found</h4>" if name != "Description" else "<h4>No description</h4>"
    return f'{head}<h3 class="sub-page-name">{esc(name)}</h3><div class="card">{body}</div>'


def _done_page(env: WebShopEnv) -> str:
    texts = _texts(env.page.nodes)
    score = texts[texts.index(SCORE_LABEL) + 1]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in (env.reward_info or {}).items())
    goal = env.goal
    target = "".join(f"<tr><th>{esc(k)}</th><td>{esc(goal.get(k))}</td></tr>"
                     for k in ("asin", "goal_options", "attributes", "price_upper", "instruction_text"))
    return (f'<div id="thankyou"><h1>{esc(texts[0])}</h1></div>'
            f'<h3 id="reward">{esc(SCORE_LABEL)}<pre id="score">{esc(score)}</pre></h3>'
            f'<h4>Purchased</h4><table class="details"><tr><th>asin</th><td id="asin">{esc(env.asin)}</td></tr>'
            f'<tr><th>options</th><td id="options">{esc(pages.flask_tojson(env.options))}</td></tr></table>'
            f'<details id="reward-details"><summary>Reward details and the target</summary>'
            f'<table class="details">{rows}</table><h4>Target</h4><table class="details">{target}</table></details>')


def env_page(env: WebShopEnv, active: bool = True, highlight: str | None = None, images: bool = False) -> str:
    """The env's current page as HTML (the inside of the page's form), as described in the module docstring.

    Args:
        env: an env with an episode.
        active: the buttons can be pressed (False: a read-only page, e.g. a replay).
        highlight: an action to outline (the replay's next action): its button, or the search box and button.
        images: show product images (their URLs point at outside hosts, so off unless asked).

    Raises:
        RuntimeError: the env has no episode.
    """
    if env.goal is None:
        raise RuntimeError("the env has no episode; call reset(goal_index) first")
    c = _Controls(env, active, highlight)
    kind = env.page.kind
    if kind == "index":
        return _search_page(env, c)
    if kind == "search_results":
        return _results_page(env, c, images)
    if kind == "item_page":
        return _item_page(env, c, images)
    if kind == "item_sub_page":
        return _sub_page(env, c)
    return _done_page(env)


def agent_view(env: WebShopEnv) -> str:
    """A folded block with the text observation an agent gets for this page and its available actions."""
    available = env.available_actions()
    actions = (["search[...]"] if available["has_search_bar"] else []) + [
        f"click[{key}]" for key in available["clickables"] if key != "search"]
    return (f'<details id="agent-view"><summary>What an agent sees ({esc(env.observation_mode)} observation)'
            f'</summary><pre>{esc(env.observation)}</pre><p>Actions: {esc(", ".join(actions) or "none")}</p>'
            "</details>")


def render_page(env: WebShopEnv, bar: str, post_to: str | None, step_token: int | None = None,
                notices: Sequence[tuple[str, str]] = (), highlight: str | None = None, images: bool = False,
                after: str = "") -> str:
    """A whole HTML document: ``bar``, ``notices``, the env's page (:func:`env_page`) and the agent's view.

    Args:
        env: an env with an episode.
        bar: HTML of the server's controls (already escaped).
        post_to: where the page's form posts its action (None: a read-only page).
        step_token: the env's step count when the page was drawn, sent back with the action so that the server can
            refuse an action made on a page that is no longer the env's.
        notices: ``(kind, text)`` messages above the page; kind is "info", "warning" or "error".
        highlight: see :func:`env_page`.
        images: see :func:`env_page`.
        after: HTML placed between the page and the agent's view (already escaped).

    Raises:
        RuntimeError: the env has no episode.
    """
    active = post_to is not None and not env.done
    body = env_page(env, active, highlight, images)
    if post_to is not None:
        token = f'<input type="hidden" name="step" value="{step_token}">' if step_token is not None else ""
        body = f'<form method="post" action="{esc(post_to)}" id="env-form">{token}{body}</form>'
    notes = "".join(f'<div class="notice {esc(kind)}">{esc(text)}</div>' for kind, text in notices)
    return document(f'<div class="bar">{bar}</div>{notes}<main id="page" class="{esc(env.page.kind)}">{body}</main>'
                    f"{after}{agent_view(env)}")


def document(body: str, title: str = "WebShop") -> str:
    """A complete HTML document around ``body`` (already escaped) with the site's style."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<link rel="icon" href="data:,"><style>{STYLE}</style></head><body>{body}</body></html>\n')
