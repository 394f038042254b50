"""The agent caps glibc's malloc arenas before its threads start (exporter/heap.py).

Each arena keeps free space of its own; with one per thread (a worker per GPU,
the sampler, the event loop) the agent's resident size moved by a few MiB under
churn although nothing leaked. Counted from glibc's own report (malloc_info) in
a fresh interpreter whose threads all allocate.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ray_accel.exporter.heap import AGENT_MALLOC_ARENAS, limit_malloc_arenas

THREADS = 8
_COUNT_ARENAS = f"""
import ctypes, sys, tempfile, threading
from ray_accel.exporter.heap import limit_malloc_arenas
if sys.argv[1] == "limited":
    assert limit_malloc_arenas()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
ready = threading.Barrier({THREADS})

def allocate():
    ready.wait()  # all alive at once, none can inherit a finished thread's arena
    for _ in range(200):
        libc.free(libc.malloc(4096))
    ready.wait()

threads = [threading.Thread(target=allocate) for _ in range({THREADS})]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
with tempfile.NamedTemporaryFile(suffix=".xml") as report:
    stream = libc.fopen(report.name.encode(), b"w")
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    print(open(report.name).read())
"""


def _arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    report = subprocess.run([sys.executable, "-c", _COUNT_ARENAS, mode], env=env,
                            capture_output=True, text=True, check=True).stdout
    return len(re.findall(r'<heap nr="\d+">', report))


def test_threads_share_the_capped_arenas_where_they_would_each_get_one():
    assert _arenas("default") > AGENT_MALLOC_ARENAS  # what the cap is for
    assert 1 <= _arenas("limited") <= AGENT_MALLOC_ARENAS


def test_an_operators_malloc_arena_max_stands(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False
