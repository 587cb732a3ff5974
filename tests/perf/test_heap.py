"""resgrad.perf.heap: freed blocks are reused by the next allocation, with no new page faults."""

import subprocess
import sys

import pytest

from resgrad.perf.heap import keep_freed_memory

# allocate, touch and free an 8 MiB array 20 times; print the page faults that cost
PROBE = """
import resource, sys
import numpy as np
from resgrad.perf.heap import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
np.ones(2**21, dtype=np.float32)  # the first one may fault: the heap grows once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.ones(2**21, dtype=np.float32)  # 8 MiB, every page written
    del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_freed_blocks_are_reused_without_page_faults():
    default, kept = _faults("default"), _faults("keep")
    # by default each 8 MiB array is mmapped afresh and faulted in again (in 2 MiB
    # pages where transparent huge pages are on: ~500 faults here, ~41,000 without)
    assert default >= 20 * 4, default
    assert kept < 10, kept  # kept: the same heap pages every time


def test_is_a_harmless_bool_everywhere():
    assert keep_freed_memory() in (True, False)
    assert keep_freed_memory() in (True, False)  # calling twice is fine
