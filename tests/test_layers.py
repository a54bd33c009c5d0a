"""The package's layers: each folder one layer, imports only downward (parsed from the source, not imported)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "apo_lightning"
#: Bottom to top: a module may import its own layer and the layers before it, nothing after.
LAYERS = ("utils", "webshop", "models", "rollout", "baselines", "apo", "eval", "lit")


def imported_layers(root: Path, package: str = "apo_lightning") -> list[tuple[str, str, int]]:
    """``(module path, imported layer, line)`` for every import of ``package`` in the ``.py`` files under ``root``
    (relative imports resolved against the importing file's position)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts  # e.g. ("lit", "rl_data")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:  # from ..x import y: climb from the file's folder
                    base = list(parts[:-1])[: len(parts) - node.level]
                    target = base + (node.module.split(".") if node.module else [])
                    if not target and node.names:
                        target = [node.names[0].name]
                elif node.module and node.module.split(".")[0] == package:
                    target = node.module.split(".")[1:] or [node.names[0].name]
                else:
                    continue
                found.append((str(path.relative_to(root)), target[0], node.lineno))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names = alias.name.split(".")
                    if names[0] == package and len(names) > 1:
                        found.append((str(path.relative_to(root)), names[1], node.lineno))
    return found


def upward_imports(root: Path) -> list[str]:
    """Every import from a lower layer of a higher one (or of a folder that is no layer)."""
    problems = []
    for module, target, line in imported_layers(root):
        own = Path(module).parts[0] if len(Path(module).parts) > 1 else None
        if own is None:  # apo_lightning/__init__.py
            continue
        if own not in LAYERS or target not in LAYERS:
            problems.append(f"{module}:{line} imports {target!r}; layers are {LAYERS}")
        elif LAYERS.index(target) > LAYERS.index(own):
            problems.append(f"{module}:{line} ({own}) imports {target}, a higher layer")
    return problems


def test_every_folder_is_a_layer_and_imports_go_only_downward():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(LAYERS), f"folders that are no layer: {folders - set(LAYERS)}"
    assert upward_imports(PACKAGE) == []


def test_the_environment_imports_nothing_above_the_standard_helpers():
    webshop = [(m, t) for m, t, _ in imported_layers(PACKAGE) if m.startswith("webshop")]
    assert webshop and {t for _, t in webshop} <= {"webshop", "utils"}


@pytest.mark.parametrize("source, expected", [
    ("from ..lit.cli import main\n", "imports lit, a higher layer"),       # relative, upward
    ("import apo_lightning.eval.metrics\n", "imports eval, a higher layer"),  # absolute, upward
    ("from apo_lightning.agent import x\n", "imports 'agent'"),            # a folder that is no layer
])
def test_an_upward_import_is_caught(tmp_path, source, expected):
    (tmp_path / "rollout").mkdir()
    (tmp_path / "rollout" / "engine.py").write_text("from ..webshop import WebShop\n" + source)
    (problem,) = upward_imports(tmp_path)
    assert expected in problem and problem.startswith("rollout/engine.py:2")
