"""Vendor backends, found through the `ray_accel.backends` entry-point group.

A third-party package adds a backend by declaring, in its own metadata::

    [project.entry-points."ray_accel.backends"]
    myvendor = "my_package.module:MyBackend"

where `MyBackend` subclasses `ray_accel.exporter.backends.base.Backend`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from .base import Backend, BackendUnavailable, ErrorTally

__all__ = ["ENTRY_POINT_GROUP", "Backend", "BackendUnavailable", "ErrorTally",
           "available_backends", "load_backends"]

ENTRY_POINT_GROUP = "ray_accel.backends"
log = logging.getLogger(__name__)


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_backends() -> list[str]:
    """Names of every installed backend."""
    return sorted(_entry_points())


def load_backends(names: Iterable[str] | None = None) -> list[Backend]:
    """Instantiate the named backends (all installed ones when `names` is None).

    An unknown name raises ValueError listing the known ones. A backend whose
    module fails to import stands in as a backend that is always down, so one
    broken plug-in is reported without stopping the others.
    """
    known = _entry_points()
    wanted = sorted(known) if names is None else list(names)
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(
            f"unknown backend(s) {', '.join(unknown)}; installed: {', '.join(sorted(known))}"
        )
    backends: list[Backend] = []
    for name in wanted:
        try:
            backend_class = known[name].load()
            if not (isinstance(backend_class, type) and issubclass(backend_class, Backend)):
                raise TypeError(f"{known[name].value} is not a Backend subclass")
            backends.append(backend_class())
        except Exception as exc:  # a third-party plug-in may fail in any way
            log.error("backend %s could not be loaded: %s", name, exc)
            backends.append(_unloadable(name, f"could not be loaded: {exc}"))
    return backends


def _unloadable(backend_name: str, message: str) -> Backend:
    """A stand-in for a backend whose code failed to load: it is always down."""

    class UnloadableBackend(Backend):
        name = backend_name
        vendor = backend_name

        def open(self):
            raise BackendUnavailable(message)

        def sample(self, device):
            raise BackendUnavailable(message)

    return UnloadableBackend()
