"""Repository hygiene: the README's install and test commands are what CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_code_blocks():
    text = (ROOT / "README.md").read_text()
    return [block.split("\n", 1)[1].strip() for block in text.split("```")[1::2]]


def test_ci_runs_the_readme_install_and_test_commands():
    blocks = readme_code_blocks()
    install_and_main, tests = blocks[0].splitlines(), blocks[1].splitlines()
    ci = (ROOT / ".ci" / "run").read_text()
    assert install_and_main[0].startswith("pip install torch==2.13.0")
    assert install_and_main[0] in ci
    assert tests[0] in ci
    assert "set -euo pipefail" in ci
