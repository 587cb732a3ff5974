"""Keep freed memory in the process for reuse, instead of handing it back to the OS.

NumPy takes every array, temporaries included, from the C library's ``malloc``.
By default glibc serves large blocks with ``mmap`` and trims the top of its heap
whenever a large block is freed. A training step allocates and frees the same
arrays in the same pattern every step, so each step gets its memory back as fresh
pages that the kernel faults in and zeroes again: about 13,700 page faults per
cpu-recipe step, a quarter of the step's time on the machine this was measured on
(cpu-recipe 44 -> 33 ms, small 117 -> 90 ms, medium 905 -> 847 ms, OpenBLAS env as
set; ``benchmarks/bench_train_step.py``).

:func:`keep_freed_memory` sets two ``mallopt`` parameters: blocks up to 32 MiB
(glibc's ceiling for this setting) come from the heap, and the heap is never
trimmed. Freed blocks are then reused by the next step. The peak resident memory
does not grow (cpu-recipe 97 MiB either way); the process simply keeps its peak
until it exits. The setting is process-wide, so it is applied by entry points
that own the process (the ``resgrad`` command, the benchmarks), never on import.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>: free() trims the heap top above this size
_M_MMAP_THRESHOLD = -3  # blocks at least this large are served by mmap
_MMAP_THRESHOLD_MAX = 32 * 2**20  # the largest value glibc accepts on 64-bit systems
_NEVER = 2**31 - 1  # the largest int: a heap top this large is never left free


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed blocks for reuse (see the module docstring).

    Returns
    -------
    bool
        True if both settings were applied; False off glibc (macOS, Windows, musl),
        where this does nothing.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
    return mallopt(_M_TRIM_THRESHOLD, _NEVER) == 1 and ok
