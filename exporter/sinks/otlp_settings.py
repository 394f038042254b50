"""Where and how the agent exports over OTLP: flags first, then the standard OTEL_* variables.

Kept apart from the sink (otlp.py) so that reading the flags does not load the
OpenTelemetry SDK, which the agent imports only when export is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

GRPC = "grpc"
HTTP_PROTOBUF = "http/protobuf"
PROTOCOLS = (GRPC, HTTP_PROTOBUF)
DEFAULT_INTERVAL_S = 10.0
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_INTERVAL_VARIABLE = "OTEL_METRIC_EXPORT_INTERVAL"  # milliseconds, per the specification
HTTP_METRICS_PATH = "/v1/metrics"


@dataclass(frozen=True)
class OtlpSettings:
    """Where and how often to export. `endpoint` None: the exporter reads OTEL_* itself."""

    protocol: str
    interval_s: float
    endpoint: str | None = None


def otlp_settings(endpoint: str | None, protocol: str | None, interval_s: float | None,
                  environ: Mapping[str, str]) -> OtlpSettings | None:
    """The export settings from flags, falling back on the standard variables.

    Export is on when an endpoint is given here or in OTEL_EXPORTER_OTLP_ENDPOINT
    / OTEL_EXPORTER_OTLP_METRICS_ENDPOINT; None means off. Raises `ValueError`
    naming the bad flag or variable.
    """
    if endpoint is None and not any(environ.get(v) for v in _ENDPOINT_VARIABLES):
        if protocol is not None or interval_s is not None:
            raise ValueError("--otlp-protocol and --otlp-interval need an endpoint: "
                             "--otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")
        return None
    if endpoint is not None:
        endpoint = _checked_endpoint(endpoint)
    chosen = protocol or next((environ[v] for v in _PROTOCOL_VARIABLES if environ.get(v)), GRPC)
    if chosen not in PROTOCOLS:
        source = "--otlp-protocol" if protocol else "OTEL_EXPORTER_OTLP_PROTOCOL"
        raise ValueError(f"{source} must be one of {', '.join(PROTOCOLS)}, got {chosen!r}")
    if interval_s is None:
        interval_s = _interval_from(environ)
    if endpoint is not None and chosen == HTTP_PROTOBUF:
        endpoint = _with_metrics_path(endpoint)
    return OtlpSettings(protocol=chosen, interval_s=interval_s, endpoint=endpoint)


def _checked_endpoint(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--otlp-endpoint must be an http:// or https:// URL with a host, "
                         f"got {endpoint!r}")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ValueError(f"--otlp-endpoint has an invalid port: {endpoint!r}") from None
    return endpoint


def _with_metrics_path(endpoint: str) -> str:
    # Like OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets the signal path appended.
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        return urlunsplit(parts._replace(path=HTTP_METRICS_PATH))
    return endpoint


def _interval_from(environ: Mapping[str, str]) -> float:
    raw = environ.get(_INTERVAL_VARIABLE)
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        milliseconds = float(raw)
    except ValueError:
        raise ValueError(f"{_INTERVAL_VARIABLE} must be milliseconds, got {raw!r}") from None
    if milliseconds <= 0:
        raise ValueError(f"{_INTERVAL_VARIABLE} must be positive, got {raw!r}")
    return milliseconds / 1000
