"""Repository hygiene: CI runs the README's install and test commands, and the README stays a short product page."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_section_code(heading: str) -> list[str]:
    """The lines of the first code block under the README's ``## heading``."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    return [line for line in block.split("\n", 1)[1].splitlines() if line.strip()]


def test_ci_runs_the_readme_install_and_test_commands_in_order():
    install, tests = readme_section_code("Install"), readme_section_code("Tests")
    assert install[0] == "pip install torch==2.13.0"  # torch first: no CUDA build pulled by a dependency
    ci = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci
    commands = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    positions = [commands.index(line) for line in install + tests]  # each README line is a CI line, as printed
    assert positions == sorted(positions)


def test_readme_is_a_short_page_without_run_histories():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert not re.search(r"[a-z](st|nd|rd|th) session|issue \d", text, re.IGNORECASE)
    assert "&&" not in text  # commands as lines a person types


def test_readme_links_resolve():
    """Every relative link of the README names a file in the repository, and every ``#anchor`` into
    docs/experiments.md a heading there (GitHub's anchor rule: lower case, punctuation dropped, spaces to ``-``)."""
    text = (ROOT / "README.md").read_text()
    headings = {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in (ROOT / "docs" / "experiments.md").read_text().splitlines() if line.startswith("#")}
    for target in re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", text):
        path, anchor = target
        if path.startswith("http"):
            continue
        assert (ROOT / path).exists(), path
        if anchor:
            assert anchor in headings, anchor
