"""The reference policies shipped in ``models/`` reproduce the greedy results recorded on their cards, exactly.

Greedy decoding is deterministic, so the success, score and number of turns of every one of the 32 recorded goals
must come back the same: any drift in the environment, the prompt format, the tokenizer or the rollout engine shows
up here.
"""

import json
from pathlib import Path

import pytest

from apo_lightning.eval.__main__ import main

MODELS = Path(__file__).resolve().parents[1] / "models"
RECORDS = sorted(MODELS.glob("*/greedy32.json"))


def test_every_shipped_reference_has_a_card_and_a_record():
    folders = [p for p in MODELS.iterdir() if p.is_dir()] if MODELS.exists() else []
    for folder in folders:
        assert (folder / "CARD.md").is_file() and (folder / "greedy32.json").is_file(), folder
        assert (folder / "model.safetensors").stat().st_size <= 10 * 2**20, f"{folder}: over 10 MB"


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.parent.name)
def test_the_reference_reproduces_its_recorded_greedy_results(record, tmp_path, request, capsys):
    recorded = json.loads(record.read_text())
    settings = recorded["settings"]
    assert len(recorded["outcomes"]) == 32 and settings["limit"] == 32
    synthetic = settings["data_dir"] == "synthetic"
    data_dir = "synthetic" if synthetic else str(request.getfixturevalue("real_data_dir"))  # the real 1k set
    args = ["evaluate", "--model", str(record.parent), "--data-dir", data_dir, "--goals",
            settings["goals"], "--catalog-seed", str(settings["catalog_seed"]), "--split", settings["split"],
            "--split-scheme", settings["split_scheme"], "--limit", "32", "--max-steps", str(settings["max_steps"]),
            "--max-new-tokens", str(settings["max_new_tokens"]), "--context-budget", str(settings["context_budget"]),
            "--save-outcomes", str(tmp_path / "outcomes.json")]
    if settings["history_turns"] is not None:
        args += ["--history-turns", str(settings["history_turns"])]
    main(args)
    capsys.readouterr()
    replayed = json.loads((tmp_path / "outcomes.json").read_text())["outcomes"]
    assert replayed == recorded["outcomes"]
