"""A static HTML report of an evaluation results directory: ``report.html`` written beside ``summary.csv``.

``write_html_report(results_dir)`` reads the directory's ``summary.csv`` (one row per (method, split)) and
``episodes.jsonl`` (one audit record per episode; both written by the evaluation report writer) and renders one
self-contained page:

1. **Headline figures** per (method, split): episodes, success rate with its Wilson 95 % interval, score
   (100 × mean WebShop score) with a Student-t 95 % interval over the episodes' scores, turns per episode and the
   share of replies without a parseable action; the other summary columns (checkpoint, seconds, ...) below.
2. **Success by goal category**: per split, a bar chart of ``success_rate/<category>`` with Wilson intervals, one
   bar per method.
3. **Failure taxonomy**: per (method, split), a bar chart of the failed episodes' ``failure_class``; each bar links
   to its class, which describes it, shows its first example and links every episode of the class.
4. **Episodes**: every episode, browsable turn by turn (the page the policy saw, its thought, its action, the env
   reward), filterable by class and by text.

The page works offline from a ``file://`` URL: inline CSS, inline SVG, a few lines of inline JavaScript (open the
episode an anchor points at; the filters); no server, CDN, external font or script. Every text from the files is
HTML-escaped. The figures and intervals come from ``eval.metrics``; the file names, failure classes and their
descriptions from ``eval.schema``.
"""

from __future__ import annotations

import csv
import html
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..utils.files import atomic_write_text
from .metrics import mean_interval, wilson_interval
from .schema import (
    BASE_COLUMNS,
    CATEGORY_PREFIXES,
    CLASS_TEXT,
    EPISODES_FILE,
    FAILURE_CLASSES,
    REPORT_FILE,
    SUCCESS,
    SUMMARY_FILE,
    plural,
    read_jsonl,
)

PALETTE = ("#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5", "#9c6b4e")
_BAR_AREA = 440  # px of the bar charts' value axis


# ------------------------------------------------------------------------------------------------ reading
def read_summary(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of a ``summary.csv`` as dicts of strings (empty cells are ``""``).

    Raises:
        FileNotFoundError: no such file (run the evaluation first; the message names the file).
        ValueError: the file has no ``method``/``split`` columns or no rows.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `cli.py test` or the evaluation CLI to write the "
                                "results directory first, then point the report at it")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or not {"method", "split"} <= set(reader.fieldnames):
            raise ValueError(f"{path} is not a summary table (it needs method and split columns)")
        rows = [{k: (v or "") for k, v in row.items() if k is not None} for row in reader]
    if not rows:
        raise ValueError(f"{path} has a header but no rows: nothing to report")
    return rows


def read_episodes(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of an ``episodes.jsonl`` (``[]`` when the file does not exist).

    Raises:
        ValueError: a line is not JSON; the message gives file and line number.
    """
    path = Path(path)
    return list(read_jsonl(path)) if path.is_file() else []


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _column(row: Mapping[str, str], name: str) -> float | None:
    return _number(row.get(name))


# ------------------------------------------------------------------------------------------------ model
@dataclass
class _Section:
    """One (method, split): its summary row (if any) and its episode records."""

    index: int
    method: str
    split: str
    row: Mapping[str, str] | None = None
    episodes: list[dict] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.method} / {self.split}"

    def episode_class(self, record: Mapping[str, Any]) -> str:
        cls = record.get("failure_class")
        if cls:
            return str(cls)
        return SUCCESS if record.get("success") else "unclassified"


def _sections(rows: Sequence[Mapping[str, str]], episodes: Iterable[Mapping[str, Any]]) -> list[_Section]:
    sections: dict[tuple[str, str], _Section] = {}
    for row in rows:
        key = (row["method"], row["split"])
        sections[key] = _Section(len(sections), *key, row=row)
    for record in episodes:
        key = (str(record.get("method", "")), str(record.get("split", "")))
        if key not in sections:
            sections[key] = _Section(len(sections), *key)
        sections[key].episodes.append(dict(record))
    return list(sections.values())


# ------------------------------------------------------------------------------------------------ html helpers
def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f} %"


def _success_cell(rate: float | None, n: int | None) -> str:
    """``"40.0 % (4/10) [16.8 – 68.7]"``: rate, count and the Wilson 95 % interval in percent."""
    if rate is None:
        return "–"
    if not n:
        return _pct(rate)
    k = round(rate * n)
    low, high = wilson_interval(k, n)
    return f"{_pct(rate)} ({k}/{n}) [{100 * low:.1f} – {100 * high:.1f}]"


def _score_cell(section: _Section) -> str:
    """``"55.3 ± 12.1"``: the summary's score and the half width of the t interval over the episodes' scores."""
    score = _column(section.row, "score") if section.row else None
    scores = [100 * float(r["score"]) for r in section.episodes if _number(r.get("score")) is not None]
    if score is None and scores:
        score = sum(scores) / len(scores)
    if score is None:
        return "–"
    if len(scores) < 2:
        return f"{score:.1f}"
    low, high = mean_interval(scores)
    return f"{score:.1f} ± {(high - low) / 2:.1f}"


# ------------------------------------------------------------------------------------------------ sections
def _headline(sections: Sequence[_Section]) -> str:
    head = ("<tr><th>method</th><th>split</th><th>episodes</th><th>success rate (k/n) [Wilson 95 % CI]</th>"
            "<th>score ± 95 % CI</th><th>turns per episode</th><th>replies without an action</th></tr>")
    rows = []
    extras: list[str] = []
    for s in sections:
        if s.row is None:
            continue
        n = _number(s.row.get("episodes"))
        n_int = int(n) if n is not None else None
        turns, invalid = _column(s.row, "avg_turns"), _column(s.row, "invalid_reply_rate")
        cells = {
            "method": _e(s.method), "split": _e(s.split), "episodes": _e(n_int if n_int is not None else "–"),
            "success_rate": _e(_success_cell(_column(s.row, "success_rate"), n_int)),
            "score": _e(_score_cell(s)),
            "avg_turns": _e(f"{turns:.2f}" if turns is not None else "–"),
            "invalid_reply_rate": _e(_pct(invalid) if invalid is not None else "–"),
        }
        rows.append(f'<tr data-method="{_e(s.method)}" data-split="{_e(s.split)}">'
                    + "".join(f'<td data-col="{k}">{v}</td>' for k, v in cells.items()) + "</tr>")
        extras += [c for c in s.row
                   if c not in BASE_COLUMNS and not c.startswith(CATEGORY_PREFIXES) and c not in extras]
    out = [f'<table id="headline" class="grid">{head}{"".join(rows)}</table>',
           "<p class=\"note\">Success = WebShop score exactly 1. Score = 100 × mean WebShop score; its interval is "
           "Student's t over the episodes in episodes.jsonl (none shown without them).</p>"]
    if extras:
        detail_rows = "".join(
            f'<tr><td>{_e(s.method)}</td><td>{_e(s.split)}</td>'
            + "".join(f'<td data-col="{_e(c)}">{_e(s.row.get(c, ""))}</td>' for c in extras) + "</tr>"
            for s in sections if s.row is not None)
        out.append('<h3>Run details</h3><table id="run-details" class="grid"><tr><th>method</th><th>split</th>'
                   + "".join(f"<th>{_e(c)}</th>" for c in extras) + f"</tr>{detail_rows}</table>")
    return "\n".join(out)


def _axis(x0: int, top: int, bottom: int, ticks: Sequence[tuple[float, str]]) -> list[str]:
    parts = []
    for fraction, label in ticks:
        x = x0 + fraction * _BAR_AREA
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}"/>'
                     f'<text class="tick" x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{_e(label)}</text>')
    return parts


def _category_chart(split: str, sections: Sequence[_Section]) -> str:
    """Grouped horizontal bars: per category, one bar per method of ``split``, with Wilson intervals."""
    sections = [s for s in sections if s.split == split and s.row is not None]
    categories = sorted({c.split("/", 1)[1] for s in sections for c in s.row if c.startswith("success_rate/")})
    if not categories:
        return "<p>No per-category columns in summary.csv.</p>"
    x0, bar, gap = 190, 16, 12
    group = len(sections) * (bar + 3) + gap
    height = 20 + len(categories) * group + 24
    parts = _axis(x0, 12, height - 24, [(f, f"{int(100 * f)} %") for f in (0, 0.25, 0.5, 0.75, 1)])
    for c, category in enumerate(categories):
        y_group = 20 + c * group
        label = category if len(category) <= 26 else category[:25] + "…"
        parts.append(f'<text class="cat" x="{x0 - 8}" y="{y_group + group / 2 - gap / 2 + 4:.1f}" '
                     f'text-anchor="end">{_e(label)}<title>{_e(category)}</title></text>')
        for m, s in enumerate(sections):
            rate = _number(s.row.get(f"success_rate/{category}"))
            n = _number(s.row.get(f"episodes/{category}"))
            if rate is None:
                continue
            y = y_group + m * (bar + 3)
            text = _success_cell(rate, int(n) if n else None).split(" [")[0]
            lines = [f'<g class="bar" data-method="{_e(s.method)}" data-category="{_e(category)}" '
                     f'data-value="{rate!r}"><title>{_e(s.method)} · {_e(category)}: '
                     f'{_e(_success_cell(rate, int(n) if n else None))}</title>',
                     f'<rect x="{x0}" y="{y}" width="{rate * _BAR_AREA:.1f}" height="{bar}" '
                     f'fill="{PALETTE[m % len(PALETTE)]}"/>']
            if n:
                low, high = wilson_interval(round(rate * n), int(n))
                xl, xh, ym = x0 + low * _BAR_AREA, x0 + high * _BAR_AREA, y + bar / 2
                lines.append(f'<path class="ci" d="M{xl:.1f},{ym - 4:.1f}v8M{xl:.1f},{ym:.1f}H{xh:.1f}'
                             f'M{xh:.1f},{ym - 4:.1f}v8"/>')
            lines.append(f'<text class="val" x="{x0 + _BAR_AREA + 8}" y="{y + bar - 4}">{_e(text)}</text></g>')
            parts += lines
    legend = "".join(f'<span class="key"><i style="background:{PALETTE[m % len(PALETTE)]}"></i>{_e(s.method)}</span>'
                     for m, s in enumerate(sections))
    return (f'<figure class="chart" id="categories-{_slug(split)}"><svg viewBox="0 0 800 {height}" width="800" '
            f'height="{height}" role="img" aria-label="success rate by goal category, split {_e(split)}">'
            + "".join(parts) + f"</svg><figcaption>{legend} — bars: success rate; whiskers: Wilson 95 % "
            "interval.</figcaption></figure>")


def _classes(section: _Section) -> tuple[Counter, list[str]]:
    counts = Counter(section.episode_class(r) for r in section.episodes)
    failed = {c: k for c, k in counts.items() if c != SUCCESS}
    order = [c for c in FAILURE_CLASSES] + sorted(set(failed) - set(FAILURE_CLASSES))
    return Counter(failed), order


def _failure_section(s: _Section) -> str:
    counts, order = _classes(s)
    failed = sum(counts.values())
    head = (f'<h3 id="failures-{s.index}">{_e(s.title)}</h3><p>{len(s.episodes)} episodes, {failed} failed. '
            "Shares are of the failed episodes; click a class for its description, an example and its episodes.</p>")
    if not s.episodes:
        return head + "<p>No episodes in episodes.jsonl for this method and split.</p>"
    x0, bar = 230, 18
    height = 16 + len(order) * (bar + 8) + 24
    top = max(counts.values(), default=0) or 1
    parts = _axis(x0, 8, height - 24, [(k / top, str(k)) for k in sorted({0, top // 2, top})])
    for i, cls in enumerate(order):
        y, k = 12 + i * (bar + 8), counts.get(cls, 0)
        share = k / failed if failed else 0.0
        if k:  # a class with episodes links to its block below
            tag, close = f'<a href="#fc-{s.index}-{_slug(cls)}" class="fbar"', "</a>"
        else:
            tag, close = '<g class="fbar"', "</g>"
        parts.append(f'{tag} data-class="{_e(cls)}" data-count="{k}">'
                     f'<title>{_e(cls)}: {plural(k, "episode")} ({_pct(share)} of failures). '
                     f'{_e(CLASS_TEXT.get(cls, ""))}</title>'
                     f'<text class="cat" x="{x0 - 8}" y="{y + bar - 5}" text-anchor="end">{_e(cls)}</text>'
                     f'<rect x="{x0}" y="{y}" width="{k / top * _BAR_AREA:.1f}" height="{bar}" fill="#ff725c"/>'
                     f'<text class="val" x="{x0 + _BAR_AREA + 8}" y="{y + bar - 5}">{k} ({_e(_pct(share))})</text>'
                     f'{close}')
    chart = (f'<figure class="chart"><svg viewBox="0 0 800 {height}" width="800" height="{height}" role="img" '
             f'aria-label="failure classes of {_e(s.title)}">' + "".join(parts) + "</svg></figure>")
    blocks = []
    for cls in order:
        members = [j for j, r in enumerate(s.episodes) if s.episode_class(r) == cls]
        if not members:
            continue
        text = CLASS_TEXT.get(cls, "A class this report does not describe.")
        links = " ".join(f'<a href="#ep-{s.index}-{j}">goal {_e(s.episodes[j].get("goal_index", j))}</a>'
                         for j in members)
        blocks.append(f'<div class="fclass" id="fc-{s.index}-{_slug(cls)}"><h4>{_e(cls)} — '
                      f'{plural(len(members), "episode")} ({_pct(len(members) / failed)} of failures)</h4>'
                      f'<p>{_e(text)}</p>{_example(s, members[0])}<p class="members">Episodes: {links}</p></div>')
    empty = [cls for cls in order if not counts.get(cls)]
    if empty:
        blocks.append(f'<p class="note">No episodes in: {_e(", ".join(empty))}.</p>')
    return head + chart + "\n".join(blocks)


def _example(s: _Section, j: int) -> str:
    r = s.episodes[j]
    actions = [t.get("action") if t.get("action") is not None else f"(no action: {t.get('format_error')})"
               for t in r.get("turns", [])]
    actions_html = " → ".join(f"<code>{_e(a)}</code>" for a in actions) or "(none)"
    return (f'<div class="example"><b>Example</b> (<a href="#ep-{s.index}-{j}">goal {_e(r.get("goal_index"))}</a>, '
            f'score {_e(_fmt(r.get("score")))}): {_e(_instruction(r))}<br>Actions: {actions_html}<br>'
            f'Bought: {_e(_bought(r.get("purchased")))}<br>What went wrong: {_e(r.get("failure_detail") or "–")}'
            "</div>")


def _fmt(value: Any, digits: int = 3) -> str:
    number = _number(value)
    return "–" if number is None else f"{number:.{digits}f}"


def _instruction(r: Mapping[str, Any]) -> str:
    goal = r.get("goal") or {}
    return str(r.get("instruction") or goal.get("instruction_text") or "")


def _bought(purchased: Mapping[str, Any] | None) -> str:
    if not purchased:
        return "nothing"
    text = str(purchased.get("asin", "?"))
    if purchased.get("title"):
        text += f' "{purchased["title"]}"'
    if _number(purchased.get("price")) is not None:
        text += f", ${float(purchased['price']):.2f}"
    options = purchased.get("options") or {}
    if options:
        text += "; options " + ", ".join(f"{k}: {v}" for k, v in options.items())
    return text


def _goal_text(goal: Mapping[str, Any]) -> str:
    parts = [f"ASIN {goal.get('asin', '?')}"]
    if goal.get("category"):
        parts.append(f"category {goal['category']}")
    if _number(goal.get("price_upper")) is not None:
        parts.append(f"price ≤ ${float(goal['price_upper']):.2f}")
    if goal.get("attributes"):
        parts.append("attributes: " + ", ".join(map(str, goal["attributes"])))
    options = goal.get("goal_options")
    if options:
        items = options.items() if isinstance(options, Mapping) else [(None, o) for o in options]
        parts.append("options: " + ", ".join(f"{k}: {v}" if k else str(v) for k, v in items))
    return "; ".join(parts)


def _turn(n: int, t: Mapping[str, Any]) -> str:
    reward = t.get("score")
    status = ("no parseable action" if t.get("action") is None
              else "valid" if t.get("valid_action", True) else "refused by the env")
    head = (f'<div class="turn-head">Turn {n} · <span class="reward">reward {_e(_fmt(reward))}</span> · {status}'
            f'{" · done" if t.get("done") else ""}</div>')
    body = [f'<pre class="page">{_e(t.get("observation", ""))}</pre>']
    if t.get("thought"):
        body.append(f'<div class="thought"><span class="lbl">thought</span> {_e(t["thought"])}</div>')
    if t.get("action") is not None:
        body.append(f'<div class="action"><span class="lbl">action</span> <code>{_e(t["action"])}</code></div>')
    else:
        body.append(f'<div class="action bad"><span class="lbl">action</span> none ({_e(t.get("format_error"))})'
                    f'</div><pre class="reply">{_e(t.get("reply", ""))}</pre>')
    return f'<li class="turn">{head}{"".join(body)}</li>'


def _episode(s: _Section, j: int) -> str:
    r = s.episodes[j]
    cls = s.episode_class(r)
    turns = r.get("turns") or []
    info = r.get("reward_info") or {}
    info_text = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in info.items()) or "–"
    badge = "ok" if cls == SUCCESS else "fail"
    search_text = f"goal {r.get('goal_index')} {cls} {_instruction(r)}".lower()
    rows = [("Instruction", _instruction(r)), ("Goal", _goal_text(r.get("goal") or {})),
            ("Bought", _bought(r.get("purchased"))), ("Reward info", info_text)]
    if r.get("failure_detail"):
        rows.append(("What went wrong", r["failure_detail"]))
    facts = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows)
    return (f'<details class="episode" id="ep-{s.index}-{j}" data-cls="{_e(cls)}" data-text="{_e(search_text)}">'
            f'<summary><span class="badge {badge}">{_e(cls)}</span> <b>goal {_e(r.get("goal_index"))}</b> · '
            f'score {_e(_fmt(r.get("score")))} · {len(turns)} turns{" · truncated" if r.get("truncated") else ""} · '
            f'<span class="instr">{_e(_instruction(r))}</span></summary><div class="ep-body"><dl class="kv">{facts}'
            f'</dl><ol class="turns">{"".join(_turn(n, t) for n, t in enumerate(turns, 1))}</ol></div></details>')


def _episodes_section(s: _Section) -> str:
    if not s.episodes:
        return ""
    counts = Counter(s.episode_class(r) for r in s.episodes)
    options = "".join(f'<option value="{_e(c)}">{_e(c)} ({k})</option>' for c, k in sorted(counts.items()))
    return (f'<h3 id="episodes-{s.index}">{_e(s.title)} — {len(s.episodes)} episodes</h3>'
            f'<div class="filters" data-list="list-{s.index}"><label>class <select><option value="">all</option>'
            f'{options}</select></label> <label>text <input type="search" placeholder="instruction, goal …">'
            f'</label></div><div class="episodes" id="list-{s.index}">'
            + "\n".join(_episode(s, j) for j in range(len(s.episodes))) + "</div>")


# ------------------------------------------------------------------------------------------------ page
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1200px;
 padding:0 24px 48px;color:#1d2129;line-height:1.45}
h1{margin:24px 0 4px}h2{margin-top:36px;border-bottom:2px solid #e3e6ea;padding-bottom:4px}
nav a{margin-right:14px}.note{color:#5b6470;font-size:.9em}
table.grid{border-collapse:collapse;margin:8px 0}table.grid th,table.grid td{border:1px solid #d6dae0;
 padding:4px 10px;text-align:left;font-variant-numeric:tabular-nums}table.grid th{background:#f3f5f8}
svg text{font-size:12px;fill:#1d2129}svg .tick{fill:#5b6470;font-size:11px}svg line.grid{stroke:#e3e6ea}
svg .ci{stroke:#1d2129;stroke-width:1.2;fill:none}svg a.fbar:hover rect{opacity:.75}
figure.chart{margin:8px 0 16px}figcaption{font-size:.9em;color:#5b6470}
.key{margin-right:12px;white-space:nowrap}.key i{display:inline-block;width:11px;height:11px;margin-right:4px;
 vertical-align:-1px}
.fclass{border-left:4px solid #ff725c;padding:2px 12px;margin:10px 0;background:#fff8f6}
.fclass h4{margin:6px 0}.example{font-size:.92em;margin:6px 0}.members a{margin-right:6px}
details.episode{border:1px solid #d6dae0;border-radius:6px;margin:6px 0;background:#fff}
details.episode>summary{cursor:pointer;padding:6px 10px}details.episode[open]>summary{background:#f3f5f8}
details.episode:target{outline:3px solid #4269d0}
.badge{display:inline-block;padding:0 8px;border-radius:10px;font-size:.85em;color:#fff}
.badge.ok{background:#3ca951}.badge.fail{background:#d9534f}.instr{color:#3b4350}
.ep-body{padding:4px 14px 10px}dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px}
dl.kv dt{font-weight:600}dl.kv dd{margin:0}
ol.turns{padding-left:22px}li.turn{margin:10px 0}.turn-head{font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;border:1px solid #e3e6ea;padding:6px 8px;
 max-height:16em;overflow:auto;font-size:.85em;margin:4px 0}
.lbl{display:inline-block;min-width:56px;color:#5b6470;font-size:.85em}.action code{background:#eef3ff;
 padding:1px 4px}.action.bad{color:#b52a26}.filters{margin:6px 0}.filters input{width:280px}
"""

_JS = """
(function () {
  'use strict';
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id ? document.getElementById(id) : null;
    if (!el) { return; }
    for (var node = el; node; node = node.parentElement) {
      if (node.tagName === 'DETAILS') { node.open = true; }
    }
    el.scrollIntoView();
  }
  document.querySelectorAll('.filters').forEach(function (box) {
    var select = box.querySelector('select'), input = box.querySelector('input');
    var list = document.getElementById(box.getAttribute('data-list'));
    function apply() {
      var cls = select.value, text = input.value.toLowerCase();
      list.querySelectorAll('details.episode').forEach(function (d) {
        d.hidden = (cls !== '' && d.getAttribute('data-cls') !== cls) ||
                   (text !== '' && d.getAttribute('data-text').indexOf(text) < 0);
      });
    }
    select.addEventListener('change', apply);
    input.addEventListener('input', apply);
  });
  window.addEventListener('hashchange', openTarget);
  openTarget();
  document.documentElement.setAttribute('data-report-ready', '1');
})();
"""


def render_report(rows: Sequence[Mapping[str, str]], episodes: Sequence[Mapping[str, Any]], title: str) -> str:
    """The report page as one HTML string (see the module docstring for what it shows).

    Args:
        rows: ``summary.csv`` rows (strings, as :func:`read_summary` returns them).
        episodes: ``episodes.jsonl`` records (may be empty).
        title: shown in the page title and heading (escaped).
    """
    sections = _sections(rows, episodes)
    splits = list(dict.fromkeys(s.split for s in sections if s.row is not None))
    category_html = "\n".join(f"<h3>split {_e(split)}</h3>{_category_chart(split, sections)}" for split in splits)
    with_episodes = [s for s in sections if s.episodes]
    failures_html = "\n".join(_failure_section(s) for s in with_episodes) or "<p>No episodes.jsonl records.</p>"
    episodes_html = "\n".join(_episodes_section(s) for s in with_episodes) or "<p>No episodes.jsonl records.</p>"
    index = " · ".join(f'<a href="#failures-{s.index}">{_e(s.title)}</a>' for s in with_episodes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{_e(title)}</h1>
<p class="note">{len(sections)} method/split pairs, {len(episodes)} episodes. Static page: no network needed.</p>
<nav><a href="#headline-figures">Headline figures</a><a href="#by-category">Success by category</a>
<a href="#failures">Failure taxonomy</a><a href="#episodes">Episodes</a></nav>
<h2 id="headline-figures">Headline figures</h2>
{_headline(sections)}
<h2 id="by-category">Success by goal category</h2>
{category_html}
<h2 id="failures">Failure taxonomy</h2>
<p class="note">{index}</p>
{failures_html}
<h2 id="episodes">Episodes</h2>
{episodes_html}
<script>{_JS}</script>
</body></html>
"""


def write_html_report(results_dir: str | os.PathLike) -> Path:
    """Write ``report.html`` into an evaluation results directory and return its path.

    Args:
        results_dir: the folder holding ``summary.csv`` and (optionally) ``episodes.jsonl``.

    Returns:
        ``results_dir / "report.html"``, written atomically (a temporary file beside it, then ``os.replace``).

    Raises:
        FileNotFoundError: ``results_dir/summary.csv`` does not exist.
        ValueError: ``summary.csv`` lacks method/split columns or rows, or a line of ``episodes.jsonl`` is not a
            JSON object (file and line named).
    """
    folder = Path(results_dir)
    rows = read_summary(folder / SUMMARY_FILE)
    episodes = read_episodes(folder / EPISODES_FILE)
    page = render_report(rows, episodes, f"Evaluation report: {folder.resolve().name}")
    target = folder / REPORT_FILE
    atomic_write_text(target, page)
    return target
