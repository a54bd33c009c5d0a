"""The command line as a user meets it: ``--help``, errors that name the setting, a missing policy path, re-running a
finished run, the paths a run prints and the manifest it writes. Every run happens in a fresh working directory,
which must hold nothing afterwards but the run's own folders."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from apo_lightning.lit.cli import main
from apo_lightning.lit.errors import explain_parse_error
from apo_lightning.lit.settings import check_policy
from apo_lightning.models.tiny import TinyPolicySpec

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "configs" / "smoke.yaml")
#: the folders a run may write into, relative to its working directory
RUN_FOLDERS = {"checkpoints", "lightning_logs", "results", "data"}


def written(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def errors(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if line.startswith("error:")]


def run_main(args, capfd) -> tuple[int, str]:
    """``main(args)`` in this process; its exit status and what it printed (stdout and stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capfd.readouterr()
    return exit_info.value.code, out + err


@pytest.fixture
def fresh_cwd(tmp_path, monkeypatch):
    cwd = tmp_path / "run"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


# ------------------------------------------------------------------------------------------------ help
def test_help_with_a_config_lists_its_model_and_data_settings_one_line_each(capfd, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    status, printed = run_main(["fit", "--config", SMOKE, "--help"], capfd)
    lines = printed.splitlines()
    assert status == 0 and lines[0].startswith("usage:")
    assert len(lines) < 120 and max(len(line) for line in lines) <= 100  # not 545 lines of Trainer flags
    options = {line.split()[0]: line.split()[1] for line in lines if line.startswith("  --")}
    assert options["--model.model_name_or_path"] == "data/models/tiny-smoke"  # the config's values
    assert options["--data.batch_size"] == "2" and options["--data.vstar.num_samples"] == "2"
    assert options["--trainer.max_steps"] == "2" and options["--run_name"] == "smoke"
    assert "--trainer.accumulate_grad_batches" not in options  # Trainer flags the config leaves alone: --help=full
    assert "--data.seed" not in options  # linked from seed_everything: not a setting of its own
    batch_size = next(line for line in lines if line.startswith("  --data.batch_size "))
    assert "goals per training batch" in batch_size  # the first words of its docstring


def test_help_without_a_config_says_how_to_list_a_configs_settings(capfd):
    status, printed = run_main(["fit", "--help"], capfd)
    head = "\n".join(printed.splitlines()[:5])
    assert status == 0 and "--config configs/quickstart.yaml --help" in head
    assert "configs/quickstart.yaml" in printed and "configs/smoke.yaml" in printed and len(printed.splitlines()) < 60


# ------------------------------------------------------------------------------------------------ errors
def test_a_parse_error_leads_with_the_setting_the_value_and_what_is_allowed(capfd):
    status, printed = run_main(["fit", "--config", SMOKE, "--data.env.observation_mode", "html"], capfd)
    assert status == 2 and len(printed.splitlines()) <= 3, printed
    assert errors(printed) == ["error: data.env.observation_mode: expected one of 'text', 'text_rich', got html"]
    status, printed = run_main(["fit", "--config", SMOKE, "--data.batch_sizes", "3"], capfd)
    assert status == 2 and errors(printed) == ["error: data.batch_sizes: not a setting of WebShopRLDataModule (did "
                                               "you mean data.batch_size?)"]
    status, printed = run_main(["fit", "--config", SMOKE, "--model.objective=GRPOO"], capfd)
    assert status == 2 and errors(printed) == ["error: model.objective: GRPOO is not a class it can import; expected "
                                               "one of APO, AWR, GRPO, KLPG or a full class path (did you mean GRPO?)"]


def test_a_prefix_of_an_option_is_refused_not_taken_for_the_option(fresh_cwd, capfd):
    """argparse takes ``--trainer.max_step`` for ``--trainer.max_steps`` unless told not to: a typo must never
    become a setting (here it would have trained)."""
    for typo, meant in (("--trainer.max_step", "--trainer.max_steps"), ("--seed_everythin", "--seed_everything")):
        status, printed = run_main(["fit", "--config", SMOKE, typo, "1"], capfd)
        assert status == 2 and errors(printed) == [f"error: unrecognized arguments: {typo} 1 (did you mean {meant}?)"]


def test_explain_parse_error_drops_the_union_boilerplate():
    message = ('Parser key "data":\n  Does not validate against any of the Union subtypes\n  Subtypes: [A, None]\n'
               "  Errors:\n    - Problem with given class_path 'x.Data':\n        Parser key \"batch_size\":\n"
               "          Expected a <class 'int'>. Got value: abc\n    - Expected a <class 'NoneType'>\n"
               "  Given value type: <class 'NestedArg'>\n  Given value: NestedArg(key='batch_size', val='abc')")
    assert explain_parse_error(message) == "data.batch_size: expected int, got abc"
    assert explain_parse_error("unrecognized arguments: --trainer.max_stepz 3", ["--trainer.max_steps"]) == (
        "unrecognized arguments: --trainer.max_stepz 3 (did you mean --trainer.max_steps?)")


def test_a_value_a_class_refuses_is_one_line_naming_the_setting(fresh_cwd, capfd):
    status, printed = run_main(["fit", "--config", SMOKE, "--data.batch_size", "0"], capfd)
    assert status == 2
    error = errors(printed)
    assert len(error) == 1 and "data.batch_size" in error[0] and error[0].endswith("0"), printed
    assert "Traceback" not in printed and "Namespace(" not in printed and len(printed.splitlines()) <= 3, printed
    assert written(fresh_cwd) <= RUN_FOLDERS


# ------------------------------------------------------------------------------------------------ the policy path
def test_a_missing_policy_path_is_refused_and_never_created(fresh_cwd, tmp_path, capfd):
    """The smoke config builds a fresh tiny policy (``model.tiny``), but only into ``data/models/``: anywhere else a
    missing path is a mistake, not a request for an untrained policy."""
    missing = tmp_path / "nonexistent"
    status, printed = run_main(["fit", "--config", SMOKE, "--model.model_name_or_path", str(missing)], capfd)
    assert status == 2 and f"error: model.model_name_or_path {missing} does not exist" in printed, printed
    assert "data/models/" in printed and "Traceback" not in printed
    assert not missing.exists() and written(fresh_cwd) <= RUN_FOLDERS


def test_check_policy_builds_a_tiny_policy_only_under_data_models(fresh_cwd):
    tiny = TinyPolicySpec()
    check_policy("data/models/new-tiny", tiny)  # a new folder there: ensure_policy builds it
    for path in ("elsewhere/new-tiny", "data/modles/new-tiny", str(fresh_cwd.parent / "new-tiny")):
        with pytest.raises(FileNotFoundError, match="builds a fresh .* only into a new folder under data/models"):
            check_policy(path, tiny)
    with pytest.raises(FileNotFoundError, match="data/models/new-tiny does not exist: train it first"):
        check_policy("data/models/new-tiny", None)  # without model.tiny nothing is built anywhere
    (fresh_cwd / "models" / "ref").mkdir(parents=True)
    check_policy("models/ref", None)
    with pytest.raises(FileNotFoundError, match="models/rfe does not exist"):
        check_policy("models/rfe", None)  # one slash, but its folder exists: a path, not a hub id
    check_policy("Qwen/Qwen2.5-0.5B-Instruct", None)  # a hub id: loaded (or refused) by the hub


# ------------------------------------------------------------------------------------------------ a finished run
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """``python cli.py fit --config configs/smoke.yaml`` run to its end in a fresh working directory."""
    cwd = tmp_path_factory.mktemp("finished")
    done = subprocess.run([sys.executable, str(REPO / "cli.py"), "fit", "--config", SMOKE], cwd=cwd, timeout=600,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd, done.stdout + done.stderr


def test_a_run_prints_its_paths_once_writes_a_manifest_and_nothing_else(finished_run):
    cwd, printed = finished_run
    assert printed.count("This run writes to:") == 1
    for path in ("checkpoints/smoke", "lightning_logs/smoke/version_0", "results/smoke", "data/vstar-smoke",
                 "data/models/tiny-smoke"):
        assert path in printed, path
    assert "Total params" not in printed and "| Name" not in printed  # the model summary is off by default
    assert written(cwd) <= RUN_FOLDERS
    log_dir = cwd / "lightning_logs/smoke/version_0"
    assert (log_dir / "config.yaml").is_file()
    manifest = json.loads((log_dir / "manifest.json").read_text())  # beside the run's config.yaml
    assert manifest["command"] == ["cli.py", "fit", "--config", SMOKE] and manifest["cwd"] == str(cwd)
    assert {"torch", "lightning", "transformers", "peft"} <= set(manifest["packages"])
    assert manifest["packages"]["torch"] == torch.__version__
    assert set(manifest["cpu"]["flags"]) >= {"avx2", "avx512_bf16", "amx_tile"} and manifest["torch_threads"] == 1
    if (REPO / ".git").exists():
        assert len(manifest["git"]["commit"]) == 40 and isinstance(manifest["git"]["dirty"], bool)


def test_rerunning_a_finished_run_says_how_to_resume_or_start_afresh(finished_run, monkeypatch, capfd):
    cwd, _ = finished_run
    monkeypatch.chdir(cwd)
    before = sorted(p.name for p in (cwd / "checkpoints/smoke").iterdir())
    status, printed = run_main(["fit", "--config", SMOKE], capfd)
    (error,) = errors(printed)
    assert status == 2 and error.startswith("error: checkpoints/smoke already holds the checkpoints"), printed
    assert "--ckpt_path last" in printed and "--run_name" in printed and "Traceback" not in printed
    assert sorted(p.name for p in (cwd / "checkpoints/smoke").iterdir()) == before


def test_resuming_a_finished_run_continues_it_without_checkpoint_twins(finished_run, monkeypatch):
    cwd, _ = finished_run
    monkeypatch.chdir(cwd)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = main(["fit", "--config", SMOKE, "--ckpt_path", "last", "--trainer.max_steps=3"])
    assert cli.trainer.global_step == 3
    assert not [w for w in caught if "is not empty" in str(w.message)]  # resuming into its own folder is no news
    names = sorted(p.name for p in (cwd / "checkpoints/smoke").iterdir())
    assert "last.ckpt" in names and not any("-v" in name for name in names), names
    assert torch.load(cwd / "checkpoints/smoke/last.ckpt", weights_only=False)["global_step"] == 3


def test_a_folder_two_checkpoint_callbacks_share_is_listed_once():
    from jsonargparse import Namespace

    from apo_lightning.lit.outputs import describe_outputs

    def checkpoint(**settings):
        return Namespace(class_path="lightning.pytorch.callbacks.ModelCheckpoint",
                         init_args=Namespace(dirpath="checkpoints/x", **settings))

    config = Namespace(trainer=Namespace(callbacks=[checkpoint(monitor="val/score"), checkpoint(save_last=True)]))
    text = describe_outputs(config, Path("lightning_logs/x/version_0"))
    assert text.count("checkpoints/x") == 1 and "lightning_logs/x/version_0" in text
