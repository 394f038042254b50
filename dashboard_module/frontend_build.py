"""Whether the committed frontend bundle (static/) was built from the current sources.

The built bundle ships as package data, so installing the package never needs
Node.js. `make frontend` rebuilds it and records the SHA-256 of the sources it
was built from in static/build.json; a test compares that with the sources.
Usage: `python -m ray_accel.dashboard_module.frontend_build [--write]`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
FRONTEND = PACKAGE.parent / "frontend"
RECORD = PACKAGE / "static" / "build.json"
INPUTS = ("package.json", "package-lock.json", "index.html", "vite.config.ts", "tsconfig.json")


def sources(frontend: Path = FRONTEND) -> list[Path]:
    """The files the bundle is built from (tests excluded)."""
    found = [frontend / name for name in INPUTS]
    found += [p for p in (frontend / "src").rglob("*")
              if p.is_file() and ".test." not in p.name]
    return sorted(found)


def source_hash(frontend: Path = FRONTEND) -> str:
    digest = hashlib.sha256()
    for path in sources(frontend):
        digest.update(path.relative_to(frontend).as_posix().encode() + b"\0")
        digest.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()


def recorded_hash() -> str | None:
    try:
        return json.loads(RECORD.read_text())["source_sha256"]
    except (OSError, ValueError, KeyError):
        return None


def main(argv: list[str]) -> int:
    current = source_hash()
    if "--write" in argv:
        RECORD.write_text(json.dumps({"source_sha256": current}, indent=1) + "\n")
        return 0
    if recorded_hash() != current:
        print("dashboard_module/static/ is stale: run `make frontend`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
