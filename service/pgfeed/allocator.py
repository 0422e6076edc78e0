"""The serving process's allocator: keep the memory a page frees for the next page.

A bulk read's page is tens of megabytes, built in a few blocks that are freed once the answer
is sent. By default glibc gives blocks that large back to the kernel (each its own mapping, or
trimmed off the heap's top), so every page's memory is new to the process, and the kernel
zeroes each of its pages on first touch: a cost as large as a copy of the page, paid again for
each page. With the thresholds raised, freed blocks stay in the heap and are reused.
"""

from __future__ import annotations

import ctypes
import platform

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # blocks below this come from the heap: glibc's largest allowed
TRIM_THRESHOLD = 256 << 20  # free memory kept at the heap's top before it is given back


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where the C library is
    not glibc (nothing changes there)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
