"""Instructions in other words: a goal's instruction rewritten from its own fields, with the same reward.

A goal says what to buy in its fields: ``query`` (the product search query), ``attributes``, ``goal_options`` and
``price_upper``. The reward reads those fields and the product's name and category (``reward.get_reward``,
``web_agent_site/engine/goal.py``), never ``instruction_text``, so a reworded goal is the same goal: the same
purchase scores the same. :func:`reword` writes a new instruction from the fields by a seeded choice among templates
— the sentence frame, the order of attributes and options, how each option is introduced ("in size 28\\" x 28\\"",
"The size should be ..."), how the price limit is phrased ("under $50", "My budget is 50.00 dollars") and whether the
words are in one sentence or several. Attribute words, option values and the query stay verbatim (the reward matches
them).

Two families of phrasings with no template in common: ``TRAIN`` (for training with varied wording) and ``HELDOUT``
(for evaluation only: a policy trained on ``TRAIN`` has never seen its phrasings). Neither repeats the generator's
own "Find me ... with size: X, and price lower than Y dollars".

Where an attribute goes in a sentence (before the query as an adjective, after "with", after "for") is read from
the generator's instruction (kept as ``original_instruction_text`` in a reworded goal); an attribute whose place
cannot be read is introduced neutrally ("described as ...").

    from apo_lightning.webshop.wording import reword, reworded_shop
    text = reword(shop.goals[3], "heldout", random.Random(0))          # any random source, e.g. per sample
    shop_h = reworded_shop(shop, "heldout", seed=0)                      # goal i's text from (seed, i): fixed
    goal = drawn_goal(shop.goals[3], random.Random(seed), 0.25)         # training: a fresh draw per example

Training draws instructions per example with :func:`drawn_goal` (``EnvConfig.vary_wording``): the ``TRAIN`` family
or, with a set probability, the generator's words.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, fields
from typing import Literal, Mapping, Sequence, get_args

from ..utils.seeds import derive_seed
from .goals import NO_PRICE_UPPER
from .shop import WebShop

Wording = Literal["original", "train", "heldout"]
#: The values of ``EnvConfig.wording``: the generator's instructions, or a family of rewordings.
WORDINGS: tuple[str, ...] = get_args(Wording)
#: Where an attribute stands: before the query, after "with", after "for", or unknown.
ROLES = ("pre", "with", "for", "any")
#: Option kinds with phrasings of their own; any other option name is "other", a human goal's (unnamed) options
#: are "unnamed".
OPTION_KINDS = ("color", "size", "flavor", "scent", "other", "unnamed")
#: How often an instruction is in lower case (as people often type), puts the adjectives before the query ("double
#: sided decorative pillows") rather than after it, opens with the price limit ("With a budget of $50, ..."), and
#: says each other part as a clause of the opening sentence rather than a sentence of its own.
P_LOWER_CASE, P_ADJECTIVES_FIRST, P_PRICE_FIRST, P_CLAUSE = 0.25, 0.5, 0.15, 0.5


@dataclass(frozen=True)
class Family:
    """One family of phrasings. Every template is a ``str.format`` string; its slots:

    ``{item}`` the query with whatever is attached to it; ``{x}`` a list of attributes; ``{v}`` an option value;
    ``{n}`` an option name; ``{p}`` the price limit as a number ("50"), ``{p2}`` with two decimals ("50.00");
    and the words that agree with the query's number: ``{it}``/``{It}`` (they/They), ``{them}``, ``{is}`` (are),
    ``{has}`` (have), ``{s}`` (a verb's -s, empty for a plural).

    A ``*_clauses`` template follows the query inside the opening sentence; a ``*_sentences`` template is a sentence
    of its own. ``price_leads`` open the instruction ("With a budget of $50, ...").
    """

    name: str
    openers: tuple[str, ...]
    pre_clauses: tuple[str, ...]
    pre_sentences: tuple[str, ...]
    with_clauses: tuple[str, ...]
    with_sentences: tuple[str, ...]
    for_clauses: tuple[str, ...]
    for_sentences: tuple[str, ...]
    any_clauses: tuple[str, ...]
    any_sentences: tuple[str, ...]
    option_clauses: Mapping[str, tuple[str, ...]]
    option_sentences: Mapping[str, tuple[str, ...]]
    price_clauses: tuple[str, ...]
    price_sentences: tuple[str, ...]
    price_leads: tuple[str, ...]
    #: how the last of three or more items is joined: " and " ("a, b and c") or ", and " ("a, b, and c")
    last_join: str

    def templates(self) -> set[str]:
        """Every template string of the family (the joiner excluded)."""
        out: set[str] = set()
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                out.update(value)
            elif isinstance(value, Mapping):
                out.update(t for group in value.values() for t in group)
        return out


TRAIN = Family(
    name="train",
    openers=("I'm looking for {item}.", "I need {item}.", "I want to buy {item}.", "Can you find me {item}?",
             "Please search for {item}.", "Show me {item}.", "I would like {item}.", "Help me find {item}.",
             "Get me {item}.", "I'd like to order {item}."),
    pre_clauses=("that {is} {x}", "which {is} {x}"),
    pre_sentences=("{It} should be {x}.", "{It} must be {x}."),
    with_clauses=("with {x}", "that {has} {x}", "featuring {x}"),
    with_sentences=("{It} should have {x}.", "{It} should come with {x}."),
    for_clauses=("for {x}", "suitable for {x}"),
    for_sentences=("{It} {is} for {x}.", "I'll use {them} for {x}."),
    any_clauses=("described as {x}", "listed as {x}"),
    any_sentences=("The listing should mention {x}.", "Its description should say {x}."),
    option_clauses={
        "color": ("in {v}", "in the color {v}", "in {v} color"),
        "size": ("in size {v}", "size {v}", "in a size {v}"),
        "flavor": ("in {v} flavor", "with the flavor {v}"),
        "scent": ("with the scent {v}", "in {v} scent"),
        "other": ("with {n} {v}", "in {n} {v}"),
        "unnamed": ("in {v}", "in the {v} option"),
    },
    option_sentences={
        "color": ("The color should be {v}.", "I want the color {v}."),
        "size": ("The size should be {v}.", "I need size {v}."),
        "flavor": ("The flavor should be {v}.", "I want the {v} flavor."),
        "scent": ("The scent should be {v}.", "I want the {v} scent."),
        "other": ("The {n} should be {v}.", "I want {n} {v}."),
        "unnamed": ("Choose {v}.", "I want {them} in {v}."),
    },
    price_clauses=("under ${p}", "for less than {p} dollars", "below ${p2}", "under {p2} dollars"),
    price_sentences=("My budget is ${p}.", "It must cost less than {p} dollars.", "Keep it under ${p2}.",
                     "The price should be below {p} dollars.", "I have ${p} to spend."),
    price_leads=("With a budget of ${p}, ", "For under {p} dollars, "),
    last_join=" and ",
)

HELDOUT = Family(
    name="heldout",
    openers=("I am shopping for {item}.", "I'm searching for {item}.", "Could you get me {item}?",
             "I'm in the market for {item}.", "Please pick out {item} for me.", "Buy me {item}.", "Look for {item}.",
             "I am hoping to buy {item}.", "Where can I get {item}?", "I'd love to have {item}."),
    pre_clauses=("that {is} also {x}", "labeled {x}"),
    pre_sentences=("{It} {has} to be {x}.", "Make sure {it} {is} {x}.", "I need {them} to be {x}."),
    with_clauses=("that come{s} with {x}", "including {x}", "that include{s} {x}"),
    with_sentences=("Make sure {it} {has} {x}.", "I'd like {them} to have {x}."),
    for_clauses=("meant for {x}", "intended for {x}", "that work{s} for {x}"),
    for_sentences=("{It} should be good for {x}.", "This is for {x}."),
    any_clauses=("whose description mentions {x}", "matching {x}"),
    any_sentences=("The product page has to mention {x}.", "Check that the details say {x}."),
    option_clauses={
        "color": ("colored {v}", "in the {v} colorway"),
        "size": ("sized {v}", "with a size of {v}"),
        "flavor": ("flavored {v}", "in the {v} variety"),
        "scent": ("scented {v}", "with a {v} fragrance"),
        "other": ("where the {n} is {v}", "having {n} {v}"),
        "unnamed": ("in the {v} variant", "in the {v} version"),
    },
    option_sentences={
        "color": ("As for color, I'd like {v}.", "Pick {v} for the color."),
        "size": ("Please get the {v} size.", "Go for size {v}."),
        "flavor": ("Go with the {v} flavor.", "As for flavor, I'd like {v}."),
        "scent": ("I prefer the {v} scent.", "As for scent, pick {v}."),
        "other": ("Set the {n} to {v}.", "For {n}, go with {v}."),
        "unnamed": ("Pick the {v} one.", "Go with {v}."),
    },
    price_clauses=("priced at most ${p}", "for no more than {p2} dollars", "within {p} usd"),
    price_sentences=("I can spend up to ${p2}.", "I don't want to pay more than {p} dollars.", "Price cap: {p} bucks.",
                     "My budget is {p2} dollars."),
    price_leads=("On a {p} dollar budget, ", "For ${p2} or less, "),
    last_join=", and ",
)

FAMILIES: dict[str, Family] = {"train": TRAIN, "heldout": HELDOUT}

_PRICE_SUFFIX = re.compile(r", and price lower than [\d.]+ dollars\s*$")
_CONNECTOR = re.compile(r"\b(with|for)\b")


def check_wording(wording: str) -> None:
    """Raise ValueError unless ``wording`` is one of :data:`WORDINGS`."""
    if wording not in WORDINGS:
        raise ValueError(f"wording must be one of {', '.join(WORDINGS)}, got {wording!r}")


def family_of(name: str) -> Family:
    """The family called ``name`` ("train" | "heldout").

    Raises:
        ValueError: any other name.
    """
    if name not in FAMILIES:
        raise ValueError(f"wording family must be one of {', '.join(FAMILIES)}, got {name!r}")
    return FAMILIES[name]


def attribute_roles(goal: Mapping) -> dict[str, str]:
    """Where the generator's instruction puts each attribute: ``{attribute: role}``, role one of :data:`ROLES`.

    Read from ``original_instruction_text`` (else ``instruction_text``) without its option and price clauses: an
    attribute found before the query is "pre", one found after it takes the nearest "with" or "for" before it;
    an attribute not found, or a query not found, is "any".
    """
    text = str(goal.get("original_instruction_text", goal["instruction_text"])).lower()
    text = _PRICE_SUFFIX.sub("", text)
    options = goal.get("goal_options")
    if isinstance(options, Mapping) and options:  # goals.synthetic_goals' option clause
        clause = (" with " + ", and ".join(f"{k}: {v}" for k, v in options.items())).lower()
        if text.endswith(clause):
            text = text[: -len(clause)]
    query = str(goal["query"]).lower()
    q = _find_phrase(text, query)
    roles = {}
    for attribute in goal["attributes"]:
        at = _find_phrase(text, attribute.lower())
        if q < 0 or at < 0:
            roles[attribute] = "any"
        elif at < q:
            roles[attribute] = "pre"
        else:
            connectors = _CONNECTOR.findall(text, q + len(query), at)
            roles[attribute] = connectors[-1] if connectors else "any"
    return roles


def _find_phrase(text: str, phrase: str) -> int:
    """Index of ``phrase`` as whole words in ``text`` (-1 if absent)."""
    match = re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text) if phrase else None
    return match.start() if match else -1


def is_plural(query: str) -> bool:
    """Whether a product query names a plural ("decorative pillows", "women's tops, tees & blouses"): its last word
    ends in -s but not -ss, -us or -is."""
    words = re.findall(r"[a-z]+", query.lower())
    return bool(words) and words[-1].endswith("s") and not words[-1].endswith(("ss", "us", "is"))


def option_kind(name: str | None) -> str:
    """The phrasing kind of an option name (:data:`OPTION_KINDS`); None (a human goal's option) is "unnamed"."""
    if name is None:
        return "unnamed"
    name = name.lower()
    for kind in ("color", "size", "flavor", "scent"):
        if kind in name or (kind == "color" and "colour" in name):
            return kind
    return "other"


def price_figures(price_upper: float) -> tuple[str, str]:
    """The price limit as ``({p}, {p2})``: "50" and "50.00" (a non-integral limit: "49.5" and "49.50")."""
    p = f"{price_upper:.0f}" if float(price_upper).is_integer() else f"{price_upper:g}"
    return p, f"{price_upper:.2f}"


def reword(goal: Mapping, family: str | Family, rng: random.Random) -> str:
    """A new instruction for ``goal`` from its fields, in phrasings of ``family``, chosen with ``rng``.

    Every attribute, option value and the query appear verbatim (as whole words); the price limit appears as a
    figure when the goal has one (``price_upper`` below ``goals.NO_PRICE_UPPER``).

    Args:
        goal: a goal dict (``WebShop.goals[i]``): ``query``, ``attributes``, ``goal_options`` (dict, or list for
            human goals), ``price_upper`` (dollars), ``instruction_text`` (for :func:`attribute_roles`).
        family: "train" | "heldout", or a :class:`Family`.
        rng: the random source; the same state gives the same text.

    Returns:
        The instruction, one or more sentences.

    Raises:
        ValueError: an unknown family name.
        KeyError: a missing goal field.
    """
    fam = family if isinstance(family, Family) else family_of(family)
    plural = is_plural(goal["query"])
    grammar = ({"it": "they", "It": "They", "them": "them", "is": "are", "has": "have", "s": ""} if plural else
               {"it": "it", "It": "It", "them": "it", "is": "is", "has": "has", "s": "s"})
    lower = rng.random() < P_LOWER_CASE

    def fill(template: str, **slots: str) -> str:
        # lower case touches the template's words only ({It} becomes {it}); slot values stay as they are
        return (template.lower() if lower else template).format(**grammar, **slots)

    def join(items: Sequence[str]) -> str:
        items = list(items)
        if len(items) < 3:
            return " and ".join(items)
        return ", ".join(items[:-1]) + fam.last_join + items[-1]

    # attributes by where they stand, each group in a random order
    groups: dict[str, list[str]] = {role: [] for role in ROLES}
    for attribute, role in attribute_roles(goal).items():
        groups[role].append(attribute)
    for group in groups.values():
        rng.shuffle(group)
    item = goal["query"]
    if groups["pre"] and rng.random() < P_ADJECTIVES_FIRST:
        item = f"{join(groups['pre'])} {item}"
        groups["pre"] = []

    # the parts: (clause templates, sentence templates, slots), each said as a clause or a sentence
    parts: list[tuple[tuple[str, ...], tuple[str, ...], dict[str, str]]] = []
    for role in ROLES:
        if groups[role]:
            parts.append((getattr(fam, f"{role}_clauses"), getattr(fam, f"{role}_sentences"),
                          {"x": join(groups[role])}))
    options = goal["goal_options"]
    named = list(options.items()) if isinstance(options, Mapping) else [(None, v) for v in options]
    for name, value in named:
        kind = option_kind(name)
        label = re.sub(r"\s+name$", "", name) if name else ""
        parts.append((fam.option_clauses[kind], fam.option_sentences[kind], {"v": str(value), "n": label}))
    price = float(goal["price_upper"])
    lead = ""
    if price < NO_PRICE_UPPER:
        p, p2 = price_figures(price)
        if rng.random() < P_PRICE_FIRST:
            lead = fill(rng.choice(fam.price_leads), p=p, p2=p2)
        else:
            parts.append((fam.price_clauses, fam.price_sentences, {"p": p, "p2": p2}))
    rng.shuffle(parts)

    clauses, sentences = [], []
    for clause_templates, sentence_templates, slots in parts:
        if rng.random() < P_CLAUSE:
            clauses.append(fill(rng.choice(clause_templates), **slots))
        else:
            sentences.append(fill(rng.choice(sentence_templates), **slots))
    if clauses:  # "pillows that are X, with Y" or, from three on, "... with Y and under $50"
        item += " " + (", ".join(clauses) if len(clauses) < 3 else join(clauses))
    opening = fill(rng.choice(fam.openers), item=item)
    if lead:
        opening = lead + (opening if opening[:2] in ("I ", "I'") else opening[0].lower() + opening[1:])
    text = " ".join([opening] + sentences)
    if lower and rng.random() < 0.5:
        text = text.rstrip(".")
    return text


def reworded_instruction(goal: Mapping, family: str, seed: int, goal_index: int) -> str:
    """:func:`reword` with a random source seeded by ``(family, seed, goal_index)``: the same text every time, in
    every process."""
    return reword(goal, family, random.Random(derive_seed("wording", family, seed, goal_index)))


def drawn_goal(goal: Mapping, rng: random.Random, original_share: float) -> dict:
    """``goal`` with an instruction drawn afresh for one training example ("training that reads"): the generator's
    own words with probability ``original_share``, else :func:`reword` in the ``TRAIN`` family; never ``HELDOUT``.

    A new dict, the same as ``goal`` but for ``instruction_text`` and ``original_instruction_text`` (the generator's
    text, read from ``goal``'s own ``original_instruction_text`` when it was reworded before): a goal of a reworded
    catalog is drawn from its generator's words too, not from its rewording. The reward's fields are untouched.

    Args:
        goal: a goal dict (``WebShop.goals[i]``).
        rng: this example's random source (seed it per example from the run seed, ``utils.seeds.derive_seed``); the
            same state gives the same text.
        original_share: the probability of the generator's words, in [0, 1].

    Raises:
        ValueError: ``original_share`` outside [0, 1].
    """
    if not 0.0 <= original_share <= 1.0:
        raise ValueError(f"original_share must be in [0, 1], got {original_share:g}")
    new = dict(goal)
    new["original_instruction_text"] = original = goal.get("original_instruction_text", goal["instruction_text"])
    new["instruction_text"] = original if rng.random() < original_share else reword(new, TRAIN, rng)
    return new


def reword_goals(goals: Sequence[Mapping], wording: str, seed: int = 0) -> list[dict]:
    """The goals with instructions in ``wording``; goal ``i`` reworded by :func:`reworded_instruction` from
    ``(seed, i)``. Each is a new dict, the same as the original but for ``instruction_text`` and
    ``original_instruction_text`` (the generator's text, kept); "original" returns copies of the goals unchanged.

    Raises:
        ValueError: ``wording`` is not one of :data:`WORDINGS`.
    """
    check_wording(wording)
    if wording == "original":
        return [dict(goal) for goal in goals]
    out = []
    for i, goal in enumerate(goals):
        new = dict(goal)
        new["original_instruction_text"] = goal.get("original_instruction_text", goal["instruction_text"])
        new["instruction_text"] = reworded_instruction(goal, wording, seed, i)
        out.append(new)
    return out


def reworded_shop(shop: WebShop, wording: str, seed: int = 0) -> WebShop:
    """``shop`` with its goals' instructions in ``wording`` (:func:`reword_goals`); the catalog, search engine and
    reward are shared. "original" returns ``shop`` itself.

    Raises:
        ValueError: ``wording`` is not one of :data:`WORDINGS`.
    """
    check_wording(wording)
    if wording == "original":
        return shop
    return shop.with_goals(reword_goals(shop.goals, wording, seed))
