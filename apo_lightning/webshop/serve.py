"""``python -m apo_lightning.webshop serve``: WebShop in a browser, for people, driven by ``WebShopEnv``.

    python -m apo_lightning.webshop serve --data-dir data/webshop_1k --split train --record my_sessions.jsonl
    python -m apo_lightning.webshop serve --replay results/rule/episodes.jsonl

Each shopping session is a real env episode: the page a person sees is the env's current page (drawn by
``site``), and each button press or search is one ``env.step`` (a POST answered by a redirect to the session's
page). A session starts on a goal of ``--split`` (``--goal-index``, else the split's first goal; "New goal" moves
to the next one) and ends at Buy Now, with the score on the done page, or at the step limit. With ``--record FILE``
every session that ends in a purchase is added to FILE as one line of actions (``sessions``: a demonstration file
the SFT data module reads with ``--data.recorded_demos FILE``). With ``--replay FILE`` the episodes of an
evaluation's ``episodes.jsonl`` (or of a sessions file) are shown page by page, each page re-made by taking the
episode's actions in a fresh env. The server listens on 127.0.0.1 only and writes nothing but the ``--record`` file.

Routes: ``GET /`` (the current session, or a new one), ``POST /new`` (a new session on the next goal),
``GET|POST /session/<id>`` (a session's page; a POST carries ``action=click[...]`` or ``search_query=...`` and the
``step`` the page was drawn at), ``GET /replay`` (the list of replayed episodes) and ``GET /replay/<n>/<step>``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple, Sequence
from urllib.parse import parse_qs, urlsplit

from . import sessions
from .datadir import resolve_data_dir
from .env import WebShopEnv
from .goals import SPLITS
from .shop import WebShop
from .site import document, esc, render_page

DEFAULT_PORT = 3000  # the original site's port
MAX_BODY = 64 * 1024  # bytes a form may post
#: Characters a typed search cannot hold: the agent's action ``search[...]`` could not carry them.
UNSEARCHABLE = re.compile(r"[\[\]\n\r]")


class Response(NamedTuple):
    """What :meth:`ShopApp.handle` answers: an HTTP status, headers and the body bytes."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class _Session:
    """One person's episode: its env, the actions taken so far, notices for the next page, whether it was saved."""

    env: WebShopEnv
    actions: list[str] = field(default_factory=list)
    notices: list[tuple[str, str]] = field(default_factory=list)
    recorded: int | None = None  # the session's number in the --record file once added


@dataclass
class _Replay:
    """A recorded episode to show, with the score its actions reach when re-taken (None until replayed)."""

    episode: sessions.RecordedEpisode
    replayed_score: float | None = None


class ShopApp:
    """The server's state and request handling, without sockets (:func:`make_server` puts it on one).

    Args:
        shop: the catalog (shared with every session's env).
        goal_order: the goals sessions start on, in order (a split's indices); "New goal" takes the next one.
        first_goal: the goal of the first session; must be in ``goal_order``.
        max_steps: the env's step limit (None: no limit).
        observation_mode: the mode of the text observation shown under "What an agent sees".
        record: the sessions file to add purchased sessions to (None: nothing is written).
        replays: episodes to show page by page (each checked against ``shop`` with
            ``sessions.check_episode``).
        replay_source: the file the replays came from, for the page titles.
        images: show product images (their URLs point at outside hosts).
        split: the name of the split ``goal_order`` is, for the bar.

    Raises:
        ValueError: an empty ``goal_order``, a ``first_goal`` outside it, an existing ``record`` that is not a
            sessions file, or a replay recorded on another catalog.
    """

    def __init__(self, shop: WebShop, goal_order: list[int], first_goal: int | None = None,
                 max_steps: int | None = 15, observation_mode: str = "text", record: str | os.PathLike | None = None,
                 replays: Sequence[sessions.RecordedEpisode] = (), replay_source: str = "", images: bool = False,
                 split: str = ""):
        if not goal_order:
            raise ValueError("goal_order is empty: there is no goal to shop for")
        first_goal = goal_order[0] if first_goal is None else first_goal
        if first_goal not in goal_order:
            raise ValueError(f"goal {first_goal} is not among the goals served ({_describe(goal_order, split)})")
        self.shop, self.goal_order, self.split = shop, list(goal_order), split
        self.max_steps, self.observation_mode, self.images = max_steps, observation_mode, images
        self.record = Path(record) if record is not None else None
        self.recorded_before = len(sessions.read_sessions(self.record)) if self._record_has_lines() else 0
        self.next_goal_position = self.goal_order.index(first_goal)
        self.sessions: dict[int, _Session] = {}
        for episode in replays:
            sessions.check_episode(shop, episode)
        self.replays = [_Replay(e) for e in replays]
        self.replay_source = replay_source
        self.lock = threading.Lock()

    def _record_has_lines(self) -> bool:
        return (self.record is not None and self.record.is_file()
                and self.record.read_text(encoding="utf-8").strip() != "")

    # ------------------------------------------------------------------------------------------------ requests
    def handle(self, method: str, target: str, body: bytes = b"") -> Response:
        """Answer one request (``method`` "GET" or "POST", ``target`` the path with its query, ``body`` the
        url-encoded form of a POST); one request at a time."""
        with self.lock:
            path = urlsplit(target).path.rstrip("/") or "/"
            form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
            parts = path.strip("/").split("/")
            if path == "/" and method == "GET":
                return self._start()
            if path == "/new" and method == "POST":
                return self._new_session()
            if parts[0] == "session" and len(parts) == 2 and parts[1].isdigit():
                session = self.sessions.get(int(parts[1]))
                if session is None:
                    return self._error(HTTPStatus.NOT_FOUND, f"There is no session {parts[1]} (the server keeps "
                                       "sessions only while it runs).")
                if method == "POST":
                    return self._act(int(parts[1]), session, form)
                if method == "GET":
                    return self._page(int(parts[1]), session)
            if parts[0] == "replay" and method == "GET":
                if len(parts) == 1:
                    return self._replay_list()
                if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                    return self._replay_page(int(parts[1]), int(parts[2]))
            if path == "/favicon.ico":
                return Response(HTTPStatus.NO_CONTENT, [], b"")
            return self._error(HTTPStatus.NOT_FOUND if method in ("GET", "POST") else HTTPStatus.METHOD_NOT_ALLOWED,
                               f"No page at {method} {path}.")

    def _start(self) -> Response:
        if self.sessions:
            newest = max(self.sessions)
            if not self.sessions[newest].env.done:
                return _redirect(f"/session/{newest}")
        return self._new_session()

    def _new_session(self) -> Response:
        goal = self.goal_order[self.next_goal_position % len(self.goal_order)]
        self.next_goal_position += 1
        env = WebShopEnv(self.shop, self.observation_mode, max_steps=self.max_steps)
        env.reset(goal)
        number = len(self.sessions) + 1
        self.sessions[number] = _Session(env)
        return _redirect(f"/session/{number}")

    def _act(self, number: int, session: _Session, form: dict[str, str]) -> Response:
        """Take the posted action in the session's env (the whole of what a press or a search does)."""
        env = session.env
        if form.get("step") != str(env.num_steps) or env.done:
            session.notices.append(("warning", "That page was no longer the session's current page, so the action "
                                    "was not taken; here is the current page."))
            return _redirect(f"/session/{number}")
        if "search_query" in form:
            query = form["search_query"].strip()
            if not query or UNSEARCHABLE.search(query):
                session.notices.append(("error", "Type a search without [ ] or line breaks: the agent's action "
                                        "search[...] could not hold them. No action was taken."))
                return _redirect(f"/session/{number}")
            action = f"search[{query}]"
        elif "action" in form:
            action = form["action"]
        else:
            return self._error(HTTPStatus.BAD_REQUEST, "A session POST needs an 'action' or a 'search_query' field.")
        _, _, done, info = env.step(action)
        session.actions.append(action)
        if not info["valid"]:
            session.notices.append(("warning", f"The shop did not take {action} (it still counts as a step)."))
        if done and info.get("reward_info") is not None:
            self._save(session)
        elif done:
            session.notices.append(("warning", f"The step limit ({env.max_steps} steps) ended this session "
                                    "without a purchase: score 0. It is not recorded."))
        return _redirect(f"/session/{number}")

    def _save(self, session: _Session) -> None:
        if self.record is None:
            return
        try:
            total = sessions.append_session(self.record, sessions.session_record(session.env, session.actions))
        except (OSError, ValueError) as e:
            session.notices.append(("error", f"This session could not be recorded: {e}"))
            print(f"error: could not record a session to {self.record}: {e}", file=sys.stderr)
            return
        session.recorded = total
        session.notices.append(("info", f"Recorded as session {total} in {self.record}."))

    def _bar(self, *pieces: str) -> str:
        new = '<form method="post" action="/new"><button type="submit" id="new-goal">New goal</button></form>'
        replay = '<a href="/replay">Replays</a>' if self.replays else ""
        return '<span class="sep">·</span>'.join(p for p in ("<b>WebShop</b>", *pieces, new, replay) if p)

    def _page(self, number: int, session: _Session) -> Response:
        env = session.env
        steps = f"step {env.num_steps}" + (f" of {env.max_steps}" if env.max_steps is not None else "")
        where = f"goal {env.goal_index}" + (f" ({self.split})" if self.split else "")
        notices, session.notices = session.notices, []
        page = render_page(env, self._bar(f"session {number}", where, steps), f"/session/{number}", env.num_steps,
                           notices, images=self.images)
        return _html(page)

    # ------------------------------------------------------------------------------------------------ replays
    def _replay_env(self) -> WebShopEnv:
        return WebShopEnv(self.shop, self.observation_mode, max_steps=None)

    def _replayed_score(self, replay: _Replay) -> float:
        if replay.replayed_score is None:
            replay.replayed_score = sessions.replay(self._replay_env(), replay.episode)
        return replay.replayed_score

    def _replay_list(self) -> Response:
        if not self.replays:
            return self._error(HTTPStatus.NOT_FOUND, "No replays: start the server with --replay FILE "
                               "(an evaluation's episodes.jsonl or a --record sessions file).")
        rows = []
        for n, replay in enumerate(self.replays, 1):
            e = replay.episode
            score = self._replayed_score(replay)
            same = e.score is None or abs(score - e.score) < 1e-9
            rows.append(f'<tr><td><a href="/replay/{n}/0">{n}</a></td><td>{esc(e.label)}</td><td>{e.goal_index}</td>'
                        f"<td>{len(e.actions)}</td><td>{esc(_score(e.score))}</td>"
                        f'<td class="{"" if same else "differs"}">{esc(_score(score))}{"" if same else " (differs)"}'
                        f"</td><td>{esc(e.instruction)}</td></tr>")
        table = ('<table class="details"><tr><th>#</th><th>played by</th><th>goal</th><th>actions</th>'
                 f'<th>recorded score</th><th>replayed score</th><th>instruction</th></tr>{"".join(rows)}</table>')
        return _html(document(f'<div class="bar">{self._bar(f"replays of {esc(self.replay_source)}")}</div>'
                              f"<main><h2>{len(self.replays)} episodes</h2>{table}</main>", "WebShop replays"))

    def _replay_page(self, n: int, step: int) -> Response:
        if not 1 <= n <= len(self.replays):
            return self._error(HTTPStatus.NOT_FOUND, f"There is no replay {n}: the replay file holds "
                               f"{len(self.replays)} episodes (numbered from 1).")
        replay = self.replays[n - 1]
        e = replay.episode
        if step > len(e.actions):
            return self._error(HTTPStatus.NOT_FOUND, f"Replay {n} has {len(e.actions)} actions: its pages are steps "
                               f"0 to {len(e.actions)}.")
        env = self._replay_env()
        sessions.replay(env, e, step)
        links = [f'<a href="/replay/{n}/{step - 1}" id="previous">&larr; previous</a>' if step > 0 else "",
                 f'<a href="/replay/{n}/{step + 1}" id="next">next &rarr;</a>' if step < len(e.actions) else ""]
        bar = self._bar(f"replay {n} of {len(self.replays)}", esc(e.label), f"goal {e.goal_index}",
                        f"step {step} of {len(e.actions)}", *links)
        notices: list[tuple[str, str]] = []
        after = ""
        if step < len(e.actions):
            turn = e.turns[step] if step < len(e.turns) else {}
            thought = f"<p>Thought: {esc(turn['thought'])}</p>" if turn.get("thought") else ""
            action = e.actions[step] or f"(no action: {turn.get('format_error') or 'the reply had none'})"
            after = f'<div class="turn"><b>Next action:</b> <code id="next-action">{esc(action)}</code>{thought}</div>'
        else:
            score = self._replayed_score(replay)
            ending = "ended by the step limit" if e.truncated else "the end of the episode"
            text = f"Replayed score {score!r} ({ending})"
            if e.score is not None and abs(score - e.score) >= 1e-9:
                notices.append(("warning", f"{text} differs from the recorded score {e.score!r}: was it played with "
                                "this catalog (--data-dir, --goals, --seed)?"))
            else:
                notices.append(("info", text + (", as recorded." if e.score is not None else ".")))
        highlight = e.actions[step] if step < len(e.actions) else None
        return _html(render_page(env, bar, None, notices=notices, highlight=highlight, images=self.images,
                                 after=after))

    def _error(self, status: HTTPStatus, text: str) -> Response:
        return _html(document(f'<div class="bar">{self._bar()}</div><main><h2>{int(status)} {esc(status.phrase)}'
                              f"</h2><p>{esc(text)}</p></main>", "WebShop"), status)


def _score(score: float | None) -> str:
    return "—" if score is None else repr(score)


def _describe(goal_order: list[int], split: str) -> str:
    """``"the train split: goals 1500 to 6909"`` (or ``"... : 12 goals"`` when they are not a range)."""
    contiguous = goal_order == list(range(goal_order[0], goal_order[-1] + 1))
    span = f"goals {goal_order[0]} to {goal_order[-1]}" if contiguous else f"{len(goal_order)} goals"
    return f"the {split} split: {span}" if split else span


def _html(page: str, status: int = HTTPStatus.OK) -> Response:
    return Response(int(status), [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")],
                    page.encode("utf-8"))


def _redirect(location: str, status: int = HTTPStatus.SEE_OTHER) -> Response:
    return Response(int(status), [("Location", location), ("Cache-Control", "no-store")], b"")


# ---------------------------------------------------------------------------------------------------- HTTP
def make_server(app: ShopApp, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """An HTTP server for ``app`` on ``host:port`` (port 0: any free port; read it from ``server_address``).

    Raises:
        OSError: the port cannot be bound (e.g. in use).
    """

    class Handler(BaseHTTPRequestHandler):
        server_version = "WebShop"

        def _answer(self, method: str) -> None:
            body = b""
            if method == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
                    return
                body = self.rfile.read(length)
            response = app.handle(method, self.path, body)
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's names)
            self._answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, format: str, *args) -> None:  # one line per request on stderr
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


# ---------------------------------------------------------------------------------------------------- command
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``serve`` options beyond the data and episode ones every ``webshop`` command has."""
    parser.add_argument("--split", choices=sorted(SPLITS), default="train",
                        help="the goals sessions start on: train (default; recorded sessions are training "
                             "demonstrations), val or test (WebShop's split by goal index)")
    parser.add_argument("--goal-index", type=int, default=None,
                        help="the first session's goal (a goal index of --split; default: the split's first)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0 = any free port)")
    parser.add_argument("--record", default=None, metavar="FILE",
                        help="add each session that ends in a purchase to this sessions file (JSON lines of "
                             "actions; SFT reads it with --data.recorded_demos FILE)")
    parser.add_argument("--replay", default=None, metavar="FILE",
                        help="also show these episodes page by page: an evaluation's episodes.jsonl or a --record "
                             "file")
    parser.add_argument("--images", action="store_true",
                        help="show product images (the browser fetches the catalog's image URLs from their hosts)")


def build_app(args: argparse.Namespace) -> ShopApp:
    """The app for parsed ``serve`` arguments: loads the catalog and the replays, checks the options.

    Raises:
        ValueError: ``--goal-index`` not in ``--split``, ``--port`` out of range, an existing ``--record`` file that
            is not a sessions file, or a replay file recorded on another catalog (each message names the option).
        FileNotFoundError: the ``--replay`` file does not exist.
        WebShopDataError: the data directory is missing a file.
    """
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in [0, 65535] (0 = any free port), got {args.port}")
    data_dir, description = resolve_data_dir(args.data_dir)
    print(description, flush=True)
    shop = WebShop.load(data_dir, goals=args.goals, seed=args.seed)
    order = list(shop.split(args.split))
    if args.goal_index is not None and args.goal_index not in order:
        raise ValueError(f"--goal-index {args.goal_index} is not a goal of --split {args.split} "
                         f"({_describe(order, args.split)}); pick one there or change --split")
    if args.record is not None and Path(args.record).exists() and not Path(args.record).is_file():
        raise ValueError(f"--record {args.record} is a folder; name a file (new, or a sessions file to add to)")
    try:
        replays = sessions.read_episodes(args.replay) if args.replay else []
        for episode in replays:
            sessions.check_episode(shop, episode)
    except ValueError as e:
        raise ValueError(f"--replay: {e}") from e
    try:
        return ShopApp(shop, order, args.goal_index, args.max_steps or None, args.observation_mode, args.record,
                       replays, args.replay or "", args.images, args.split)
    except ValueError as e:
        raise ValueError(f"--record: {e}") from e


def main(args: argparse.Namespace) -> None:
    """Serve until interrupted (Ctrl-C); exit with status 1 and one line when an option or file is wrong."""
    try:
        app = build_app(args)
        server = make_server(app, args.port)
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    host, port = server.server_address[:2]
    print(f"{app.shop!r}; sessions start on goal {app.goal_order[app.next_goal_position]} of the {app.split} split",
          flush=True)
    if app.record is not None:
        print(f"Recording purchased sessions to {app.record} ({app.recorded_before} there already)", flush=True)
    if app.replays:
        print(f"Replaying {len(app.replays)} episodes of {args.replay} at http://{host}:{port}/replay", flush=True)
    print(f"Serving WebShop at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
