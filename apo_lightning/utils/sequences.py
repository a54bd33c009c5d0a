"""A read-only sequence whose items are built on access, for tables too large to hold as Python objects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class RowSequence(Sequence):
    """A sequence of ``len(self)`` rows whose row ``i`` is ``self._item(i)``, built when it is read.

    Subclasses define ``__len__`` and ``_item(i)`` for ``0 <= i < len(self)``; indexing adds the rest of a list's
    behaviour: a negative index counts from the end, a slice gives a list, and an index out of range raises
    ``IndexError`` naming ``item_name``.
    """

    item_name = "row"

    def _item(self, i: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"{self.item_name} index {i} out of range [0, {len(self)})")
        return self._item(i)
