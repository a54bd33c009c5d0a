"""Per-goal outcomes of a results directory, small enough to commit, for paired comparisons in later sessions.

``data/`` and ``results/`` do not survive a new working copy, so a later session cannot pair a new run with an old
one unless the old run's per-goal outcomes are in the repository. This keeps, from each record of a results
directory's ``episodes.jsonl``, only what ``python -m apo_lightning.eval compare`` reads (method, split, goal index,
success, score), about 90 bytes a goal; ``compare`` accepts the written file in place of a results directory.
(``evaluate --save-outcomes`` writes another file, a reference card's replay record with its settings, which
``compare`` does not read and ``cli.py test`` does not write.)

Usage, from the repository root:
    python docs/evidence/outcomes.py results/<run> docs/evidence/outcomes/<run>.jsonl
    python -m apo_lightning.eval compare docs/evidence/outcomes/<old run>.jsonl results/<new run>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from apo_lightning.eval.report import EPISODES_FILE

KEPT_FIELDS = ("method", "split", "goal_index", "success", "score")


def main(results_dir: str, out_file: str) -> None:
    """Write the kept fields of every record of ``results_dir/episodes.jsonl`` to ``out_file``, one JSON a line.

    Raises:
        FileNotFoundError: ``results_dir`` holds no ``episodes.jsonl``.
    """
    source = Path(results_dir) / EPISODES_FILE
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist: give a results directory written by `cli.py test` or "
                                "`python -m apo_lightning.eval evaluate --results-dir`")
    lines = []
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            lines.append(json.dumps({key: record[key] for key in KEPT_FIELDS}))
    Path(out_file).parent.mkdir(parents=True, exist_ok=True)
    Path(out_file).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{out_file}: {len(lines)} goals from {source}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
