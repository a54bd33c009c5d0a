"""report.html from a hand-written results directory: the figures it shows against summary.csv, its links, its
escaping; and (slow) that headless Chromium opens it without a console message."""

import csv
import json
import math
import re
import shutil
import statistics
import subprocess
from collections import Counter
from html.parser import HTMLParser

import pytest
from conftest import skip_unless_required

from apo_lightning.eval.html_report import write_html_report

EVIL = '<b>evil</b> & "co"'
SCRIPT_TEXT = '<script>alert("x")</script>'
#: (method, split) -> the episodes' (score, failure class, category); success = score 1
EPISODES = {
    ("rule", "test"): [(1.0, None, "beauty"), (1.0, None, "beauty"), (1.0, None, "fashion"), (1.0, None, "fashion"),
                       (0.5, "wrong_product", "beauty"), (0.5, "wrong_product", "beauty"),
                       (0.2, "over_price", "fashion"), (0.0, "search_loop", "fashion"),
                       (0.0, "search_loop", "fashion"), (0.3, "right_product_wrong_options", "fashion")],
    (EVIL, "test"): [(1.0, None, "fashion"), (0.5, "wrong_product", "fashion"), (0.3, "wrong_product", "beauty"),
                     (0.0, "format_errors", "beauty"), (0.2, "<weird class>", "fashion")],
}
SUMMARY = [
    {"method": "rule", "split": "test", "episodes": 10, "success_rate": 0.4, "score": 55.0, "avg_turns": 2.5,
     "invalid_reply_rate": 0.025, "seconds": 12.5,
     "success_rate/beauty": 0.5, "episodes/beauty": 4, "success_rate/fashion": 0.333333, "episodes/fashion": 6},
    {"method": EVIL, "split": "test", "episodes": 5, "success_rate": 0.2, "score": 40.0, "avg_turns": 2.5,
     "invalid_reply_rate": 0.1, "seconds": 3,
     "success_rate/beauty": 0.0, "episodes/beauty": 2, "success_rate/fashion": 0.333333, "episodes/fashion": 3},
]


def episode_record(method, split, index, score, failure_class, category):
    turns = [
        {"thought": "look for it", "action": f"search[item {index}]", "format_error": None, "reply": "...",
         "observation": f"WebShop [SEP] Instruction: [SEP] find item {index} [SEP] Search", "valid_action": True,
         "done": False},
        {"thought": "", "action": None, "format_error": "no_answer_tag", "reply": "I am not sure",
         "observation": SCRIPT_TEXT if index == 1 else f"results for item {index}", "valid_action": False,
         "done": False},
        {"thought": "buy it", "action": "click[buy now]", "format_error": None, "reply": "...",
         "observation": f"item page {index}", "valid_action": True, "done": True},
    ]
    for n, turn in enumerate(turns):
        turn["score"] = score if n == len(turns) - 1 else 0.0
    return {"method": method, "split": split, "goal_index": 100 + index,
            "goal": {"asin": f"B00000000{index}", "category": category, "instruction_text": f"find item {index}",
                     "attributes": ["soft"], "goal_options": {"size": "large"}, "price_upper": 40.0},
            "instruction": f"find item {index}" + (f" {EVIL}" if index == 2 else ""), "turns": turns,
            "purchased": {"asin": f"B00000000{index}", "options": {"size": "large"}, "title": "A thing",
                          "price": 19.5},
            "score": score, "reward": score, "success": score == 1.0, "truncated": False,
            "reward_info": {"r_type": 1.0, "r_price": True}, "failure_class": failure_class,
            "failure_detail": f"detail {index}" if failure_class else ""}


@pytest.fixture
def results_dir(tmp_path):
    columns = list(SUMMARY[0])
    with open(tmp_path / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(SUMMARY)
    with open(tmp_path / "episodes.jsonl", "w", encoding="utf-8") as f:
        for (method, split), episodes in EPISODES.items():
            for i, (score, cls, category) in enumerate(episodes):
                f.write(json.dumps(episode_record(method, split, i, score, cls, category)) + "\n")
    return tmp_path


# ------------------------------------------------------------------------------------------------ a tiny DOM
VOID = {"meta", "br", "input", "rect", "line", "path", "img", "link", "hr"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, dict(attrs), parent, []

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        for child in self.children:
            if isinstance(child, Node):
                yield child
                yield from child.walk()

    def find_all(self, tag=None, **attrs):
        return [n for n in self.walk() if (tag is None or n.tag == tag)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def has_class(self, name):
        return name in (self.attrs.get("class") or "").split()


class TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Node("#root", {}, None)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Node(tag, attrs, self.current))

    def handle_endtag(self, tag):
        if tag in VOID:  # a browser's serialisation closes SVG shapes explicitly: nothing is open for them
            return
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None, f"</{tag}> closes nothing"
        self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse(path):
    builder = TreeBuilder()
    builder.feed(path.read_text(encoding="utf-8"))
    builder.close()
    assert builder.current is builder.root, "unclosed elements"
    return builder.root


@pytest.fixture
def page(results_dir):
    path = write_html_report(results_dir)
    assert path == results_dir / "report.html"
    return parse(path)


def summary_rows(results_dir):
    with open(results_dir / "summary.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------------------ figures
#: Wilson 95 % intervals in percent, from scipy.stats.binomtest(k, n).proportion_ci(method="wilson"), rounded
WILSON = {(4, 10): (16.8, 68.7), (1, 5): (3.6, 62.4), (2, 4): (15.0, 85.0), (0, 2): (0.0, 65.8), (1, 3): (6.1, 79.2),
          (2, 6): (9.7, 70.0)}
T975 = {9: 2.262157, 4: 2.776445}  # Student-t 0.975 quantiles (tables)


def test_headline_figures_match_summary_csv(results_dir, page):
    rows = summary_rows(results_dir)
    table = page.find_all("table", id="headline")[0]
    shown = {(tr.attrs["data-method"], tr.attrs["data-split"]): {td.attrs["data-col"]: td.text()
                                                                 for td in tr.find_all("td")}
             for tr in table.find_all("tr") if "data-method" in tr.attrs}
    assert set(shown) == {(r["method"], r["split"]) for r in rows}
    for row in rows:
        cells = shown[(row["method"], row["split"])]
        n = int(row["episodes"])
        k = round(float(row["success_rate"]) * n)
        low, high = WILSON[(k, n)]
        assert cells["episodes"] == str(n)
        assert cells["success_rate"] == f"{100 * float(row['success_rate']):.1f} % ({k}/{n}) [{low:.1f} – {high:.1f}]"
        scores = [100 * s for s, _, _ in EPISODES[(row["method"], row["split"])]]
        half = T975[n - 1] * statistics.stdev(scores) / math.sqrt(n)
        assert cells["score"] == f"{float(row['score']):.1f} ± {half:.1f}"
        turns = row["avg_turns"] or row["avg_steps"]  # either name
        invalid = row["invalid_reply_rate"] or row["invalid_rate"]
        assert cells["avg_turns"] == f"{float(turns):.2f}"
        assert cells["invalid_reply_rate"] == f"{100 * float(invalid):.1f} %"
    details = page.find_all("table", id="run-details")[0]
    assert [td.text() for td in details.find_all("td", data_col="seconds")] == [r["seconds"] for r in rows]


def test_category_chart_matches_summary_csv(results_dir, page):
    bars = {(g.attrs["data-method"], g.attrs["data-category"]): g for g in page.find_all("g") if g.has_class("bar")}
    rows = summary_rows(results_dir)
    assert set(bars) == {(r["method"], c) for r in rows for c in ("beauty", "fashion")}
    for row in rows:
        for category in ("beauty", "fashion"):
            rate, n = float(row[f"success_rate/{category}"]), int(row[f"episodes/{category}"])
            bar = bars[(row["method"], category)]
            k = round(rate * n)
            label = [t for t in bar.find_all("text") if t.has_class("val")][0].text()
            assert label == f"{100 * rate:.1f} % ({k}/{n})"
            assert float(bar.find_all("rect")[0].attrs["width"]) == pytest.approx(rate * 440, abs=0.06)
            low, high = WILSON[(k, n)]
            whisker = bar.find_all("path")[0].attrs["d"]  # M x_low ... H x_high
            x_low = float(re.match(r"M([\d.]+),", whisker).group(1))
            x_high = float(re.search(r"H([\d.]+)", whisker).group(1))
            assert (x_low - 190) / 4.4 == pytest.approx(low, abs=0.06)
            assert (x_high - 190) / 4.4 == pytest.approx(high, abs=0.06)


def test_failure_chart_links_classes_examples_and_episodes(page):
    ids = {n.attrs["id"]: n for n in page.walk() if "id" in n.attrs}
    for section, ((method, split), episodes) in enumerate(EPISODES.items()):
        expected = Counter(cls for _, cls, _ in episodes if cls)
        chart = page.find_all("svg", aria_label=f"failure classes of {method} / {split}")[0]
        chart_bars = [n for n in chart.children if isinstance(n, Node) and n.has_class("fbar")]
        counts = {n.attrs["data-class"]: int(n.attrs["data-count"]) for n in chart_bars}
        assert {c: k for c, k in counts.items() if k} == dict(expected)  # "<weird class>" included
        assert len(counts) == 7 + (section == 1)  # every known class, zero or not, and the unknown one
        for bar in chart_bars:
            cls = bar.attrs["data-class"]
            if not counts[cls]:
                assert bar.tag == "g"  # nothing to link to
                continue
            assert bar.tag == "a"
            block = ids[bar.attrs["href"][1:]]
            assert block.find_all("h4")[0].text().startswith(f"{cls} — {counts[cls]} episode")
            members = [a.attrs["href"][1:] for a in block.find_all("a")]
            assert len(set(members)) == counts[cls]
            for target in members:
                assert ids[target].attrs["data-cls"] == cls  # every link lands on an episode of that class


def test_every_episode_is_browsable_turn_by_turn(page):
    for section, episodes in enumerate(EPISODES.values()):
        for j, (score, cls, _) in enumerate(episodes):
            episode = page.find_all("details", id=f"ep-{section}-{j}")[0]
            assert episode.attrs["data-cls"] == (cls or "success")
            turns = [li for li in episode.find_all("li") if li.has_class("turn")]
            assert len(turns) == 3
            heads = [t.find_all("div")[0].text() for t in turns]
            assert heads[0] == "Turn 1 · reward 0.000 · valid"
            assert heads[1] == "Turn 2 · reward 0.000 · no parseable action"
            assert heads[2] == f"Turn 3 · reward {score:.3f} · valid · done"
            assert [c.text() for c in episode.find_all("code")] == [f"search[item {j}]", "click[buy now]"]
            assert turns[0].find_all("pre")[0].text().endswith(f"find item {j} [SEP] Search")
            assert "look for it" in turns[0].text()


def test_all_text_is_escaped_and_nothing_is_external(results_dir, page):
    scripts = page.find_all("script")
    assert len(scripts) == 1 and "alert" not in scripts[0].text()  # only the report's own script
    assert not [b for b in page.find_all("b") if "evil" in b.text()]  # the method name did not become markup
    assert any(pre.text() == SCRIPT_TEXT for pre in page.find_all("pre"))  # shown as text
    assert any(EVIL in td.text() for td in page.find_all("td"))
    raw = (results_dir / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", raw)
    assert "<link" not in raw and "@import" not in raw and "url(" not in raw


def test_errors_name_the_file(tmp_path, results_dir):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "empty" / "summary.csv"))):
        (tmp_path / "empty").mkdir()
        write_html_report(tmp_path / "empty")
    with open(results_dir / "episodes.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")
    with pytest.raises(ValueError, match=r"episodes\.jsonl:16: not a JSON record"):
        write_html_report(results_dir)
    assert not (results_dir / "report.html").exists()


def test_summary_alone_is_enough(results_dir):
    (results_dir / "episodes.jsonl").unlink()
    page = parse(write_html_report(results_dir))
    # no interval without the episodes
    assert [td.text() for td in page.find_all("td", data_col="score")] == ["55.0", "40.0"]
    assert not page.find_all("details")


# ------------------------------------------------------------------------------------------------ a real browser
def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.slow
def test_opens_in_headless_chromium_without_console_messages(results_dir, tmp_path):
    browser = find_browser()
    if browser is None:
        skip_unless_required("no headless browser installed (looked for chromium, chromium-browser, google-chrome); "
                    "install one, e.g. `apt-get install -y chromium`, to run this test")
    report = write_html_report(results_dir)
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               f"--user-data-dir={tmp_path / 'profile'}",
               "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: any network fetch would fail and be logged
               "--enable-logging=stderr", "--v=0", "--dump-dom", f"{report.as_uri()}#ep-1-2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []  # no error, warning or log line from the page (failed loads would show here too)
    dom = parse_text(done.stdout)
    assert dom.find_all("html")[0].attrs.get("data-report-ready") == "1"  # the script ran to its end
    assert "open" in dom.find_all("details", id="ep-1-2")[0].attrs  # and opened the episode the anchor names
    assert "open" not in dom.find_all("details", id="ep-1-3")[0].attrs


def parse_text(text):
    builder = TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root
