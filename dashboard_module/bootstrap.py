"""Opt-in loading of the Accelerators module into Ray's own dashboard (Ray 2.60).

`ray_accel_dashboard.pth`, installed into site-packages with the package, imports
this module and calls `install()` only when RAY_ACCEL_DASHBOARD=1. In the dashboard
head process (argv[0] ends with ray/dashboard/dashboard.py) it wraps Ray's
`dashboard_utils.get_all_modules` as soon as Ray imports it, so that once Ray has
imported all of its own modules our `SubprocessModule` subclass
(`ray_head.RayAccelAccelerators`) is imported too and Ray discovers it.

Nothing here may break Ray's dashboard: every step catches every error, logs it,
and leaves Ray exactly as it would be without us. In every other Python process
(workers, the forkserver whose argv is `-c`, tools) `install()` does nothing.

RAY_ACCEL_DASHBOARD_FAIL (tests only) injects a failure: `install` (here),
`import` (importing our module) or `run` (the module's start-up).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import sys
import time
import traceback

ENABLE_VARIABLE = "RAY_ACCEL_DASHBOARD"
FAIL_VARIABLE = "RAY_ACCEL_DASHBOARD_FAIL"
HEAD_SCRIPT = "ray/dashboard/dashboard.py"
PATCHED_MODULE = "ray.dashboard.utils"
OUR_MODULE = "ray_accel.dashboard_module.ray_head"
DEFAULT_LOG_FILENAME = "dashboard.log"  # Ray's dashboard_consts.DASHBOARD_LOG_FILENAME

log = logging.getLogger("ray_accel.dashboard_module")
_state = {"installed": False, "loaded": False, "error": ""}


def role(argv: list[str] | None = None) -> str | None:
    """'head' in Ray's dashboard head process, else None."""
    argv = sys.argv if argv is None else argv
    first = (argv[0] if argv else "").replace("\\", "/")
    return "head" if first.endswith(HEAD_SCRIPT) else None


def injected(stage: str) -> None:
    if os.environ.get(FAIL_VARIABLE) == stage:
        raise RuntimeError(f"failure injected by {FAIL_VARIABLE}={stage}")


def _load_ours() -> bool:
    """Import our module once; True when it was imported now."""
    if _state["loaded"] or _state["error"]:
        return False
    try:
        injected("import")
        importlib.import_module(OUR_MODULE)
    except BaseException as error:  # nothing may escape into Ray's start-up
        _state["error"] = f"{type(error).__name__}: {error}"
        log.exception("ray-accel: not loading the Accelerators module into Ray's dashboard; "
                      "Ray's dashboard runs without it")
        return False
    _state["loaded"] = True
    log.info("ray-accel: Accelerators module loaded; served at /accelerators/")
    return True


def _wrap(utils) -> None:
    original = utils.get_all_modules

    def get_all_modules(module_type):
        found = original(module_type)  # Ray imports all of its own modules first
        if getattr(module_type, "__name__", "") == "SubprocessModule" and _load_ours():
            try:
                found = original(module_type)
            except Exception:
                log.exception("ray-accel: listing modules again failed; leaving ours out")
        return found

    get_all_modules.__wrapped__ = original
    utils.get_all_modules = get_all_modules


class _Loader(importlib.abc.Loader):
    def __init__(self, inner) -> None:
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)  # Ray's own import; its errors are Ray's
        try:
            _wrap(module)
        except Exception:
            log.exception("ray-accel: could not hook Ray's module discovery")


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for Ray to import PATCHED_MODULE, then wraps its loader once."""

    def find_spec(self, fullname, path, target=None):
        if fullname != PATCHED_MODULE:
            return None
        try:
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
            return spec
        except Exception:
            return None  # let the normal import machinery find it


def ray_log_file(argv: list[str] | None = None) -> str | None:
    """The log file Ray's dashboard head writes, from its command line (`--log-dir`,
    `--logging-filename`); None where it logs to its standard error."""
    argv = sys.argv if argv is None else argv
    flags = dict(arg[2:].partition("=")[::2] for arg in argv[1:] if arg.startswith("--"))
    name = flags.get("logging-filename", DEFAULT_LOG_FILENAME)
    return os.path.join(flags["log-dir"], name) if flags.get("log-dir") and name else None


def _log_early(message: str) -> None:
    """`message` with the current exception, in Ray's dashboard log: at interpreter
    start-up Ray has set up no logging yet, and the standard error of a dashboard that
    `ray start` launched goes to no file it keeps."""
    log.exception("%s", message)
    path = ray_log_file()
    if path is None:
        return
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as ray_log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        ray_log.write(f"{stamp},000\tERROR bootstrap.py -- {message}\n"
                      f"{traceback.format_exc()}")


def install() -> None:
    """Called from the .pth file; a no-op outside Ray's dashboard head."""
    try:
        if _state["installed"] or os.environ.get(ENABLE_VARIABLE) != "1" or role() != "head":
            return
        injected("install")
        sys.meta_path.insert(0, _Finder())
        _state["installed"] = True
    except Exception:
        _log_early("ray-accel: bootstrap failed; Ray's dashboard runs without the "
                   "Accelerators module")
