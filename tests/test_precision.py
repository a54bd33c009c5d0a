"""``trainer.precision: auto`` (``lit.precision.auto_precision``): what it resolves to on each accelerator, that it parses
from a config file and from the command line and reaches the Trainer resolved, that the run's ``config.yaml``
records the resolved value and a resume from it works, and that a mistyped precision is still one line."""

import logging
from pathlib import Path

import pytest
import torch
import yaml

from apo_lightning.lit.cli import build_cli, main
from apo_lightning.lit.outputs import SaveConfigAndManifest
from apo_lightning.lit.precision import auto_precision
from apo_lightning.lit.settings import SettingError

SMOKE = str(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml")
#: the smoke config on one CPU process
ONE_CPU = ["--config", SMOKE, "--trainer.logger=false", "--trainer.accelerator=cpu", "--trainer.devices=1",
           "--trainer.strategy=auto"]


@pytest.fixture(autouse=True)
def in_workdir(workdir):
    """Every test runs in this module's working directory (its tiny policy and caches built once)."""
    return workdir


@pytest.fixture
def machine(monkeypatch):
    """``machine(cuda=..., native_bf16=...)``: whether CUDA is available and the CPU has bfloat16 instructions."""

    def set_machine(cuda: bool, native_bf16: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr("apo_lightning.lit.precision.native_bf16_on_cpu", lambda: native_bf16)

    return set_machine


@pytest.fixture
def printed_info():
    """The lines Lightning's ``rank_zero_info`` logs while a test runs (its logger does not propagate to pytest's)."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    records = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: records.append(record.getMessage())
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


@pytest.mark.parametrize("accelerator, cuda, native_bf16, precision", [
    ("gpu", True, False, "bf16-mixed"),
    ("cuda", True, False, "bf16-mixed"),
    ("cpu", False, True, "bf16-mixed"),    # AMX or AVX512-BF16
    ("cpu", False, False, "32-true"),      # bfloat16 would be emulated
    ("cpu", True, False, "32-true"),       # the CPU asked for on a machine with a GPU
    ("auto", True, False, "bf16-mixed"),   # auto: CUDA when available
    ("auto", False, True, "bf16-mixed"),
    ("auto", False, False, "32-true"),
    (None, False, False, "32-true"),       # accelerator unset: Lightning's auto
])
def test_auto_precision_on_each_accelerator(machine, accelerator, cuda, native_bf16, precision):
    machine(cuda=cuda, native_bf16=native_bf16)
    resolved, why = auto_precision(accelerator)
    assert resolved == precision
    assert why == {"bf16-mixed": "GPU" if cuda and accelerator != "cpu" else "CPU with AMX/AVX512-BF16",
                   "32-true": "CPU without AMX/AVX512-BF16: bfloat16 would be emulated"}[precision]


@pytest.mark.parametrize("accelerator", ["mps", "tpu"])
def test_auto_precision_refuses_an_accelerator_it_has_no_rule_for(machine, accelerator):
    machine(cuda=True, native_bf16=True)
    with pytest.raises(ValueError, match=f"not '{accelerator}': give trainer.precision itself"):
        auto_precision(accelerator)
    with pytest.raises(SettingError, match=f"trainer.precision auto resolves .* not '{accelerator}'"):
        build_cli([*ONE_CPU, f"--trainer.accelerator={accelerator}", "--trainer.precision=auto"], run=False)


@pytest.mark.parametrize("native_bf16, precision", [(True, "bf16-mixed"), (False, "32-true")])
@pytest.mark.parametrize("given_in", ["config", "command line"])
def test_auto_parses_and_reaches_the_trainer_resolved(machine, printed_info, tmp_path, native_bf16, precision,
                                                      given_in):
    machine(cuda=False, native_bf16=native_bf16)
    overlay = tmp_path / "auto.yaml"
    overlay.write_text("trainer:\n  precision: auto\n")
    given = ["--config", str(overlay)] if given_in == "config" else ["--trainer.precision", "auto"]
    cli = build_cli([*ONE_CPU, *given], run=False)
    assert cli.trainer.precision == precision
    (saved,) = [c for c in cli.trainer.callbacks if isinstance(c, SaveConfigAndManifest)]
    assert saved.config.trainer.precision == precision  # what the run's config.yaml records
    why = "CPU with AMX/AVX512-BF16" if native_bf16 else "CPU without AMX/AVX512-BF16: bfloat16 would be emulated"
    assert f"trainer.precision auto -> {precision} ({why})" in printed_info


def test_print_config_keeps_auto(capsys):
    with pytest.raises(SystemExit):
        build_cli(["fit", "--config", SMOKE, "--trainer.precision=auto", "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["precision"] == "auto"


def test_a_mistyped_precision_is_one_line(capfd):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *ONE_CPU, "--trainer.precision", "autoo"])
    printed = "".join(capfd.readouterr())
    assert exit_info.value.code == 2 and len(printed.splitlines()) <= 3 and "Traceback" not in printed, printed
    (error,) = [line for line in printed.splitlines() if line.startswith("error:")]
    assert error.startswith("error: trainer.precision: Expected") and "'32-true'" in error and "'auto'" in error


def test_a_run_under_auto_records_the_resolved_precision_and_resumes(workdir, machine):
    machine(cuda=False, native_bf16=False)
    run = ["fit", "--config", SMOKE, "--trainer.precision=auto", "--run_name=auto"]
    assert build_cli([*run, "--trainer.max_steps=1"]).trainer.global_step == 1
    config = yaml.safe_load((workdir / "lightning_logs/auto/version_0/config.yaml").read_text())
    assert config["trainer"]["precision"] == "32-true"
    resumed = build_cli([*run, "--trainer.max_steps=2", "--ckpt_path=last"])
    assert resumed.trainer.global_step == 2 and resumed.trainer.precision == "32-true"
