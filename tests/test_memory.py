"""Freed C-heap memory goes back to the operating system (``utils.memory.release_free_memory`` and
``map_large_allocations``)."""

import os
import subprocess
import sys

import pytest
import torch

from apo_lightning.lit import callbacks
from apo_lightning.utils.memory import (DEFAULT_MMAP_THRESHOLD, MAX_MMAP_THRESHOLD, map_large_allocations,
                                        release_free_memory)


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


#: Run in a fresh process (the setting is process-wide): one 8 MiB block freed, which raises glibc's dynamic mmap
#: threshold to 8 MiB; then 100 blocks of 4 MiB, each followed by a small live tensor, as a training step leaves
#: saved activations between its temporaries; then the 4 MiB blocks are freed. Prints the MB that left the process.
FRAGMENTED_STEP = """
import os, sys, torch
from apo_lightning.utils.memory import map_large_allocations
if sys.argv[1] == "mapped":
    assert map_large_allocations()
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
big = torch.ones(2 << 20)
del big
blocks, saved = [], []
for _ in range(100):
    blocks.append(torch.ones(1 << 20))
    saved.append(torch.ones(4096))
before = resident()
del blocks
print((before - resident()) / 1e6)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc are Linux's")
def test_large_blocks_freed_between_live_tensors_leave_the_process_once_mapped():
    def freed_mb(mode: str) -> float:
        done = subprocess.run([sys.executable, "-c", FRAGMENTED_STEP, mode], capture_output=True, text=True, check=True)
        return float(done.stdout.split()[-1])

    assert freed_mb("default") < 100  # glibc's heap kept the 400 MB
    assert freed_mb("mapped") > 350


def test_low_cpu_memory_maps_large_blocks_during_training_steps_only(monkeypatch):
    thresholds = []
    monkeypatch.setattr(callbacks, "map_large_allocations", thresholds.append)
    callback = callbacks.LowCPUMemory()
    callback.on_train_batch_start(None, None, {}, 0)
    assert thresholds == [DEFAULT_MMAP_THRESHOLD]
    callback.on_train_batch_end(None, None, None, {}, 0)
    assert thresholds == [DEFAULT_MMAP_THRESHOLD, MAX_MMAP_THRESHOLD]


def test_map_large_allocations_refuses_a_threshold_glibc_would_not_take():
    with pytest.raises(ValueError, match="threshold must lie between 0 and 32 MiB"):
        map_large_allocations(64 << 20)
