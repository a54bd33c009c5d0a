"""Freed C-heap memory goes back to the operating system (``utils.memory.release_free_memory``)."""

import os
import sys

import pytest
import torch

from apo_lightning.utils.memory import release_free_memory


def resident_bytes() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc are Linux's")
def test_freed_tensors_leave_the_process_once_released():
    """512 MB of 64 KB tensors (heap, not mmap), freed under one live tensor that pins the top of the heap: glibc
    keeps their pages resident until ``release_free_memory`` hands them back."""
    tensors = [torch.ones(16384) for _ in range(8000)]
    pin = torch.ones(16384)
    allocated = resident_bytes()
    del tensors
    freed = resident_bytes()
    assert allocated - freed < 100e6  # glibc kept the pages
    assert release_free_memory()
    assert freed - resident_bytes() > 400e6
    assert pin.sum() == 16384
