"""pgfeed.allocator: a process that frees a page's memory gets it back for the next page, not
new memory from the kernel (each fresh page costs a fault and a zeroed page)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.checkout import PYTHONPATH

ROOT = Path(__file__).resolve().parents[2]

# pages of four 8 MiB blocks, built and freed 20 times after one warm-up page: the minor page
# faults the 20 cost (mallopt is process-wide, so each setting gets a process of its own)
_PAGES = """
import resource, sys
from pgfeed.allocator import keep_freed_memory
if sys.argv[1] == "on":
    assert keep_freed_memory()
def page():
    blocks = [bytearray(8 << 20) for _ in range(4)]
    del blocks
page()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    page()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(setting: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PAGES, setting], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    return int(out.stdout)


def test_freed_pages_are_reused_instead_of_faulted_in_anew() -> None:
    default, kept = _faults("off"), _faults("on")  # "on" asserts keep_freed_memory() is True
    assert default > 20 * 1000  # the default gives the blocks back: each page faults anew
    assert kept < default / 20
