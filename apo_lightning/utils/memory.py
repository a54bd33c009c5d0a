"""Handing the C heap's free memory back to the operating system (glibc's ``malloc_trim``).

PyTorch's CPU tensors live on the C heap. When a tensor is freed, glibc keeps its pages for reuse unless they sit at
the top of the heap, so a process stays as large as its largest phase: after a rollout's KV caches or a training
step's activations are freed, their pages remain resident while the next phase allocates other shapes elsewhere.
Two training processes on one machine can then run out of memory with most of it free inside them.
:func:`release_free_memory` returns those pages (``malloc_trim(0)``); the rollout engine calls it after every batch
of episodes and the RL module after every training step. docs/experiments.md ("A\\*-PO from the SFT adapter")
measures it.
"""

from __future__ import annotations

import ctypes
import functools
import sys


@functools.cache
def _glibc_malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library is not glibc (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_free_memory() -> bool:
    """Return the free pages of every C-heap arena to the operating system (``malloc_trim(0)``).

    Live tensors are untouched.

    Returns:
        True when glibc released memory, False when there was none to release or the C library is not glibc.
    """
    trim = _glibc_malloc_trim()
    return bool(trim(0)) if trim is not None else False
