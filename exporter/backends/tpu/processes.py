"""Which processes hold a TPU chip: those with its device file open (``/proc/<pid>/fd``).

libtpu opens a chip's ``/dev/accel<N>`` or ``/dev/vfio/<group>`` for as long as
the process uses it (this is how ``tpu-info`` names a chip's owner), and nothing
else tells which process drives which chip. The agent sees the processes of
other users only when it may read their ``/proc/<pid>/fd`` (root, or
CAP_SYS_PTRACE); others are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

PROC_DIR = "/proc"


def holders(paths: Iterable[str], proc_dir: str = PROC_DIR) -> dict[str, tuple[int, ...]]:
    """Device file -> sorted pids with it open, for each of `paths` (all present as keys)."""
    wanted = {os.path.realpath(p): p for p in paths}
    found: dict[str, set[int]] = {p: set() for p in wanted.values()}
    try:
        entries = os.listdir(proc_dir)
    except OSError:
        return {p: () for p in found}
    for entry in entries:
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc_dir, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            path = wanted.get(target)
            if path is not None:
                found[path].add(int(entry))
    return {p: tuple(sorted(pids)) for p, pids in found.items()}


def pids_of(found: Mapping[str, tuple[int, ...]], path: str) -> tuple[int, ...]:
    """The pids holding `path` in a `holders` result."""
    return found.get(path, ())
