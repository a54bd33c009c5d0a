"""Training and evaluation batches made on demand, as Lightning iterates: the one-way data path.

Lightning pre-fetches one batch from a loader whose length it does not know (to detect the last one), so a stream
of fresh rollouts without a length would be sampled by the parameters of the step before. These iterables have a
length, so Lightning asks for batch ``k`` only when step ``k`` starts: the rollout of batch ``k`` sees the
parameters after ``k`` updates. :class:`StepStream` is also *resumable* in Lightning's sense (``state_dict`` /
``load_state_dict``): its cursor, the number of batches made so far, is saved in every checkpoint, and batch ``k``
is a pure function of ``k`` (and the run seed), so a run resumed from any checkpoint makes the same batches.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence


class StepStream:
    """``steps_per_epoch`` batches per epoch, batch ``k`` made by ``make_batch(k)`` when Lightning asks for it.

    Args:
        steps_per_epoch: batches per epoch (the length Lightning sees).
        make_batch: batch number (0, 1, … across epochs) -> batch.

    Raises:
        ValueError: ``steps_per_epoch`` < 1.
    """

    def __init__(self, steps_per_epoch: int, make_batch: Callable[[int], Any]):
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be >= 1, got {steps_per_epoch}")
        self.steps_per_epoch = steps_per_epoch
        self.make_batch = make_batch
        self.cursor = 0  # batches made so far (checkpointed)

    def __len__(self) -> int:
        return self.steps_per_epoch

    def __iter__(self) -> Iterator[Any]:
        # An epoch runs to its end from wherever the cursor is (a resumed run starts mid-epoch). The cursor moves
        # before the batch is handed over, so a checkpoint taken during step k records k + 1 batches made.
        for _ in range(self.steps_per_epoch - self.cursor % self.steps_per_epoch):
            batch = self.make_batch(self.cursor)
            self.cursor += 1
            yield batch

    def state_dict(self) -> dict:
        return {"cursor": self.cursor}

    def load_state_dict(self, state_dict: dict) -> None:
        self.cursor = int(state_dict["cursor"])


class ChunkStream:
    """Evaluation batches: ``items`` in chunks of ``chunk``, each turned into a batch by ``make_batch(chunk)`` when
    Lightning asks for it.

    Args:
        items: what to evaluate (goal indices).
        chunk: items per batch (> 0).
        make_batch: list of items -> batch.
    """

    def __init__(self, items: Sequence[Any], chunk: int, make_batch: Callable[[list], Any]):
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.items, self.chunk, self.make_batch = list(items), chunk, make_batch

    def __len__(self) -> int:
        return (len(self.items) + self.chunk - 1) // self.chunk

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self.items), self.chunk):
            yield self.make_batch(self.items[start:start + self.chunk])
