"""Which extensions an agent runs alongside sampling, decided from its configuration."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .sinks.otlp_settings import otlp_settings

if TYPE_CHECKING:
    from .agent import AgentConfig, AgentExtension


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
