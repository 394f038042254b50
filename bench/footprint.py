"""Resident memory of this process."""

from __future__ import annotations

import os


def rss_mib() -> float:
    """Resident set size of this process, in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
