"""Copies Ray's GPU metric provider out of the installed Ray, to time it where Ray is absent.

A GPU host lent for a few minutes may have no Ray and no way to install it (the
wheel is too large to carry). Ray's provider needs only two helpers from the
rest of Ray, so this writes a folder holding, unchanged, Ray's
`dashboard/modules/reporter/gpu_providers.py` and its vendored
`_private/thirdparty/pynvml`, plus those two helpers:

    python tools/ray_provider_subset.py --out .ray-subset
    PYTHONPATH=.ray-subset python bench/run.py --real-gpu --out ...

`ray_accel_subset_of` in the folder's `ray/__init__.py` names the Ray release
the files came from.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

COPIED = ("dashboard/modules/reporter/gpu_providers.py", "_private/thirdparty/pynvml")

# Ray's own definitions of the two helpers the provider imports (ray._common.utils,
# ray.util.debug), reduced to the behaviour the provider relies on.
HELPERS = {
    "_common/utils.py": '''import os


def env_bool(key, default):
    if key in os.environ:
        val = os.environ[key].lower()
        return val == "true" or val == "1"
    return default
''',
    "util/debug.py": '''_logged = set()


def log_once(key):
    if key in _logged:
        return False
    _logged.add(key)
    return True
''',
}


def write_subset(out: Path) -> None:
    """Writes the provider, its vendored pynvml and the two helpers under `out/ray`."""
    import ray

    source = Path(ray.__file__).parent
    target = out / "ray"
    if target.exists():
        shutil.rmtree(target)
    for relative in COPIED:
        path = source / relative
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, destination, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, destination)
    for relative, text in HELPERS.items():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / relative).write_text(text)
    for folder in [target, *(p for p in target.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    (target / "__init__.py").write_text(f'ray_accel_subset_of = "{version("ray")}"\n')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write")
    args = parser.parse_args(argv)
    write_subset(args.out)
    print(f"wrote {args.out / 'ray'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
