"""The two ways reading the local Ray node fails."""

from __future__ import annotations


class RayNotFound(RuntimeError):
    """No Ray node of the requested cluster runs on this host."""


class RaySourceError(RuntimeError):
    """A Ray server (GCS, raylet, dashboard State API) failed, timed out or refused us."""
