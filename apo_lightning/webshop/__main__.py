"""Command line: ``python -m apo_lightning.webshop download|play|serve``: the WebShop data, the env by hand.

    python -m apo_lightning.webshop download                      # the WebShop 1k files into data/webshop_1k
    python -m apo_lightning.webshop play --data-dir data/webshop_1k --goal-index 3
    python -m apo_lightning.webshop serve --record demos.jsonl     # shop in a browser at http://127.0.0.1:3000/

``download`` fetches items_shuffle_1000.json, items_ins_v2_1000.json and items_human_ins.json from public mirrors
(add your own with ``--url``), verifies each file's size and hashes and installs it atomically; run it again to
resume or to check. ``play`` reads the data the rule of every command finds (``--data-dir``, else
``$APO_WEBSHOP_DATA``, else ``data/webshop_1k`` if present, else the synthetic catalog under data/synthetic/seed0).
``serve`` shows the same env as web pages for people (``serve.py``), records sessions as SFT demonstrations and
replays an evaluation's episodes page by page. Policies (scripted or models) are evaluated with
``python -m apo_lightning.eval evaluate``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from . import download as dl
from . import serve
from .datadir import DEFAULT_DATA_DIR, resolve_data_dir
from .env import WebShopEnv
from .shop import WebShop


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None,
                        help="WebShop data folder, or 'synthetic' (default: $APO_WEBSHOP_DATA, else data/webshop_1k if "
                             "present, else the synthetic catalog)")
    parser.add_argument("--goals", choices=("synthetic", "human"), default="synthetic")
    parser.add_argument("--seed", type=int, default=233, help="price/goal seed; 233 reproduces the original")
    parser.add_argument("--observation-mode", choices=("text", "text_rich"), default="text")
    parser.add_argument("--max-steps", type=int, default=15, help="step limit per episode (0 = none)")


def play(args: argparse.Namespace) -> None:
    """Interactive session: type actions such as search[red shoes] or click[buy now]; 'quit' ends."""
    data_dir, description = resolve_data_dir(args.data_dir)
    print(description)
    shop = WebShop.load(data_dir, goals=args.goals, seed=args.seed)
    env = WebShopEnv(shop, args.observation_mode, max_steps=args.max_steps or None)
    observation = env.reset(args.goal_index)
    print(f"{shop}\ngoal {args.goal_index}: {env.instruction_text}\n")
    while True:
        print(observation)
        available = env.available_actions()
        print(f"\nactions: {'search[...]  ' if available['has_search_bar'] else ''}"
              + "  ".join(f"click[{c}]" for c in available["clickables"]))
        try:
            action = input("> ").strip()
        except EOFError:
            break
        if action in ("quit", "exit"):
            break
        observation, reward, done, info = env.step(action)
        print(f"reward={reward} done={done} valid={info['valid']}")
        if done:
            print(observation)
            print(json.dumps({k: v for k, v in info.items()}, default=str))
            break


def download_command(args: argparse.Namespace) -> list[dl.Outcome]:
    """Fetch, verify and install the data files; exit with status 1 and a plain message when that fails."""
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    try:
        manifest = dl.load_manifest(args.manifest) if args.manifest else dl.MANIFEST
        files = [name for name in manifest if not (args.no_human and name == dl.HUMAN_FILE)]
        outcomes = dl.download(args.dest, files=files, urls=args.url, use_default_mirrors=not args.no_default_mirrors,
                               manifest=manifest, force=args.force, timeout=args.timeout, progress=not args.quiet)
    except (dl.DownloadError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    for outcome in outcomes:
        where = f" from {outcome.source}" if outcome.source else ""
        print(f"{outcome.name}: {outcome.action}{where} -> {outcome.path} (verified)")
    print(f"Use it with --data-dir {args.dest} (or APO_WEBSHOP_DATA={args.dest}).")
    return outcomes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m apo_lightning.webshop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_play = sub.add_parser("play", allow_abbrev=False, help="type actions and see observations and rewards")
    _common(p_play)
    p_play.add_argument("--goal-index", type=int, default=0)
    p_serve = sub.add_parser("serve", allow_abbrev=False,
                             help="shop in a browser on localhost; record sessions, replay episodes")
    _common(p_serve)
    serve.add_arguments(p_serve)
    p_download = sub.add_parser("download", allow_abbrev=False, help="fetch and verify the WebShop 1k data files")
    p_download.add_argument("--dest", default=str(DEFAULT_DATA_DIR),
                            help=f"data directory to install the files into (default {DEFAULT_DATA_DIR})")
    p_download.add_argument("--url", action="append", default=[], metavar="MIRROR",
                            help="a base URL under which the file names are looked up (or a local folder, or a "
                                 ".tar.gz archive URL), tried before the default mirrors; repeatable")
    p_download.add_argument("--no-default-mirrors", action="store_true",
                            help="try only the --url mirrors")
    p_download.add_argument("--no-human", action="store_true",
                            help=f"leave out {dl.HUMAN_FILE} (5 MB; only --goals human reads it)")
    p_download.add_argument("--manifest", default=None,
                            help='JSON {name: {"size": bytes, "sha256": hex, "git_blob": hex}} to verify against '
                                 "instead of the built-in table (for other file sets and tests)")
    p_download.add_argument("--force", action="store_true",
                            help="replace a file in --dest whose size or hash is wrong")
    p_download.add_argument("--timeout", type=float, default=60.0, help="seconds a connection may stay silent")
    p_download.add_argument("--quiet", action="store_true", help="no progress bars or per-URL messages")
    args = parser.parse_args(argv)
    {"play": play, "download": download_command, "serve": serve.main}[args.command](args)


if __name__ == "__main__":
    main()
