"""The environment installs and runs without the training stack: what ``apo_lightning.webshop`` imports (read from
the source, imports inside functions included) is exactly the package's base requirements, none of them torch,
Lightning or transformers; and (slow) a fresh virtual environment with the base install and no torch steps the env
through gymnasium."""

import ast
import configparser
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import skip_unless_required

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "apo_lightning"
#: Import names of the training stack (the extra "train"): none may be reached from the environment.
TRAINING_STACK = {"torch", "lightning", "pytorch_lightning", "transformers", "peft", "tokenizers", "torchmetrics",
                  "tensorboard", "accelerate", "safetensors", "gguf", "jsonargparse", "scipy", "trl"}


def module_path(root: Path, names: list[str]) -> Path | None:
    """The file of the module ``names`` under ``root`` (``a/b.py`` or ``a/b/__init__.py``), or None."""
    for candidate in (root.joinpath(*names).with_suffix(".py"), root.joinpath(*names, "__init__.py")):
        if names and candidate.is_file():
            return candidate
    return None


def env_imports(root: Path = PACKAGE, start: str = "webshop") -> dict[str, list[str]]:
    """Every outside top-level module that importing any module of ``root/start`` can import, anywhere in a file
    (inside functions too), mapped to where: ``{"numpy": ["webshop/search.py:12"], ...}``.

    The modules reached are every file under ``root/start``, the package's ``__init__.py`` files on the way, and
    whatever of the package they import, transitively. Standard-library modules are left out."""
    todo = sorted((root / start).rglob("*.py")) + [root / "__init__.py"]
    seen: set[Path] = set()
    found: dict[str, list[str]] = {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        package = list(path.relative_to(root).parts[:-1])  # the folders above the module: ["webshop"]
        for depth in range(len(package) + 1):  # the __init__.py of each enclosing package runs first
            if (init := root.joinpath(*package[:depth], "__init__.py")).is_file():
                todo.append(init)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:  # relative, e.g. `from ..utils import files`
                names = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
                inside, outside = [names] + [names + [alias.name] for alias in node.names], []
            elif isinstance(node, ast.ImportFrom):
                top, *names = node.module.split(".")
                inside = [names] + [names + [alias.name] for alias in node.names] if top == root.name else []
                outside = [] if top == root.name else [top]
            elif isinstance(node, ast.Import):
                dotted = [alias.name.split(".") for alias in node.names]
                inside = [names for top, *names in dotted if top == root.name]
                outside = [top for top, *_ in dotted if top != root.name]
            else:
                continue
            todo += [file for names in inside if (file := module_path(root, names)) is not None]
            for top in set(outside) - sys.stdlib_module_names:
                found.setdefault(top, []).append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def base_requirements() -> dict[str, Requirement]:
    """``install_requires`` of setup.cfg, by canonical distribution name."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = [line for line in config["options"]["install_requires"].splitlines() if line.strip()]
    return {canonicalize_name(Requirement(line).name): Requirement(line) for line in lines}


def test_the_environment_imports_nothing_of_the_training_stack():
    found = env_imports()
    assert found, "no imports found: the walk is broken"
    assert {name: where for name, where in found.items() if name in TRAINING_STACK} == {}


def test_the_base_requirements_are_exactly_what_the_environment_imports():
    distributions = importlib.metadata.packages_distributions()  # import name -> distributions providing it
    imported = {canonicalize_name(distributions.get(name, [name])[0]): where for name, where in env_imports().items()}
    assert sorted(imported) == sorted(base_requirements()), f"imported by the env: {imported}"
    training = {canonicalize_name(d) for name in TRAINING_STACK for d in distributions.get(name, [name])}
    assert not training & set(base_requirements())


@pytest.mark.parametrize("source, caught", [
    ("def f():\n    import torch.nn\n", {"torch"}),                       # inside a function
    ("from lightning.pytorch import Trainer\n", {"lightning"}),          # from-import
    ("from ..utils.helpers import x\n", {"transformers"}),               # reached through the package
    ("import apo_lightning.utils.helpers\n", {"transformers"}),          # the same, absolute
    ("from . import plain\n", set()),                                    # the package, nothing outside
    ("import json, os.path\n", set()),                                   # the standard library
])
def test_a_training_import_is_caught_wherever_it_hides(tmp_path, source, caught):
    package = tmp_path / "apo_lightning"
    for folder in ("webshop", "utils"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "utils" / "helpers.py").write_text("x = 1\n\ndef g():\n    import transformers\n")
    (package / "webshop" / "plain.py").write_text("import json\n")
    (package / "webshop" / "env.py").write_text(source)
    assert set(env_imports(package)) & TRAINING_STACK == caught


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=10).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_a_fresh_virtual_environment_without_torch_installs_and_steps_the_env(tmp_path):
    """``pip install <the package>`` (no extra) into a new virtual environment: torch is not there, and the env
    passes gymnasium's checker and plays an episode on the synthetic catalog."""
    if not pypi_reachable():
        skip_unless_required("no network to PyPI: the env-only install cannot be tested")
    source = tmp_path / "source"  # a copy, so that the build leaves nothing in the working tree
    shutil.copytree(PACKAGE, source / "apo_lightning", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    install = subprocess.run([python, "-m", "pip", "install", "-q", str(source)], capture_output=True, text=True,
                             env=env, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr

    no_torch = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True, env=env)
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr

    script = textwrap.dedent("""
        import sys
        import gymnasium
        import apo_lightning.webshop
        from gymnasium.utils.env_checker import check_env

        env = gymnasium.make("apo_lightning/WebShop-v0", data_dir="synthetic", split="test", max_steps=10)
        check_env(env.unwrapped)
        observation, info = env.reset(seed=0)
        observation, reward, terminated, truncated, info = env.step(f"search[{info['instruction']}]")
        assert info["valid"] and info["page"] == "search_results", info
        product = next(c for c in info["available_actions"]["clickables"] if len(c) == 10 and c.isalnum())
        env.step(f"click[{product}]")
        observation, reward, terminated, truncated, info = env.step("click[buy now]")
        assert terminated and not truncated and 0.0 < reward <= 1.0 and info["score"] == reward, (reward, info)
        heavy = sorted(m for m in ("torch", "lightning", "transformers") if m in sys.modules)
        assert not heavy, heavy
        print("episode", info["goal_index"], "score", reward)
    """)
    run = subprocess.run([python, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0 and "score" in run.stdout, run.stdout + run.stderr
