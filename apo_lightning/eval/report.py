"""Evaluation results directory: metrics table, per-episode audit log and an automatic failure taxonomy.

``write_results(out_dir, trajectories, shop, method, split)`` writes (the output of ``cli.py test``):

* ``summary.csv``: one row per (method, split): method, split, episodes, success_rate, score (100 × mean WebShop
  score), avg_turns (turns per episode), invalid_reply_rate (turns whose reply had no parseable action / all
  turns; the quantities of ``eval.metrics``), the ``extra`` columns, then per goal category
  ``success_rate/<category>`` and ``episodes/<category>`` in sorted category order. Several methods share one
  directory: a new (method, split) row is added, a row with the same (method, split) is replaced, and when the
  columns differ the file is rewritten with their union (missing cells empty).
* ``episodes.jsonl``: one audit record per episode (the full goal dict, every turn's thought, action, format
  error, reply, observation, score (the env's step reward: the WebShop score at Buy Now, else 0) and validity,
  the purchase, score, reward, verbose reward info, failure class and a one-line explanation). Records of other
  (method, split) pairs already in the file are kept.
* ``failure_analysis.md``: per (method, split) in the file, a ``| class | count | share |`` table over the failed
  episodes and a paragraph per class with the first example (rendered from ``episodes.jsonl``, so it covers
  every method in the directory).
* ``report.html``: the same as one static page to look at (``eval.html_report``): headline figures with their
  intervals, success by category, the failure taxonomy with examples, every episode turn by turn.

Every file is written to a temporary file in ``out_dir`` and moved over the old one with ``os.replace``, so a
crash leaves either the old or the new version, never half a file.

Failure classes (``classify_failure``), checked in this order; the first that applies wins:

1. ``format_errors``: the episode has no turns, or at least half its turns had no parseable action
   (``2 × format-error turns ≥ turns``), or no turn's action was valid (the env executed nothing).
2. No purchase (``purchased is None``):

   * ``search_loop``: ≥ 3 valid searches, or a valid search repeated a query already searched (lower-cased,
     whitespace collapsed). Takes precedence over the step limit: it names *why* the steps ran out.
   * ``no_purchase_step_limit``: the step limit ended the episode (``truncated``).
   * otherwise ``other`` (an episode that ended without a purchase and without truncation).
3. A purchase (read from ``reward_info``; a missing ``r_option`` — a goal without options — counts as 1, a
   missing ``r_price`` as True):

   * ``over_price``: ``r_price`` is False. Reported whenever the price was over the ceiling, whatever else was
     wrong: the price is visible on the results page, so it is the cheapest mistake to avoid (the explanation
     in ``episodes.jsonl`` lists the other misses too).
   * ``wrong_product``: the purchased ASIN differs from the goal's (case-insensitive) and the product itself is
     off: ``r_type < 1`` or ``r_att < 1``.
   * ``right_product_wrong_options``: the goal's ASIN with ``r_option < 1``.
   * ``other``: anything else, e.g. a different product of the right type with every attribute that missed only
     options, or the goal's ASIN with every option but an attribute that the reward's text matching misses.

A successful episode (score == 1) is classed ``success``, which is not a failure class.
"""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..rollout.trajectory import Trajectory
from ..utils.files import atomic_write
from ..webshop import WebShop
from ..webshop.reward import attribute_matches, option_matches
from .html_report import write_html_report
from .metrics import trajectory_metrics
from .schema import (
    BASE_COLUMNS,
    CATEGORY_PREFIXES,
    CLASS_TEXT,
    EPISODES_FILE,
    FAILURE_CLASSES,
    FAILURES_FILE,
    SUCCESS,
    SUMMARY_FILE,
    plural,
    read_jsonl,
)

SEARCH_LOOP_MIN_SEARCHES = 3
_MAX_ACTION_CHARS = 160


# ---------------------------------------------------------------------------------------------------- classify
def _normalize_query(action: str) -> str:
    return " ".join(action[len("search["):-1].lower().split())


def valid_searches(trajectory: Trajectory) -> list[str]:
    """The queries of the searches the env executed, in order, lower-cased with whitespace collapsed."""
    return [_normalize_query(t.action) for t in trajectory.turns
            if t.valid_action and t.action is not None and t.action.lower().startswith("search[")]


def classify_failure(trajectory: Trajectory, goal: Mapping[str, Any]) -> str:
    """The failure class of one episode (rules in the module docstring), or ``"success"``.

    Args:
        trajectory: the finished episode.
        goal: its goal dict (``shop.goals[trajectory.goal_index]``); only ``asin`` is read.

    Returns:
        ``"success"`` or one of ``FAILURE_CLASSES``.

    Raises:
        ValueError: the trajectory has a purchase but no ``reward_info``.
    """
    if trajectory.success:
        return SUCCESS
    turns = trajectory.turns
    unparsed = sum(t.action is None for t in turns)
    if not turns or 2 * unparsed >= len(turns) or not any(t.valid_action for t in turns):
        return "format_errors"
    if trajectory.purchased is None:
        searches = valid_searches(trajectory)
        if len(searches) >= SEARCH_LOOP_MIN_SEARCHES or len(set(searches)) < len(searches):
            return "search_loop"
        return "no_purchase_step_limit" if trajectory.truncated else "other"
    info = trajectory.reward_info
    if info is None:
        raise ValueError(f"goal {trajectory.goal_index}: the trajectory bought {trajectory.purchased.get('asin')} "
                         "but has no reward_info")
    if info.get("r_price", True) is False:
        return "over_price"
    if trajectory.purchased["asin"].upper() != goal["asin"].upper():
        if info["r_type"] < 1 or info["r_att"] < 1:
            return "wrong_product"
        return "other"
    if info.get("r_option", 1.0) < 1:
        return "right_product_wrong_options"
    return "other"


def _goal_option_items(goal: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(label, reward-side value) per goal option: synthetic goals' dict items as tuples, human goals' strings."""
    options = goal["goal_options"]
    if isinstance(options, Mapping):
        return [(f"{k}: {v}", (k, v)) for k, v in options.items()]
    return [(str(o), o) for o in options]


def describe_failure(trajectory: Trajectory, goal: Mapping[str, Any], shop: WebShop) -> str:
    """One line saying what went wrong in an episode ('' for a success).

    For a purchase: the product bought when it is not the goal's, a type mismatch, the goal attributes and
    options the reward did not match (recomputed per item with the reward's own matching), and the price against
    the ceiling. Without a purchase: turns, searches and format errors.
    """
    if trajectory.success:
        return ""
    turns = trajectory.turns
    unparsed = [t.format_error or "no action" for t in turns if t.action is None]
    invalid = sum(t.action is not None and not t.valid_action for t in turns)
    if trajectory.purchased is None:
        searches = valid_searches(trajectory)
        ending = "the step limit ended it" if trajectory.truncated else "it ended"
        text = (f"no purchase: {ending} after {len(turns)} turns with {plural(len(searches), 'search')} "
                f"({len(set(searches))} distinct)")
        if unparsed or invalid:
            reasons = ", ".join(f"{k} ×{n}" for k, n in sorted(Counter(unparsed).items()))
            text += f"; {len(unparsed)} replies without an action" + (f" ({reasons})" if reasons else "")
            text += f", {invalid} actions the env refused"
        return text
    asin = trajectory.purchased["asin"].upper()
    info = trajectory.reward_info or {}
    parts = []
    if asin != goal["asin"].upper():
        parts.append(f"bought {asin} instead of the goal's {goal['asin']}")
    if info.get("r_type", 1.0) < 1:
        parts.append(f"type mismatch (r_type {info['r_type']:g}: query_match {info.get('query_match')}, "
                     f"category_match {info.get('category_match')}, title_score {info.get('title_score', 0):.2f})")
    product = shop.product_by_asin.get(asin)
    if product is not None:
        missed = [a for a in goal["attributes"] if attribute_matches(product, [a]) == 0]
        if missed:
            parts.append("missed attributes: " + ", ".join(missed))
    selected = list(trajectory.purchased.get("options", {}).values())
    missed_options = [label for label, item in _goal_option_items(goal) if option_matches(selected, [item]) == 0]
    if missed_options:
        chosen = ", ".join(f"{k}: {v}" for k, v in trajectory.purchased.get("options", {}).items()) or "none"
        parts.append(f"missed options: {'; '.join(missed_options)} (selected: {chosen})")
    if info.get("r_price", True) is False:
        price = shop.prices.get(asin)
        parts.append(f"price ${price:.2f} over the ${goal['price_upper']:.2f} ceiling" if price is not None
                     else f"price over the ${goal['price_upper']:.2f} ceiling")
    if unparsed:
        parts.append(f"{len(unparsed)} replies without an action")
    return "; ".join(parts) or f"score {trajectory.score:.3f}"


# ---------------------------------------------------------------------------------------------------- metrics
def category_breakdown(trajectories: Sequence[Trajectory], shop: WebShop) -> dict[str, dict]:
    """Per goal category (``shop.goals[i]["category"]``), in sorted order: episodes, success_rate (0…1) and
    score (100 × mean WebShop score).

    Raises:
        IndexError: a trajectory's goal_index is not a goal of ``shop``.
    """
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[shop.goals[t.goal_index]["category"]].append(t)
    return {
        category: {
            "episodes": len(group),
            "success_rate": sum(t.success for t in group) / len(group),
            "score": 100.0 * sum(t.score for t in group) / len(group),
        }
        for category, group in sorted(groups.items())
    }


def summary_row(trajectories: Sequence[Trajectory], shop: WebShop, method: str, split: str,
                extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``summary.csv`` row of one (method, split): base metrics, ``extra``, then per-category columns.

    Raises:
        ValueError: no trajectories, or an ``extra`` key that is a metric column.
    """
    if not trajectories:
        raise ValueError(f"no trajectories to report for method {method!r} on split {split!r}")
    metrics = trajectory_metrics(trajectories)
    row: dict[str, Any] = {"method": method, "split": split}
    row.update({column: metrics[column] for column in BASE_COLUMNS[2:]})
    categories = category_breakdown(trajectories, shop)
    for key, value in (extra or {}).items():
        if key in row or key.startswith(CATEGORY_PREFIXES):
            raise ValueError(f"extra column {key!r} clashes with a metric column; rename it")
        row[key] = value
    for category, stats in categories.items():
        row[f"success_rate/{category}"] = stats["success_rate"]
        row[f"episodes/{category}"] = stats["episodes"]
    return row


def _column_order(columns: Iterable[str]) -> list[str]:
    """Base columns, then the others (extras) in first-seen order, then category pairs by sorted category."""
    columns = list(dict.fromkeys(columns))
    categories = sorted({c.split("/", 1)[1] for c in columns if c.startswith(CATEGORY_PREFIXES)})
    rest = [c for c in columns if c not in BASE_COLUMNS and not c.startswith(CATEGORY_PREFIXES)]
    category_columns = [f"{prefix}{category}" for category in categories for prefix in CATEGORY_PREFIXES]
    return [c for c in BASE_COLUMNS if c in columns] + rest + [c for c in category_columns if c in columns]


def _cell(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


# ---------------------------------------------------------------------------------------------------- records
def episode_record(trajectory: Trajectory, shop: WebShop, method: str, split: str) -> dict[str, Any]:
    """The ``episodes.jsonl`` audit record of one episode (see the module docstring)."""
    goal = shop.goals[trajectory.goal_index]
    purchased = None
    if trajectory.purchased is not None:
        asin = trajectory.purchased["asin"].upper()
        product = shop.product_by_asin.get(asin)
        purchased = {"asin": asin, "options": dict(trajectory.purchased.get("options", {})),
                     "title": product["Title"] if product is not None else None, "price": shop.prices.get(asin)}
    failure = classify_failure(trajectory, goal)
    return {
        "method": method,
        "split": split,
        "goal_index": trajectory.goal_index,
        "goal": dict(goal),
        "instruction": trajectory.instruction,
        "turns": [{"thought": t.thought, "action": t.action, "format_error": t.format_error, "reply": t.reply,
                   "observation": t.observation, "score": t.score, "valid_action": t.valid_action,
                   "done": t.done} for t in trajectory.turns],
        "num_turns": len(trajectory.turns),
        "purchased": purchased,
        "score": trajectory.score,
        "reward": trajectory.reward,
        "success": trajectory.success,
        "truncated": trajectory.truncated,
        "reward_info": trajectory.reward_info,
        "failure_class": None if failure == SUCCESS else failure,
        "failure_detail": describe_failure(trajectory, goal, shop),
    }


class _Section:
    """What failure_analysis.md shows for one (method, split): counts and the first example per class."""

    def __init__(self, method: str, split: str):
        self.method, self.split = method, split
        self.episodes = self.successes = 0
        self.score = 0.0
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, dict] = {}

    def add(self, record: Mapping[str, Any]) -> None:
        self.episodes += 1
        self.score += record["score"]
        cls = record.get("failure_class")
        if cls is None:
            self.successes += 1
            return
        self.counts[cls] += 1
        if cls not in self.examples:
            self.examples[cls] = {
                "goal_index": record["goal_index"],
                "instruction": record["goal"]["instruction_text"],
                "actions": [t["action"] if t["action"] is not None else f"(no action: {t['format_error']})"
                            for t in record["turns"]],
                "purchased": record["purchased"],
                "score": record["score"],
                "detail": record["failure_detail"],
            }

    def markdown(self) -> str:
        failed = self.episodes - self.successes
        success_pct, score = 100.0 * self.successes / self.episodes, 100.0 * self.score / self.episodes
        lines = [f"## {self.method} / {self.split}", "",
                 f"{self.episodes} episodes: {self.successes} successful ({success_pct:.1f} %), {failed} failed; "
                 f"score {score:.1f}.", "",
                 "| class | count | share |", "|---|---:|---:|"]
        classes = list(FAILURE_CLASSES) + sorted(set(self.counts) - set(FAILURE_CLASSES))
        for cls in classes:
            share = 100.0 * self.counts[cls] / failed if failed else 0.0
            lines.append(f"| {cls} | {self.counts[cls]} | {share:.1f} % |")
        lines += ["", "Shares are of the failed episodes.", ""]
        for cls in classes:
            lines += [f"### {cls} ({self.counts[cls]})", "", CLASS_TEXT.get(cls, "An unrecognised class."), ""]
            example = self.examples.get(cls)
            if example is None:
                lines += ["No episodes.", ""]
                continue
            actions = " → ".join(f"`{_short(a)}`" for a in example["actions"]) or "(none)"
            purchased = example["purchased"]
            bought = "nothing"
            if purchased is not None:
                price = f", ${purchased['price']:.2f}" if purchased.get("price") is not None else ""
                bought = f"{purchased['asin']} \"{purchased['title']}\"{price}"
            lines += [f"Example: goal {example['goal_index']}, score {example['score']:.3f}.", "",
                      f"- Instruction: {example['instruction']}",
                      f"- Actions: {actions}",
                      f"- Bought: {bought}",
                      f"- What went wrong: {example['detail']}", ""]
        return "\n".join(lines)


def _short(text: str) -> str:
    text = text.replace("`", "'").replace("\n", " ")
    return text if len(text) <= _MAX_ACTION_CHARS else text[: _MAX_ACTION_CHARS - 1] + "…"


# ---------------------------------------------------------------------------------------------------- writing
def _write_summary(path: Path, row: Mapping[str, Any]) -> None:
    rows: list[dict[str, Any]] = []
    columns: list[str] = list(row)
    if path.exists():
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or not {"method", "split"} <= set(reader.fieldnames):
                raise ValueError(f"{path} is not a summary table (no method/split columns); move it away")
            columns = list(reader.fieldnames) + columns
            rows = [r for r in reader if (r["method"], r["split"]) != (row["method"], row["split"])]
    rows.append({k: _cell(v) for k, v in row.items()})
    with atomic_write(path) as f:
        writer = csv.DictWriter(f, fieldnames=_column_order(columns), restval="")
        writer.writeheader()
        writer.writerows(rows)


def write_results(out_dir: str | Path, trajectories: Sequence[Trajectory], shop: WebShop, method: str, split: str,
                  extra: dict | None = None) -> dict:
    """Write (or update) an evaluation results directory and return the summary row.

    Args:
        out_dir: the results directory (created if missing); may already hold other methods' results.
        trajectories: the finished episodes of ``method`` on ``split``.
        shop: the catalog they were played in (goals, products, prices).
        method: the policy's name (a checkpoint, "rule", "oracle", ...); with ``split`` it keys the rows.
        split: the goal split ("test", "val", ...).
        extra: more scalar columns for this summary row (e.g. checkpoint path, seconds); must not clash with the
            metric columns.

    Returns:
        The summary row: ``BASE_COLUMNS`` values, ``extra``, ``success_rate/<category>`` (0…1) and
        ``episodes/<category>`` per goal category.

    Raises:
        ValueError: no trajectories, a clashing ``extra`` key, an unreadable existing summary.csv or
            episodes.jsonl, or a purchase without reward info.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    row = summary_row(trajectories, shop, method, split, extra)
    records = [episode_record(t, shop, method, split) for t in trajectories]  # classify before touching files

    # episodes.jsonl: keep other (method, split) records, replace this pair's; gather the analysis meanwhile
    sections: dict[tuple[str, str], _Section] = {}

    def add(record: dict) -> None:
        key = (record["method"], record["split"])
        sections.setdefault(key, _Section(*key)).add(record)

    episodes_path = out / EPISODES_FILE
    with atomic_write(episodes_path) as f:
        if episodes_path.exists():
            for record in read_jsonl(episodes_path):
                if (record.get("method"), record.get("split")) == (method, split):
                    continue
                add(record)
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        for record in records:
            add(record)
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    with atomic_write(out / FAILURES_FILE) as f:
        f.write("# Failure analysis\n\nAn automatic taxonomy of the non-successful episodes in `episodes.jsonl` "
                "(rules: `apo_lightning/eval/report.py`). Each failed episode gets the first class that applies, "
                "in the table's order.\n\n")
        f.write("\n".join(section.markdown() for section in sections.values()))

    _write_summary(out / SUMMARY_FILE, row)
    write_html_report(out)  # the page reads the files written above
    return row
