"""Training objectives, one file each, all behind one interface (``base.Objective``): A*-PO (``apo``) and GRPO
(``grpo``). ``OBJECTIVES[name]`` is what the Lightning layer asks."""

from __future__ import annotations

from typing import Literal

from . import apo, grpo
from .base import Objective, PackedBatch, kl_statistics

#: The ``algorithm`` names a config may use.
Algorithm = Literal["apo", "grpo"]
OBJECTIVES: dict[str, Objective] = {o.name: o for o in (apo.OBJECTIVE, grpo.OBJECTIVE)}

__all__ = ["Algorithm", "OBJECTIVES", "Objective", "PackedBatch", "kl_statistics"]
