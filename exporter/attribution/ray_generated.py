"""Ray's generated protobuf and gRPC modules, loaded without importing Ray.

`ray.core.generated` is a subpackage of `ray`, so importing it runs
`ray/__init__` and with it most of Ray (about 50 MB resident). The generated
files import each other relatively (`from . import common_pb2`), so they load
as they are under a package of our own whose path is Ray's folder. When Ray is
already imported in this process (the agent deployed as a Ray actor, tests),
Ray's own modules are used instead.

The message descriptors are registered in protobuf's default pool under the
same file names Ray uses; protobuf accepts the same file twice, so both copies
can live in one process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from pathlib import Path

from .ray_errors import RayNotFound

_PRIVATE_PACKAGE = __name__ + "_files"
_LOCK = threading.Lock()
_chosen_root: str | None = None


def generated(name: str) -> types.ModuleType:
    """Ray's generated module `name` (e.g. "gcs_service_pb2"); `RayNotFound` without Ray.

    The copy is chosen once per process (Ray's when Ray was imported first), so
    requests, replies and stubs always come from the same modules.
    """
    return importlib.import_module(f"{_root()}.{name}")


def _root() -> str:
    global _chosen_root
    with _LOCK:
        if _chosen_root is None:
            if "ray.core.generated" in sys.modules:
                _chosen_root = "ray.core.generated"
            else:
                sys.modules.setdefault(_PRIVATE_PACKAGE, _package_on_rays_folder())
                _chosen_root = _PRIVATE_PACKAGE
        return _chosen_root


def _package_on_rays_folder() -> types.ModuleType:
    spec = importlib.util.find_spec("ray")  # finds, does not import
    if spec is None or spec.origin is None:
        raise RayNotFound("Ray is not installed in this Python environment")
    folder = Path(spec.origin).parent / "core" / "generated"
    if not folder.is_dir():
        raise RayNotFound(f"this Ray installation has no {folder}")
    package = types.ModuleType(_PRIVATE_PACKAGE, "Ray's generated modules, by path")
    package.__path__ = [str(folder)]
    package.__package__ = _PRIVATE_PACKAGE
    return package
