"""``trainer.precision``: the setting's type (the Trainer's own, plus ``auto``), what ``auto`` resolves to on this
machine, and the warning for a bfloat16 precision on a CPU that would emulate it.

``auto`` is resolved by ``cli.py`` before the Trainer is built and printed as one line; the run's ``config.yaml``
records the resolved value, so that ``--config`` of it repeats the precision the run had on any machine.
"""

from __future__ import annotations

from typing import Literal, get_type_hints

import torch
from lightning.pytorch import Trainer

#: what ``trainer.precision`` accepts here: the Trainer's own type (so ``32`` stays an int) and ``auto``
#: (:func:`auto_precision`)
PRECISION_SETTING = get_type_hints(Trainer.__init__)["precision"] | Literal["auto"]


def native_bf16_on_cpu() -> bool:
    """Whether this CPU has bfloat16 instructions (AVX512-BF16 or AMX), as torch's CPU kernels detect them."""
    # torch's own detection, through private helpers of torch.cpu (2.13): its public
    # torch.backends.cpu.get_cpu_capability() names the vector width, not bfloat16; a helper that is absent: no
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def auto_precision(accelerator) -> tuple[str, str]:
    """The precision ``trainer.precision: auto`` stands for on ``accelerator``, and why (for the line printed).

    A GPU trains in ``bf16-mixed``; a CPU too when it has bfloat16 instructions (:func:`native_bf16_on_cpu`), and
    in ``32-true`` otherwise, since torch would emulate bfloat16 there (:func:`bf16_on_cpu_warning`).

    Args:
        accelerator: ``trainer.accelerator``: ``"cpu"``, ``"gpu"`` or ``"cuda"``, or ``"auto"`` (None too), which
            is CUDA where ``torch.cuda.is_available()`` and the CPU elsewhere, as Lightning chooses.

    Raises:
        ValueError: any other accelerator (``mps``, ``tpu``, an accelerator class): its precision must be given.
    """
    if accelerator in (None, "auto"):
        accelerator = "cuda" if torch.cuda.is_available() else "cpu"
    if accelerator in ("gpu", "cuda"):
        return "bf16-mixed", "GPU"
    if accelerator == "cpu":
        if native_bf16_on_cpu():
            return "bf16-mixed", "CPU with AMX/AVX512-BF16"
        return "32-true", "CPU without AMX/AVX512-BF16: bfloat16 would be emulated"
    raise ValueError(f"trainer.precision auto resolves for the accelerators cpu, gpu, cuda and auto, not "
                     f"{accelerator!r}: give trainer.precision itself (32-true, bf16-mixed, ...)")


def bf16_on_cpu_warning(precision: str, on_cpu: bool) -> str | None:
    """The warning for a bfloat16 ``trainer.precision`` that will run on a CPU without bfloat16 instructions, or
    None (float32, a GPU, or a CPU that has them).

    Without them torch emulates bfloat16, and ``bf16-mixed`` trains several times slower than float32; with them it
    trains faster (measured with ``benchmarks/training_throughput.py``: docs/experiments.md, the sections "bfloat16
    autocast on the CPU" and "one SFT pass as stage 0, then A*-PO, inside two hours").

    Args:
        precision: the Trainer's precision (``"bf16-mixed"``, ``"32-true"``, ...).
        on_cpu: whether the Trainer's accelerator is the CPU.
    """
    if "bf16" not in precision or not on_cpu or native_bf16_on_cpu():
        return None
    return (f"trainer.precision={precision} on a CPU without bfloat16 instructions (no AVX512-BF16 or AMX): torch "
            "emulates bfloat16 here, about 5x slower than float32 (benchmarks/training_throughput.py); use "
            "--trainer.precision=32-true")
