"""Installs the boards into a Ray head's Grafana provisioning, next to Ray's own boards.

Ray's dashboard writes Grafana's configuration under `<session dir>/metrics/grafana/`
(or `$RAY_METRICS_OUTPUT_ROOT/grafana/`) when it starts, deleting whatever was
there, and points Grafana's provisioning at `session_latest/metrics/grafana/provisioning`.
We add a dashboards provider (`provisioning/dashboards/ray_accel.yml`, folder
"Ray") and our boards in a folder of our own (`ray_accel_dashboards/`), so they
show up in Ray's Grafana folder. Because Ray deletes them when its dashboard
restarts, `watch()` puts them back.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .generate import write
from .provisioning import render_provider

log = logging.getLogger(__name__)

#: Ray's variable that moves its metrics output (dashboards, Grafana config) elsewhere.
METRICS_OUTPUT_ROOT_ENV = "RAY_METRICS_OUTPUT_ROOT"
PROVIDER_FILE = "ray_accel.yml"
BOARDS_FOLDER = "ray_accel_dashboards"


@dataclass(frozen=True)
class RayGrafana:
    """Where a Ray session keeps its Grafana configuration, and where ours goes in it."""

    grafana_dir: Path

    @classmethod
    def for_session(cls, session_dir: Path | str) -> RayGrafana:
        """The Grafana folder of a session, honouring RAY_METRICS_OUTPUT_ROOT as Ray does."""
        root = os.environ.get(METRICS_OUTPUT_ROOT_ENV) or os.path.join(session_dir, "metrics")
        return cls(Path(root) / "grafana")

    @property
    def providers_dir(self) -> Path:
        return self.grafana_dir / "provisioning" / "dashboards"

    @property
    def provider(self) -> Path:
        return self.providers_dir / PROVIDER_FILE

    @property
    def boards_dir(self) -> Path:
        return self.grafana_dir / BOARDS_FOLDER

    @property
    def ray_wrote_config(self) -> bool:
        """Whether Ray's dashboard has written its own Grafana configuration here."""
        return (self.grafana_dir / "grafana.ini").exists()

    def contents(self, boards: Mapping[str, str]) -> dict[Path, str]:
        """What an installation consists of: {path: text}; `boards` are {file name: JSON}."""
        found = {self.boards_dir / name: text for name, text in boards.items()}
        found[self.provider] = render_provider(str(self.boards_dir))
        return found


def find_session_dir(address: str | None = None, node_id: str | None = None,
                     timeout_s: float = 10.0) -> Path:
    """The session dir of the Ray node on this host (as the agent finds its node).

    Raises `RayNotFound` or `RaySourceError` (from the agent's Ray sources).
    """
    from ray_accel.exporter.attribution.ray_sources import RaySources

    sources = RaySources.discover(address, node_id, timeout_s=timeout_s)
    try:
        return Path(sources.node.session_dir)
    finally:
        sources.close()


def missing(target: RayGrafana, boards: Mapping[str, str]) -> list[Path]:
    """Files of the installation that are absent or differ from what they should be."""
    return [path for path, text in target.contents(boards).items()
            if not path.exists() or path.read_text() != text]


def install(target: RayGrafana, boards: Mapping[str, str]) -> list[Path]:
    """Write the provider and boards; remove boards of ours that are no longer generated."""
    contents = target.contents(boards)
    if target.boards_dir.is_dir():
        for old in target.boards_dir.glob("*.json"):
            if old not in contents:
                old.unlink()
    written = write(target.grafana_dir, {str(p.relative_to(target.grafana_dir)): t
                                         for p, t in contents.items()})
    if not target.ray_wrote_config:
        log.warning("Ray's dashboard has not written its Grafana configuration in %s yet; "
                    "when it starts it will delete ours (use --watch to put it back)",
                    target.grafana_dir)
    return written


def watch(target: RayGrafana, boards: Mapping[str, str], stop: threading.Event,
          interval_s: float = 5.0, settle_s: float = 1.0,
          on_install: Callable[[list[Path]], None] | None = None) -> None:
    """Install, then re-install whenever files go missing or change, until `stop` is set.

    After noticing missing files it waits `settle_s` before writing, so that it
    does not write into a folder Ray is deleting and rewriting at that moment.
    """
    first = True
    while True:
        if missing(target, boards) and (first or not stop.wait(settle_s)):
            written = install(target, boards)
            if on_install is not None:
                on_install(written)
        first = False
        if stop.wait(interval_s):
            return
