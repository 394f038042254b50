"""Importing the ``amdsmi`` package, whose failures say what is missing in one line.

The PyPI wheel ships no ``libamd_smi.so``: without ROCm its import raises
KeyError (after printing a hint on stdout), and a wheel newer than the
installed library raises AttributeError for the symbols the library lacks.
Any of these makes the backend unavailable, with a message that says what to
install; the wheel's own output is folded into it rather than printed.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any, TextIO

from ..base import BackendUnavailable

MODULE = "amdsmi"
_IMPORTING = threading.Lock()


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _ThreadOutput:
    """Stands in for sys.stdout or sys.stderr: what one thread writes is kept, the rest passes.

    The sampler imports amdsmi on a worker thread while other threads keep
    printing; a plain redirect of sys.stdout would swallow their output too.
    """

    def __init__(self, original: TextIO, thread: int) -> None:
        self.original = original
        self._thread = thread
        self.kept: list[str] = []

    def write(self, text: str) -> int:
        if threading.get_ident() == self._thread:
            self.kept.append(text)
            return len(text)
        return self.original.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


@contextlib.contextmanager
def _output_of_this_thread() -> Iterator[list[_ThreadOutput]]:
    thread = threading.get_ident()
    proxies = [(name, _ThreadOutput(getattr(sys, name), thread)) for name in ("stdout", "stderr")]
    for name, proxy in proxies:
        setattr(sys, name, proxy)
    try:
        yield [proxy for _, proxy in proxies]
    finally:
        for name, proxy in proxies:
            if getattr(sys, name) is proxy:
                setattr(sys, name, proxy.original)


def load_amdsmi() -> ModuleType:
    """Import ``amdsmi``; raise BackendUnavailable saying why it cannot be used."""
    with _IMPORTING, _output_of_this_thread() as outputs:
        try:
            return importlib.import_module(MODULE)
        except ImportError as error:
            reason = (f"the amdsmi package is not installed ({_one_line(str(error))}); on AMD "
                      "GPU nodes install it with ROCm's amd-smi-lib, or pip install "
                      "'ray-accel[amd]'")
        except KeyError as error:
            reason = (f"amdsmi cannot find ROCm's libamd_smi.so (KeyError {error}); install "
                      "ROCm's amd-smi-lib or set ROCM_PATH")
        except AttributeError as error:
            reason = ("the amdsmi package is newer than the installed libamd_smi.so "
                      f"({_one_line(str(error))}); install the amdsmi release of your ROCm "
                      "version")
        except Exception as error:  # the wheel's import runs arbitrary setup code
            reason = (f"amdsmi could not be imported: {type(error).__name__}: "
                      f"{_one_line(str(error))}")
    printed = _one_line("".join(text for output in outputs for text in output.kept))
    raise BackendUnavailable(f"{reason} [amdsmi printed: {printed}]" if printed else reason)
