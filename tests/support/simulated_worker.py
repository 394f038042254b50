"""A separate process that makes itself a user of simulated devices, as a real worker would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def simulated_worker(module: str, call: str, env: Mapping[str, str]) -> Iterator[
        tuple[subprocess.Popen, str]]:
    """A process that runs `from <module> import ...; print(<call>)`, then lives until the block
    ends; yields it and what the call printed.

    `env` is added to this process's environment (the hardware's, the visible devices).
    """
    function = call.split("(", 1)[0]
    code = (f"import sys; from {module} import {function}; print({call}, flush=True); "
            "sys.stdin.readline()")
    worker = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        yield worker, worker.stdout.readline().strip()
    finally:
        worker.stdin.close()
        worker.wait(timeout=30)
