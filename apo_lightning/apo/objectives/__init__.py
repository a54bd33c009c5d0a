"""Training objectives, one file each, all subclasses of ``base.Objective`` whose fields are their settings: A*-PO
(``APO``), GRPO (``GRPO``), the seed projects' KL-anchored policy gradient (``KLPG``) and advantage-weighted SFT
(``AWR``). A config names one by its class (``class_path: apo_lightning.apo.objectives.GRPO``, or ``GRPO`` on the
command line, which finds every subclass imported here)."""

from __future__ import annotations

from .apo import APO
from .awr import AWR
from .base import Objective, PackedBatch, kl_statistics
from .grpo import GRPO
from .kl_pg import KLPG

__all__ = ["APO", "AWR", "GRPO", "KLPG", "Objective", "PackedBatch", "kl_statistics"]
