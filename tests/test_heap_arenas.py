"""The agent's malloc settings (exporter/heap.py): capped arenas, a fixed mmap threshold.

Each arena keeps free space of its own; with one per thread (a worker per GPU,
the sampler, the event loop) the agent's resident size moved by a few MiB under
churn although nothing leaked, and large blocks taken from the arenas once glibc
had raised its mmap threshold left holes there. Counted from glibc's own reports
(malloc_info, mallinfo2) in fresh interpreters.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ray_accel.exporter.heap import (
    AGENT_MALLOC_ARENAS,
    fix_mmap_threshold,
    limit_malloc_arenas,
)

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


_MAPPED_AFTER_A_FREE = """
import ctypes, sys
from ray_accel.exporter.heap import fix_mmap_threshold
if sys.argv[1] == "limited":
    assert fix_mmap_threshold()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
fields = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                          "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = type("MallInfo2", (ctypes.Structure,), {"_fields_": fields})
libc.free(libc.malloc(300_000))  # glibc raises its threshold past this size unless fixed
block = libc.malloc(300_000)
print(libc.mallinfo2().hblks)  # mapped blocks held now
"""


def _python(code: str, mode: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")}
    return subprocess.run([sys.executable, "-c", code, mode], env=env, capture_output=True,
                          text=True, check=True).stdout


def _arenas(mode: str) -> int:
    return len(re.findall(r'<heap nr="\d+">', _python(_COUNT_ARENAS, mode)))


def test_threads_share_the_capped_arenas_where_they_would_each_get_one():
    assert _arenas("default") > AGENT_MALLOC_ARENAS  # what the cap is for
    assert 1 <= _arenas("limited") <= AGENT_MALLOC_ARENAS


def test_large_blocks_stay_mapped_after_one_was_freed():
    before = int(_python(_MAPPED_AFTER_A_FREE, "default"))
    assert int(_python(_MAPPED_AFTER_A_FREE, "limited")) == before + 1  # the block held


def test_an_operators_malloc_settings_stand(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert limit_malloc_arenas() is False
    assert fix_mmap_threshold() is False
