"""``python -m apo_lightning.webshop serve``: the env's pages drawn for people, each press an env step, recorded
sessions read back as SFT demonstrations, replays of episodes files; and (slow) a person's script in headless
Chromium (Selenium, Debian's chromium-driver) that shops and gets the score ``WebShopEnv`` gives its actions."""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
from conftest import REPO_ROOT, imitated_actions, skip_unless_required

from apo_lightning.baselines.scripted import OraclePolicy, play_episode, scripted_steps
from apo_lightning.webshop import WebShop, WebShopEnv
from apo_lightning.webshop import __main__ as webshop_cli
from apo_lightning.webshop import serve, sessions, site
from apo_lightning.webshop.serve import ShopApp, make_server

MAX_STEPS = 15


@pytest.fixture(scope="module")
def shop():
    return WebShop.load(None)  # the synthetic catalog (data/synthetic/seed0)


@pytest.fixture(scope="module")
def goal(shop):
    """The first training goal whose product has two options (so that a shopper picks two values)."""
    return next(i for i in shop.split("train") if len(shop.goals[i]["goal_options"]) >= 2)


def oracle_actions(shop, goal):
    return [s.action for s in scripted_steps(WebShopEnv(shop, max_steps=MAX_STEPS), OraclePolicy(), goal)]


def env_after(shop, goal, actions, max_steps=MAX_STEPS):
    env = WebShopEnv(shop, max_steps=max_steps)
    env.reset(goal)
    for action in actions:
        env.step(action)
    return env


# ------------------------------------------------------------------------------------------------ reading HTML
class Page(HTMLParser):
    """What a browser would offer on a page: its buttons (attributes and text), inputs, links, the visible text
    of ``<main>`` and of each element with an id."""

    VOID = {"meta", "br", "input", "img", "link", "hr"}

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.buttons, self.inputs, self.links, self.forms = [], [], [], []
        self.main_text, self.by_id = [], {}
        self._stack, self._button = [], None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "button":
            self._button = dict(attrs, text="")
            self.buttons.append(self._button)
        elif tag == "input":
            self.inputs.append(attrs)
        elif tag == "a":
            self.links.append(attrs)
        elif tag == "form":
            self.forms.append(attrs)
        if tag not in self.VOID:
            self._stack.append((tag, attrs.get("id")))
            if attrs.get("id"):
                self.by_id.setdefault(attrs["id"], [])

    def handle_endtag(self, tag):
        if tag == "button":
            self._button = None
        while self._stack:
            if self._stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self._button is not None:
            self._button["text"] += data
        tags = [t for t, _ in self._stack]
        if "main" in tags and "style" not in tags:
            self.main_text.append(data)
        for _, element_id in self._stack:
            if element_id:
                self.by_id[element_id].append(data)

    def text(self, element_id: str) -> str:
        return "".join(self.by_id.get(element_id, []))

    def actions(self) -> list[str]:
        """The env actions the page's buttons send (``name="action"``), in order."""
        return [b["value"] for b in self.buttons if b.get("name") == "action"]


def squash(text: str) -> str:
    return " ".join(text.split())


def check_page(env: WebShopEnv, html: str) -> Page:
    """The page shows every env text node in the env's order and has one button per clickable, nothing more."""
    page = Page(html)
    clickables = [k for k in env.page.clickables if k != "search"]
    assert sorted(page.actions()) == sorted(f"click[{k}]" for k in clickables)  # each once, no other
    shown = squash(" ".join(page.main_text))
    position = 0
    for _, text in env.page.nodes:
        if env.page.kind == "done" and text not in (site.SCORE_LABEL, str(env.reward)):
            continue  # the done page's hidden MTurk fields are not drawn
        found = shown.find(squash(text), position)
        assert found >= 0, f"{text!r} not shown (in order) on the {env.page.kind} page"
        position = found + len(squash(text))
    search_inputs = [i for i in page.inputs if i.get("name") == "search_query"]
    assert len(search_inputs) == env.page.has_search_bar
    return page


# ------------------------------------------------------------------------------------------------ pages
def test_every_page_shows_the_env_page_and_one_button_per_clickable(shop, goal):
    """Walk through every kind of page (search, results 1 and 2, item with options chosen, the three sub-pages,
    done) and check each drawn page against the env's."""
    actions = oracle_actions(shop, goal)
    search, product, *options, buy = actions
    walk = [search, "click[next >]", "click[< prev]", product, options[0], "click[description]", "click[< prev]",
            "click[features]", "click[< prev]", "click[reviews]", "click[< prev]", *options[1:], buy]
    env = WebShopEnv(shop, max_steps=None)
    env.reset(goal)
    kinds = []
    for action in [None, *walk]:
        if action is not None:
            _, _, _, info = env.step(action)
            assert info["valid"], action
        page = check_page(env, site.render_page(env, bar="", post_to="/session/1", step_token=env.num_steps))
        kinds.append(env.page.kind if env.page.kind != "item_sub_page" else site.sub_page_name(env))
    assert kinds == ["index", "search_results", "search_results", "search_results", "item_page", "item_page",
                     "Description", "item_page", "Features", "item_page", "Reviews", "item_page",
                     *["item_page"] * (len(options) - 1), "done"]
    assert page.text("score") == str(env.reward) == "1.0"


def test_the_chosen_option_values_are_marked(shop, goal):
    search, product, first, *_ = oracle_actions(shop, goal)
    env = env_after(shop, goal, [search, product, first])
    buttons = {b["value"]: b for b in Page(site.env_page(env)).buttons if b.get("name") == "action"}
    options = [k for k, c in env.page.clickables.items() if c.kind == "option"]
    pressed = [k for k in options if buttons[f"click[{k}]"]["aria-pressed"] == "true"]
    assert pressed == [first[len("click["):-1]]
    assert "selected" in buttons[first]["class"].split()


def test_a_read_only_page_disables_its_buttons_and_outlines_the_next_action(shop, goal):
    search, product, *_ = oracle_actions(shop, goal)
    env = env_after(shop, goal, [search])
    page = Page(site.env_page(env, active=False, highlight=f"click[{product[6:-1].upper()}]"))  # as a model writes it
    assert all("disabled" in b for b in page.buttons if b.get("name") == "action")
    assert [b["value"] for b in page.buttons if "next-action" in b["class"].split()] == [product]
    env = env_after(shop, goal, [])
    page = Page(site.env_page(env, active=False, highlight=search))
    assert [i.get("value") for i in page.inputs if i.get("name") == "search_query"] == [search[len("search["):-1]]


def test_text_is_escaped(shop, goal):
    env = env_after(shop, goal, [])
    env.goal = dict(env.goal, instruction_text='<script>alert("x")</script> & co')
    env._back_to_search()
    html = site.env_page(env)
    assert "<script>" not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in html


# ------------------------------------------------------------------------------------------------ requests
def post(app, location, **form):
    return app.handle("POST", location, urlencode(form).encode())


def press(app, location, action):
    """What a browser does for a press (a search typed into the box, or a button): the POST, then the page it
    is sent to; returns that page's HTML."""
    session = app.sessions[int(location.rsplit("/", 1)[1])]
    if action.startswith("search["):
        response = post(app, location, search_query=action[len("search["):-1], step=session.env.num_steps)
    else:
        response = post(app, location, action=action, step=session.env.num_steps)
    assert response.status == 303 and dict(response.headers)["Location"] == location
    return app.handle("GET", location).body.decode()


def start(app):
    response = app.handle("GET", "/")
    assert response.status == 303
    return dict(response.headers)["Location"]


def notices(html):
    return re.findall(r'<div class="notice (\w+)">(.*?)</div>', html)


def get(app, location):
    return app.handle("GET", location).body.decode()


def test_a_session_is_an_env_episode_step_by_step(shop, goal):
    actions = oracle_actions(shop, goal)
    app = ShopApp(shop, list(shop.split("train")), goal)
    location = start(app)
    assert location == "/session/1"
    session = app.sessions[1]
    twin = WebShopEnv(shop, max_steps=MAX_STEPS)
    twin.reset(goal)
    walk = [actions[0], "click[next >]", "click[< prev]", *actions[1:]]
    for action in walk:
        html = press(app, location, action)
        twin.step(action)
        assert session.env.observation == twin.observation and session.env.num_steps == twin.num_steps
        check_page(twin, html)
        assert notices(html) == []
    assert session.actions == walk and session.env.done and session.env.reward == twin.reward == 1.0
    assert Page(app.handle("GET", location).body.decode()).text("score") == "1.0"
    assert start(app) == "/session/2"  # the session is done: / starts the next goal
    assert app.sessions[2].env.goal_index == list(shop.split("train"))[list(shop.split("train")).index(goal) + 1]


def test_posts_that_are_not_the_current_page_take_no_step(shop, goal):
    app = ShopApp(shop, list(shop.split("train")), goal)
    location = start(app)
    env = app.sessions[1].env
    stale = post(app, location, search_query="red shoes", step=5)  # drawn at another step
    assert stale.status == 303 and env.num_steps == 0
    assert [kind for kind, _ in notices(get(app, location))] == ["warning"]
    for query in ("men's [large] shirt", "   "):
        post(app, location, search_query=query, step=0)
        assert env.num_steps == 0 and [kind for kind, _ in notices(get(app, location))] == ["error"]
    assert post(app, location, step=0).status == 400 and env.num_steps == 0
    html = press(app, location, "click[nothing]")  # an env no-op: a step, as for agents
    assert env.num_steps == 1 and notices(html) == [("warning", "The shop did not take click[nothing] (it still "
                                                     "counts as a step).")]
    assert app.handle("GET", "/session/9").status == 404
    assert app.handle("GET", "/nowhere").status == 404
    assert app.handle("GET", "/replay").status == 404  # no --replay


def test_record_holds_purchased_sessions_only(shop, goal, tmp_path):
    record = tmp_path / "sessions.jsonl"
    actions = oracle_actions(shop, goal)
    app = ShopApp(shop, list(shop.split("train")), goal, max_steps=len(actions), record=record)
    location = start(app)
    for action in actions:
        html = press(app, location, action)
    assert notices(html) == [("info", f"Recorded as session 1 in {record}.")]
    location = dict(post(app, "/new").headers)["Location"]  # the next goal; the step limit ends it unbought
    for _ in range(len(actions)):
        html = press(app, location, "click[search]")
    assert app.sessions[2].env.done and "without a purchase: score 0. It is not recorded." in notices(html)[-1][1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions.jsonl"]  # nothing else written
    (recorded,) = sessions.read_sessions(record)
    assert (recorded.goal_index, recorded.actions, recorded.score) == (goal, actions, 1.0)
    assert recorded.instruction == shop.goals[goal]["instruction_text"]
    assert sessions.replay(WebShopEnv(shop, max_steps=None), recorded) == 1.0
    # a later server adds to the file; one that is not a sessions file is refused, naming it
    again = ShopApp(shop, list(shop.split("train")), goal, record=record)
    location = start(again)
    for action in actions:
        press(again, location, action)
    assert [s.actions for s in sessions.read_sessions(record)] == [actions, actions]
    other = tmp_path / "other.jsonl"
    other.write_text('{"goal_index": 3}\n')
    with pytest.raises(ValueError, match=re.escape(f"{other}:1: format must be")):
        ShopApp(shop, list(shop.split("train")), goal, record=other)


def test_the_serve_command_names_a_wrong_option(shop, capsys, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the server started despite a wrong option")

    monkeypatch.setattr(serve, "make_server", refuse)
    for argv, message in [
        (["--goal-index", "3"], "error: --goal-index 3 is not a goal of --split train (the train split: goals 1500 to"),
        (["--replay", str(tmp_path / "missing.jsonl")], f"error: {tmp_path / 'missing.jsonl'}: no such file; "
                                                        "`python -m apo_lightning.eval evaluate --results-dir"),
        (["--port", "70000"], "error: --port must be in [0, 65535] (0 = any free port), got 70000"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            webshop_cli.main(["serve", "--data-dir", "synthetic", *argv])
        assert exit_.value.code == 1
        assert capsys.readouterr().err.startswith(message)


def test_the_http_server_answers_as_the_app(shop, goal):
    app = ShopApp(shop, list(shop.split("train")), goal)
    server = make_server(app, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(base + "/") as page:  # follows the redirect to the new session's page
            assert page.url == base + "/session/1" and page.status == 200
            assert Page(page.read().decode()).inputs[1]["name"] == "search_query"
        query = urlencode({"search_query": oracle_actions(shop, goal)[0][7:-1], "step": 0}).encode()
        with urllib.request.urlopen(base + "/session/1", data=query) as page:
            assert page.url == base + "/session/1"
            assert check_page(app.sessions[1].env, page.read().decode())
        assert app.sessions[1].env.page.kind == "search_results"
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(base + "/nowhere")
        assert error.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------------------------ replays
@pytest.fixture
def episodes_file(shop, tmp_path):
    """An evaluation's episodes.jsonl (the oracle on three training goals), written by the evaluation's writer."""
    from apo_lightning.eval.report import write_results

    goals = list(shop.split("train"))[:3]
    trajectories = [play_episode(WebShopEnv(shop, max_steps=MAX_STEPS), OraclePolicy(), g) for g in goals]
    write_results(tmp_path / "results", trajectories, shop, "oracle", "train")
    return tmp_path / "results" / "episodes.jsonl"


def test_a_replay_shows_each_step_of_an_episode(shop, episodes_file):
    episodes = sessions.read_episodes(episodes_file)
    records = [json.loads(line) for line in episodes_file.read_text().splitlines()]
    app = ShopApp(shop, list(shop.split("train")), replays=episodes, replay_source=str(episodes_file))
    listing = app.handle("GET", "/replay")
    assert listing.status == 200 and len(re.findall(r'href="/replay/\d+/0"', listing.body.decode())) == 3
    record = records[1]
    actions = [t["action"] for t in record["turns"]]
    for step in range(len(actions) + 1):
        html = app.handle("GET", f"/replay/2/{step}").body.decode()
        env = env_after(shop, record["goal_index"], actions[:step], max_steps=None)
        page = check_page(env, html)
        assert all("disabled" in b for b in page.buttons if b.get("name") == "action")
        assert [a.get("id") for a in page.links if a.get("id") in ("previous", "next")] == (
            ["previous"] * (step > 0) + ["next"] * (step < len(actions)))
        if step < len(actions):
            assert page.text("next-action") == actions[step]
    assert ("info", f"Replayed score {record['score']!r} (the end of the episode), as recorded.") in [
        (kind, text.replace("&#x27;", "'")) for kind, text in notices(get(app, f"/replay/2/{len(actions)}"))]
    assert app.handle("GET", f"/replay/2/{len(actions) + 1}").status == 404
    assert app.handle("GET", "/replay/4/0").status == 404


def test_a_replay_says_when_its_score_differs_and_refuses_another_catalog(shop, episodes_file, tmp_path):
    records = [json.loads(line) for line in episodes_file.read_text().splitlines()]
    records[0]["score"] = 0.25
    changed = tmp_path / "changed.jsonl"
    changed.write_text("".join(json.dumps(r) + "\n" for r in records))
    app = ShopApp(shop, list(shop.split("train")), replays=sessions.read_episodes(changed))
    last = len(records[0]["turns"])
    assert [k for k, t in notices(get(app, f"/replay/1/{last}")) if "differs from the recorded score 0.25" in t] == [
        "warning"]
    assert "(differs)" in app.handle("GET", "/replay").body.decode()
    records[0]["instruction"] = "Find me something else"
    changed.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match=re.escape(f"{changed}:1: goal {records[0]['goal_index']} of this catalog "
                                                   "is")):
        ShopApp(shop, list(shop.split("train")), replays=sessions.read_episodes(changed))


def test_the_sessions_reader_names_the_file_and_line(tmp_path):
    path = tmp_path / "s.jsonl"
    with pytest.raises(FileNotFoundError, match="serve --record FILE"):
        sessions.read_sessions(path)
    good = {"format": sessions.SESSION_FORMAT, "goal_index": 1, "instruction": "x", "actions": ["click[a]"],
            "score": 0.5}
    for bad, message in [({**good, "actions": "click[a]"}, "actions must be a list of strings"),
                         ({**good, "goal_index": -1}, "goal_index must be an integer >= 0, got -1"),
                         ({**good, "score": None}, "score must be a number, got None")]:
        path.write_text(json.dumps(good) + "\n\n" + json.dumps(bad) + "\n")
        with pytest.raises(ValueError, match=re.escape(f"{path}:3: {message}")):
            sessions.read_sessions(path)
    path.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: not a JSON record")):
        sessions.read_episodes(path)


# ------------------------------------------------------------------------------------------------ SFT
def sft_examples(shop, record, tmp_path, **settings):
    """The SFT data module's training examples with the oracle's demonstrations off and ``record`` as its
    recorded sessions."""
    from apo_lightning.lit.sft_data import SFTDataModule
    from apo_lightning.models.tiny import train_tiny_tokenizer
    from apo_lightning.webshop.settings import EnvConfig

    tokenizer_dir = tmp_path / "tokenizer"
    if not tokenizer_dir.is_dir():
        texts = [shop.goals[i]["instruction_text"] for i in shop.split("train")[:50]] + ["<think></think><answer>"]
        train_tiny_tokenizer(texts, tokenizer_dir, vocab_size=320)
    module = SFTDataModule(env=EnvConfig(data_dir="synthetic"), model_name_or_path=str(tokenizer_dir),
                           num_demos=0, num_val_demos=0, val_goals=0, cache_dir=str(tmp_path / "sft"),
                           recorded_demos=str(record), **settings)
    module.setup("fit")
    return module.train_examples, module.tokenizer


def test_a_recorded_session_is_an_sft_example_that_imitates_its_actions(shop, goal, tmp_path):
    record = tmp_path / "sessions.jsonl"
    search, product, *rest = oracle_actions(shop, goal)
    actions = [search, "click[next >]", "click[< prev]", product, "click[description]", "click[< prev]", *rest]
    app = ShopApp(shop, list(shop.split("train")), goal, record=record)
    location = start(app)
    for action in actions:
        press(app, location, action)
    examples, tokenizer = sft_examples(shop, record, tmp_path)  # the session's segments (its context is cut)
    assert examples and {e["goal_index"] for e in examples} == {goal}
    imitated = [a for e in examples for a in imitated_actions(e, tokenizer)]
    assert imitated[0] == search and [a.lower() for a in imitated] == [a.lower() for a in actions]  # ASINs as shown
    # a session on another split, or one that does not replay to its score, is refused, naming the line
    test_goal = shop.split("test")[0]
    (recorded,) = [json.loads(line) for line in record.read_text().splitlines()]
    for change, message in [
        ({"goal_index": test_goal, "instruction": shop.goals[test_goal]["instruction_text"]},
         f"{record}:1: goal {test_goal} is not a training goal"),
        ({"score": 0.5}, f"{record}:1: replayed as"),
        ({"actions": actions + actions}, f"{record}:1: {2 * len(actions)} actions, more than the step limit"),
    ]:
        record.write_text(json.dumps({**recorded, **change}) + "\n")
        with pytest.raises(ValueError, match=re.escape(message)):
            sft_examples(shop, record, tmp_path)


# ------------------------------------------------------------------------------------------------ a browser
def browser_or_skip():
    """Selenium's Chrome driver for Debian's chromium and chromedriver, or a skip that says what to install."""
    try:
        from selenium import webdriver
    except ImportError:
        skip_unless_required("selenium is not installed; `pip install selenium` to run this test")
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
    driver = shutil.which("chromedriver") or next(
        (p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if Path(p).is_file()), None)
    if chromium is None or driver is None:
        skip_unless_required("headless Chromium and its driver are needed (found chromium: "
                             f"{chromium}, chromedriver: {driver}); `apt-get install -y chromium chromium-driver`")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):  # offline but for the server
        options.add_argument(flag)
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=options)


def click_and_wait(browser, element) -> None:
    """Click ``element`` and wait until the page it leads to has replaced the current one and has loaded.

    The current page is marked with a window property that a new document does not have. Waiting for that, rather
    than for the old ``<html>`` node to go stale, avoids Chromium's race in which a node is looked up while the
    document it belonged to is being replaced ("Node with given id does not belong to the document"); errors raised
    by the driver mid-navigation are retried until the timeout.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    browser.execute_script("window.apoPageBeforeClick = true;")
    element.click()
    WebDriverWait(browser, 30, ignored_exceptions=(WebDriverException,)).until(
        lambda b: b.execute_script("return window.apoPageBeforeClick !== true && document.readyState === 'complete'"))


class Server:
    """``python -m apo_lightning.webshop serve ... --port 0`` in a subprocess; ``url`` is where it listens."""

    def __init__(self, *args: str):
        self.process = subprocess.Popen([sys.executable, "-m", "apo_lightning.webshop", "serve", "--port", "0", *args],
                                        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines = []
        for line in self.process.stdout:
            lines.append(line)
            found = re.search(r"Serving WebShop at (http://\S+/)", line)
            if found:
                self.url = found.group(1)
                return
        raise AssertionError(f"the server did not start: {''.join(lines)}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.mark.slow
def test_a_person_shops_in_chromium_and_the_recorded_session_replays_to_the_same_score(shop, goal, tmp_path):
    from selenium.webdriver.common.by import By

    browser = browser_or_skip()
    shots = Path(os.environ["APO_SCREENSHOTS"]) if os.environ.get("APO_SCREENSHOTS") else None
    record = tmp_path / "sessions.jsonl"
    search, product, *options, buy = oracle_actions(shop, goal)
    query = search[len("search["):-1]
    server = Server("--data-dir", "synthetic", "--split", "train", "--goal-index", str(goal), "--record", str(record))

    def press(action, shot=None):
        if shot and shots:
            browser.save_screenshot(str(shots / shot))
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, f'button[name="action"][value="{action}"]'))

    try:
        browser.get(server.url)
        instruction = browser.find_element(By.ID, "instruction-text").text
        assert instruction == f"Instruction:\n{shop.goals[goal]['instruction_text']}"
        browser.find_element(By.ID, "search_input").send_keys(query)
        if shots:
            browser.save_screenshot(str(shots / "serve_search.png"))
        click_and_wait(browser, browser.find_element(By.ID, "search_button"))
        assert "Total results" in browser.find_element(By.CLASS_NAME, "page-count").text
        press("click[next >]")
        press("click[< prev]")
        press(product, "serve_results.png")
        press("click[description]")
        press("click[< prev]", "serve_description.png")
        for option in options:
            press(option)
            assert browser.find_element(By.CSS_SELECTOR, f'button[value="{option}"]').get_attribute(
                "aria-pressed") == "true"
        press(buy, "serve_item.png")
        if shots:
            browser.save_screenshot(str(shots / "serve_done.png"))
        shown = float(browser.find_element(By.ID, "score").text)
        actions = [search, "click[next >]", "click[< prev]", product, "click[description]", "click[< prev]",
                   *options, buy]
        assert shown == env_after(shop, goal, actions).reward == 1.0  # the env's score for these actions
        assert "Recorded as session 1" in browser.find_element(By.CLASS_NAME, "notice").text
    finally:
        server.stop()
    (recorded,) = sessions.read_sessions(record)
    assert [a.lower() for a in recorded.actions] == [a.lower() for a in actions] and recorded.score == shown
    assert sessions.replay(WebShopEnv(shop, max_steps=MAX_STEPS), recorded) == shown

    # the recording, replayed page by page in the browser, and read back as a demonstration
    server = Server("--data-dir", "synthetic", "--replay", str(record))
    try:
        browser.get(server.url + "replay/1/0")
        for step in range(len(actions)):
            assert browser.find_element(By.ID, "next-action").text == recorded.actions[step]
            if shots and step == 4:
                browser.save_screenshot(str(shots / "serve_replay.png"))
            click_and_wait(browser, browser.find_element(By.ID, "next"))
        assert f"Replayed score {shown!r} (the end of the episode), as recorded." in browser.find_element(
            By.CLASS_NAME, "notice").text
    finally:
        server.stop()
        browser.quit()
    examples, tokenizer = sft_examples(shop, record, tmp_path)
    assert [a.lower() for e in examples for a in imitated_actions(e, tokenizer)] == [a.lower() for a in actions]
