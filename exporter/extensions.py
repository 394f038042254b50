"""Which extensions an agent runs alongside sampling, decided from its configuration."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol

from .config import AgentConfig
from .sinks.otlp_settings import otlp_settings
from .store import SnapshotStore


class AgentHandle(Protocol):
    """What an extension may read of the running agent."""

    @property
    def port(self) -> int | None:
        """The port the agent listens on, once serving."""

    @property
    def scheme(self) -> str:
        """`http` or `https`."""

    @property
    def store(self) -> SnapshotStore:
        """The agent's snapshots."""

    @property
    def node_labels(self) -> Mapping[str, str]:
        """The labels every series of this node carries."""

    @property
    def facts(self) -> Mapping[str, str]:
        """The agent's own facts (version, interval, scenario)."""


class AgentExtension(Protocol):
    """Something that runs alongside the agent (registration, OTLP export)."""

    async def start(self, agent: AgentHandle) -> None:
        """Called once the HTTP server accepts connections."""

    async def stop(self) -> None:
        """Called before the HTTP server closes."""


def configured_extensions(
    config: AgentConfig, environ: Mapping[str, str] | None = None
) -> list[AgentExtension]:
    """Registration in the Ray cluster when Ray is on, OTLP export when an endpoint is set.

    Raises `ValueError` when the OTLP settings (flags or OTEL_* variables) are invalid.
    """
    extensions: list[AgentExtension] = []
    if config.ray and config.register_interval_s > 0:
        from .cluster.registry import Registration

        extensions.append(Registration(config))
    settings = otlp_settings(config.otlp_endpoint, config.otlp_protocol, config.otlp_interval_s,
                             os.environ if environ is None else environ)
    if settings is not None:
        from .sinks.otlp import OtlpSink

        extensions.append(OtlpSink(settings))
    return extensions
