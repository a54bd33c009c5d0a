"""Handing the C heap's free memory back to the operating system (glibc's ``malloc_trim`` and ``mallopt``).

PyTorch's CPU tensors live on the C heap. When a tensor is freed, glibc keeps its pages for reuse unless they sit at
the top of the heap, so a process stays as large as its largest phase: after a rollout's KV caches or a training
step's activations are freed, their pages remain resident while the next phase allocates other shapes elsewhere.
Two training processes on one machine can then run out of memory with most of it free inside them.
:func:`release_free_memory` returns those pages (``malloc_trim(0)``); the rollout engine calls it after every batch
of episodes and the RL module after every training step. docs/experiments.md ("A\\*-PO from the SFT adapter: stage
2, five updates in the budget") measures it.

That returns memory between phases, not within one. Inside a training step glibc's *dynamic* mmap threshold does
the damage: a large block (``M_MMAP_THRESHOLD``, 128 KiB at start) gets its own pages and goes back to the OS when
freed, but each such free raises the threshold to the block's size (up to 32 MiB), so from then on activations of
that size are cut from the heap, and the saved tensors between them keep the freed space from being returned or
merged. :func:`map_large_allocations` fixes the threshold, which turns the dynamic rule off (glibc ``mallopt(3)``):
every large block is mapped and unmapped on its own, which costs page faults on each new block and so time, for a
peak close to the live tensors. Rollouts pay the same page faults for their per-token blocks without needing the
memory, so ``lit.callbacks.LowCPUMemory`` (the CLI's ``--low_cpu_memory``) maps large blocks during training steps
only (measured in docs/experiments.md).
"""

from __future__ import annotations

import ctypes
import functools
import sys


#: glibc's ``mallopt`` parameter number of the mmap threshold (``malloc.h``).
_M_MMAP_THRESHOLD = -3
#: glibc's default initial mmap threshold, 128 KiB: blocks this large or larger get their own mapping.
DEFAULT_MMAP_THRESHOLD = 128 * 1024
#: The largest threshold glibc takes on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``), where its dynamic rule stops.
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024


@functools.cache
def _glibc(function: str):
    """A glibc function (``malloc_trim``, ``mallopt``), or None where the C library is not glibc (macOS, Windows,
    musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL("libc.so.6"), function)
    except (OSError, AttributeError):
        return None


def release_free_memory() -> bool:
    """Return the free pages of every C-heap arena to the operating system (``malloc_trim(0)``).

    Live tensors are untouched.

    Returns:
        True when glibc released memory, False when there was none to release or the C library is not glibc.
    """
    trim = _glibc("malloc_trim")
    return bool(trim(0)) if trim is not None else False


def map_large_allocations(threshold: int = DEFAULT_MMAP_THRESHOLD) -> bool:
    """From now on, give every C-heap block of ``threshold`` bytes or more its own mapping, returned to the operating
    system as soon as it is freed (glibc ``mallopt(M_MMAP_THRESHOLD, threshold)``, which also turns off the dynamic
    threshold; the module docstring says why that matters). Process-wide; blocks allocated before keep their place.

    Args:
        threshold: bytes, at most 32 MiB on 64-bit glibc (``HEAP_MAX``/2); glibc's own starting value by default.

    Returns:
        True when glibc took the setting, False where the C library is not glibc.

    Raises:
        ValueError: ``threshold`` is not between 0 and 32 MiB.
    """
    if not 0 <= threshold <= MAX_MMAP_THRESHOLD:
        raise ValueError(f"threshold must lie between 0 and 32 MiB (33554432 bytes), got {threshold}")
    mallopt = _glibc("mallopt")
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) if mallopt is not None else False
