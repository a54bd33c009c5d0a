"""Per-goal outcomes of a results directory, small enough to commit, so that a later run can be paired with it.

``data/`` and ``results/`` do not survive a new working copy, so a new run cannot be paired with an old one unless
the old run's per-goal outcomes are in the repository. This keeps, from each record of a results
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

from apo_lightning.eval.compare import load_episodes
from apo_lightning.utils.files import atomic_write_text

KEPT_FIELDS = ("method", "split", "goal_index", "success", "score")


def main(results_dir: str, out_file: str) -> None:
    """Write the kept fields of every record of ``results_dir/episodes.jsonl`` to ``out_file``, one JSON a line.

    Raises:
        FileNotFoundError, ValueError: as ``compare``'s ``load_episodes`` (no ``episodes.jsonl``; a goal twice).
    """
    name, episodes = load_episodes(results_dir)
    lines = [json.dumps({key: record[key] for key in KEPT_FIELDS}) for record in episodes.values()]
    atomic_write_text(out_file, "\n".join(lines) + "\n")
    print(f"{out_file}: {len(lines)} goals of {name} from {results_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
