"""The package's layers: each folder one layer, imports only downward, and no ring of modules that import one
another, inside a folder or across (parsed from the source, not imported)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "apo_lightning"
#: Bottom to top: a module may import its own layer and the layers before it, nothing after.
LAYERS = ("utils", "webshop", "models", "rollout", "baselines", "apo", "eval", "lit", "integrations")


def imports(root: Path, package: str = "apo_lightning") -> list[tuple[str, tuple[str, ...], int]]:
    """``(importing file, imported module, line)`` for every import of ``package`` in the ``.py`` files under
    ``root``, at module level or inside a function alike. The imported module is a path of names below ``package``,
    e.g. ``("eval", "schema")``; relative imports are resolved against the importing file's position, and
    ``from x import y`` names the submodule ``x.y`` when ``y`` is one."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts  # e.g. ("lit", "rl_data")
        module = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:  # from ..x import y: climb from the file's folder
                    base = list(parts[:-1])[: len(parts) - node.level]
                    target = base + (node.module.split(".") if node.module else [])
                elif node.module and node.module.split(".")[0] == package:
                    target = node.module.split(".")[1:]
                else:
                    continue
                submodules = [tuple(target + [a.name]) for a in node.names if _module_file(root, (*target, a.name))]
                for name in submodules or ([tuple(target)] if target else [(a.name,) for a in node.names]):
                    found.append((module, name, node.lineno))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names = alias.name.split(".")
                    if names[0] == package and len(names) > 1:
                        found.append((module, tuple(names[1:]), node.lineno))
    return found


def _module_file(root: Path, names: tuple[str, ...]) -> str | None:
    """The file (relative to ``root``) of the module ``names``: ``x/y.py`` or the package's ``x/y/__init__.py``."""
    for candidate in (Path(*names).with_suffix(".py"), Path(*names, "__init__.py")):
        if names and (root / candidate).is_file():
            return str(candidate)
    return None


def imported_layers(root: Path, package: str = "apo_lightning") -> list[tuple[str, str, int]]:
    """``(module path, imported layer, line)`` for every import of ``package`` under ``root`` (see :func:`imports`)."""
    return [(module, target[0], line) for module, target, line in imports(root, package)]


def import_cycles(root: Path) -> list[str]:
    """Every set of modules under ``root`` that import one another in a ring (a cycle), with the imports that close
    it, e.g. ``"eval/html_report.py:36 -> eval/report.py; eval/report.py:441 -> eval/html_report.py"``. An import
    inside a function counts as much as one at module level: it only delays the cycle."""
    edges: dict[str, dict[str, int]] = {}
    for module, target, line in imports(root):
        target_file = _module_file(root, target)
        if target_file is not None:
            edges.setdefault(module, {}).setdefault(target_file, line)

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), {}):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reach = {module: reachable(module) for module in edges}
    cycles = []
    for module in sorted(reach):
        ring = sorted(m for m in reach[module] if module in reach.get(m, ()))  # includes module itself if in a ring
        if ring and ring[0] == module:  # report each ring once, from its first member
            cycles.append("; ".join(f"{a}:{edges[a][b]} -> {b}" for a in ring for b in sorted(edges[a]) if b in ring))
    return cycles


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


def test_no_module_imports_itself_through_others():
    assert import_cycles(PACKAGE) == []


@pytest.mark.parametrize("files, expected", [
    ({"eval/report.py": "from .html_report import write_html_report\n",  # a ring hidden in a function
      "eval/html_report.py": "def f():\n    from .report import CLASS_TEXT\n"},
     ["eval/html_report.py:2 -> eval/report.py; eval/report.py:1 -> eval/html_report.py"]),
    ({"models/loading.py": "from . import gguf\n",  # `from . import module`, absolute on the way back
      "models/gguf.py": "import apo_lightning.models.loading\n"},
     ["models/gguf.py:1 -> models/loading.py; models/loading.py:1 -> models/gguf.py"]),
    ({"eval/a.py": "from .b import x\n", "eval/b.py": "from .c import y\n",  # three modules in a ring
      "eval/c.py": "from apo_lightning.eval.a import z\n"},
     ["eval/a.py:1 -> eval/b.py; eval/b.py:1 -> eval/c.py; eval/c.py:1 -> eval/a.py"]),
    ({"eval/report.py": "from .schema import x\n", "eval/html_report.py": "from .schema import x\n",
      "eval/schema.py": "import json\n"}, []),  # both import a third module: no ring
])
def test_an_import_cycle_is_caught(tmp_path, files, expected):
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(source)
    assert import_cycles(tmp_path) == expected
