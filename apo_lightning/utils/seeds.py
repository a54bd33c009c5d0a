"""Seeds derived from a run seed: every rank and every purpose gets its own, stable across processes and runs."""

from __future__ import annotations

import hashlib
from typing import Any


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any parts, e.g. ``derive_seed(run_seed, "rollout", rank, batch_number)``.

    The same parts give the same seed in every process and run (sha256 of their ``repr``); any change in any part
    gives an unrelated seed. Name the purpose in the parts, so two uses of one run seed never share a stream.
    """
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
