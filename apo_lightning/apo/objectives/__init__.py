"""Training objectives, one file each, all behind one interface (``base.Objective``): A*-PO (``apo``), GRPO
(``grpo``), the seed projects' KL-anchored policy gradient (``kl_pg``) and advantage-weighted SFT (``awr``).
``OBJECTIVES[name]`` is what the Lightning layer asks."""

from __future__ import annotations

from typing import Literal

from . import apo, awr, grpo, kl_pg
from .base import Objective, PackedBatch, kl_statistics

#: The ``algorithm`` names a config may use.
Algorithm = Literal["apo", "grpo", "kl_pg", "awr"]
OBJECTIVES: dict[str, Objective] = {o.name: o for o in (apo.OBJECTIVE, grpo.OBJECTIVE, kl_pg.OBJECTIVE,
                                                         awr.OBJECTIVE)}

__all__ = ["Algorithm", "OBJECTIVES", "Objective", "PackedBatch", "kl_statistics"]
