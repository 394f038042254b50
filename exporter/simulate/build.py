"""Builds the simulated ``libnvidia-ml.so.1`` from its C source, with a cache.

The library is compiled once per (source, compiler) pair into
``${XDG_CACHE_HOME:-~/.cache}/ray-accel/fakenvml/<hash>/libnvidia-ml.so.1``.
Each build writes a private temporary file and renames it into place, so any
number of processes may build at the same time and none sees a partial file.

Run ``python -m ray_accel.exporter.simulate.build`` to build and print the path.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile

LIBRARY_NAME = "libnvidia-ml.so.1"
SOURCE_DIR = pathlib.Path(__file__).resolve().parent / "fake_nvml"
SOURCES = ("fake_nvml.c",)
HEADERS = ("fake_nvml.h",)
CFLAGS = (
    "-shared",
    "-fPIC",
    "-fvisibility=hidden",
    f"-Wl,-soname,{LIBRARY_NAME}",
    "-pthread",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
)


class BuildError(RuntimeError):
    """The simulated NVML library could not be built."""


def cache_root() -> pathlib.Path:
    """The folder holding one subfolder per built variant of the library."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "ray-accel" / "fakenvml"


def _compiler_command() -> list[str]:
    """The C compiler as an argv prefix: ``$CC`` if set, else ``cc``."""
    words = shlex.split(os.environ.get("CC", "") or "cc")
    resolved = shutil.which(words[0])
    if resolved is None:
        raise BuildError(
            f"no C compiler: {words[0]!r} was not found on PATH. Install one "
            "(e.g. `apt-get install gcc`) or point the CC environment variable at it; "
            "the simulated NVIDIA library is compiled from C source."
        )
    return [resolved, *words[1:]]


@functools.lru_cache(maxsize=8)
def _compiler_identity(compiler: tuple[str, ...]) -> str:
    try:
        out = subprocess.run(
            [*compiler, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as err:
        raise BuildError(f"cannot run the C compiler {compiler[0]}: {err}") from err
    return f"{' '.join(compiler)}\n{out.stdout}"


def _build_key(compiler: list[str]) -> str:
    digest = hashlib.sha256()
    for name in (*SOURCES, *HEADERS):
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    digest.update(_compiler_identity(tuple(compiler)).encode())
    digest.update(" ".join(CFLAGS).encode())
    return digest.hexdigest()[:24]


def library_path() -> pathlib.Path:
    """Where the library for the current source and compiler lives (built or not)."""
    return cache_root() / _build_key(_compiler_command()) / LIBRARY_NAME


def build_library(force: bool = False) -> pathlib.Path:
    """Returns the path of the built library, compiling it if it is not cached.

    Raises:
        BuildError: no compiler, or the compiler rejected the source.
    """
    compiler = _compiler_command()
    target = cache_root() / _build_key(compiler) / LIBRARY_NAME
    if target.is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{LIBRARY_NAME}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = pathlib.Path(tmp_name)
    try:
        cmd = [*compiler, *CFLAGS, "-o", str(tmp), *(str(SOURCE_DIR / s) for s in SOURCES)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if result.returncode != 0:
            raise BuildError(
                f"compiling the simulated NVML library failed ({shlex.join(cmd)}):\n"
                f"{result.stderr.strip()}"
            )
        tmp.chmod(0o755)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def main() -> None:
    """Builds the library and prints its path."""
    print(build_library())


if __name__ == "__main__":
    main()
