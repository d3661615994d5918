"""Keep glibc from returning freed memory to the OS between forward passes.

A CPU forward allocates and frees tensors of tens of MB. With glibc's default, dynamic
``M_MMAP_THRESHOLD`` / ``M_TRIM_THRESHOLD`` such blocks are ``mmap``-ed and given back on every
free, so each call pays the kernel's page faults (zero-filling) again: on a 2-core machine that
more than doubled the time of a T = 8192 chunk prefill (docs/benchmarks.md). Raising both
thresholds keeps the memory in the heap for reuse — the same effect as starting Python with
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def tune_glibc_malloc(threshold_bytes: int = 1 << 30) -> bool:
    """Raise glibc's mmap and trim thresholds; returns False where there is no glibc ``mallopt``."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mmap threshold is capped by glibc at HEAP_MAX (32 MiB on 64-bit); larger values are refused
    ok_mmap = mallopt(M_MMAP_THRESHOLD, min(threshold_bytes, 32 << 20)) == 1
    ok_trim = mallopt(M_TRIM_THRESHOLD, threshold_bytes) == 1
    return ok_mmap and ok_trim
