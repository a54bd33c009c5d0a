"""What an evaluation results directory holds: its file names, summary columns and failure classes.

``eval.report`` writes the directory and ``eval.html_report`` renders it; both take these names from here, so
neither imports the other's internals. The files themselves are described in ``eval.report``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

SUMMARY_FILE, EPISODES_FILE, FAILURES_FILE, REPORT_FILE = (
    "summary.csv", "episodes.jsonl", "failure_analysis.md", "report.html")
#: The summary columns every row has, in order; ``extra`` and per-category columns follow.
BASE_COLUMNS = ("method", "split", "episodes", "success_rate", "score", "avg_turns", "invalid_reply_rate")
#: Prefixes of the per-category summary columns: ``success_rate/<category>`` and ``episodes/<category>``.
CATEGORY_PREFIXES = ("success_rate/", "episodes/")
#: The failure classes, in the order ``eval.report.classify_failure`` checks them (the tables' row order).
FAILURE_CLASSES = ("format_errors", "search_loop", "no_purchase_step_limit", "over_price", "wrong_product",
                   "right_product_wrong_options", "other")
#: The class of a successful episode (not a failure class).
SUCCESS = "success"

#: What each failure class means, as the reports print it.
CLASS_TEXT = {
    "format_errors": "At least half of the replies had no parseable `<answer>search[...]</answer>` or "
                     "`click[...]` action, or the env never executed one: the policy does not follow the reply "
                     "format. More SFT on demonstrations, or a larger format penalty, addresses these.",
    "search_loop": "No purchase after at least 3 searches, or after repeating a search: the policy keeps "
                   "reformulating (or re-issuing) queries instead of opening a result and buying.",
    "no_purchase_step_limit": "The step limit ended the episode before Buy Now, without a search loop: the "
                              "policy browsed (results pages, item pages, sub-pages) until it ran out of steps.",
    "over_price": "The purchased product cost more than the instruction's price ceiling (`r_price` False). "
                  "Reported whatever else was wrong, since the price is shown on the results page.",
    "wrong_product": "A product other than the goal's was bought and it is not a full substitute: its type "
                     "(`r_type` < 1: query, category and title-noun overlap) or some goal attribute (`r_att` < 1) "
                     "does not match.",
    "right_product_wrong_options": "The goal's own product was bought, but at least one goal option (size, "
                                   "colour, ...) was not selected before Buy Now (`r_option` < 1).",
    "other": "Anything else: e.g. a different product of the right type with every attribute that missed only "
             "options, the goal's product with an attribute the reward's text matching misses, or an episode that "
             "ended without a purchase and without reaching the step limit.",
}


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """The records of a JSON-lines file (``episodes.jsonl``), one per non-blank line, in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line is not JSON; the message gives the file and line number.
    """
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not a JSON record ({e}); move the file away or fix it") from e


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, the noun in the plural unless ``n == 1``: "1 episode", "3 episodes", "2 searches".

    The plural adds "es" after s, x, z, ch and sh, else "s" (enough for the regular nouns the reports count).
    """
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}es" if noun.endswith(("s", "x", "z", "ch", "sh")) else f"{n} {noun}s"
