"""The data-location rule: --data-dir, else $APO_WEBSHOP_DATA, else data/webshop_1k here, else synthetic."""

from pathlib import Path

from apo_lightning.webshop.datadir import ENV_VAR, resolve_data_dir


def test_explicit_wins_over_everything(tmp_path):
    (tmp_path / "data" / "webshop_1k").mkdir(parents=True)
    path, text = resolve_data_dir("/some/where", environ={ENV_VAR: "/from/env"}, cwd=tmp_path)
    assert path == Path("/some/where")
    assert text == "WebShop data: /some/where (--data-dir)"


def test_environment_variable_when_no_explicit(tmp_path):
    (tmp_path / "data" / "webshop_1k").mkdir(parents=True)
    path, text = resolve_data_dir(None, environ={ENV_VAR: "/from/env"}, cwd=tmp_path)
    assert path == Path("/from/env")
    assert text == f"WebShop data: /from/env (from ${ENV_VAR})"


def test_empty_explicit_and_empty_variable_count_as_unset(tmp_path):
    path, text = resolve_data_dir("", environ={ENV_VAR: ""}, cwd=tmp_path)
    assert path is None
    assert "synthetic catalog" in text
    # unset, not a request for the synthetic catalog: the rule goes on to its next step
    assert resolve_data_dir("", environ={ENV_VAR: "/from/env"}, cwd=tmp_path)[0] == Path("/from/env")
    (tmp_path / "data" / "webshop_1k").mkdir(parents=True)
    assert resolve_data_dir("", environ={ENV_VAR: ""}, cwd=tmp_path)[0] == tmp_path / "data" / "webshop_1k"


def test_default_folder_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "data" / "webshop_1k").mkdir(parents=True)
    monkeypatch.delenv(ENV_VAR, raising=False)  # CI sets it
    monkeypatch.chdir(tmp_path)
    path, text = resolve_data_dir(None)  # the real os.environ and current directory
    assert path == tmp_path / "data" / "webshop_1k"
    assert path.is_absolute()
    assert text == f"WebShop data: {path} (found data/webshop_1k in the current directory)"


def test_default_folder_must_be_a_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "webshop_1k").write_text("not a folder")
    path, _ = resolve_data_dir(None, environ={}, cwd=tmp_path)
    assert path is None
    (tmp_path / "data" / "webshop_1k").unlink()
    (tmp_path / "data" / "webshop_1k").mkdir()  # the same name as a folder is found
    assert resolve_data_dir(None, environ={}, cwd=tmp_path)[0] == tmp_path / "data" / "webshop_1k"


def test_synthetic_when_nothing_is_set(tmp_path):
    path, text = resolve_data_dir(None, environ={}, cwd=tmp_path)
    assert path is None
    assert text.startswith("WebShop data: the synthetic catalog")
    assert "python -m apo_lightning.webshop download" in text  # tells the user how to get the real set


def test_home_is_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_data_dir("~/webshop", environ={})[0] == tmp_path / "webshop"
    assert resolve_data_dir(None, environ={ENV_VAR: "~/w2"})[0] == tmp_path / "w2"
