"""A training run's TensorBoard scalars, read back: one reader for the benchmarks and the evidence scripts.

A run's log folder is ``lightning_logs/NAME`` with one ``version_*`` per ``fit`` (a resumed run adds one); rank 0
writes the event files. :func:`read_scalars` reads every event file under a folder, so it takes a run folder or one
version; :func:`sixths` is the rule the run tables of ``docs/experiments.md`` and ``benchmarks/learning_speed.py``
use to say where a per-step scalar started and ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence, TypeVar

T = TypeVar("T")


def read_scalars(log_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of every TensorBoard event file under ``log_dir`` (searched recursively).

    Returns:
        tag → ``(step, value)`` pairs sorted by step (stable: values logged at the same step keep the order of the
        event files' paths, so ``version_0`` before ``version_1``, and of the events in each); empty when no event
        file is found.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(Path(log_dir).rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            series.setdefault(tag, []).extend((event.step, event.value) for event in accumulator.Scalars(tag))
    return {tag: sorted(pairs, key=lambda pair: pair[0]) for tag, pairs in series.items()}


def sixths(values: Sequence[T]) -> tuple[list[T], list[T]]:
    """The first and the last sixth of ``values``: ``len(values) // 6`` items each, at least one.

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("sixths of an empty series")
    k = max(1, len(values) // 6)
    return list(values[:k]), list(values[-k:])
