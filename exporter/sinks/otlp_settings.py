"""Where and how the agent exports over OTLP: flags first, then the standard OTEL_* variables.

Kept apart from the sink (otlp.py) so that reading the flags does not load the
OpenTelemetry SDK, which the agent imports only when export is on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

GRPC = "grpc"
HTTP_PROTOBUF = "http/protobuf"
PROTOCOLS = (GRPC, HTTP_PROTOBUF)
DEFAULT_INTERVAL_S = 10.0
MIN_INTERVAL_S = 0.1  # the bounds of --otlp-interval
MAX_INTERVAL_S = 3600.0
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_INTERVAL_VARIABLE = "OTEL_METRIC_EXPORT_INTERVAL"  # milliseconds, per the specification
# Seconds, as the Python SDK's exporters read them (the specification says milliseconds).
_TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
HTTP_METRICS_PATH = "/v1/metrics"


@dataclass(frozen=True)
class OtlpSettings:
    """Where and how often to export. `endpoint` None: the exporter reads OTEL_* itself.

    `timeout_s` is the operator's own export timeout (OTEL_EXPORTER_OTLP_*TIMEOUT), if any.
    """

    protocol: str
    interval_s: float
    endpoint: str | None = None
    timeout_s: float | None = None

    @property
    def export_timeout_s(self) -> float:
        """How long one export may last: about one interval (1-10 s), or the operator's less.

        So a collector that hangs does not hold up the next export for long.
        """
        bound = min(max(self.interval_s, 1.0), 10.0)
        return bound if self.timeout_s is None else min(bound, self.timeout_s)


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
        endpoint = _checked_endpoint(endpoint, "--otlp-endpoint")
    chosen = protocol or next((environ[v] for v in _PROTOCOL_VARIABLES if environ.get(v)), GRPC)
    if chosen not in PROTOCOLS:
        source = "--otlp-protocol" if protocol else "OTEL_EXPORTER_OTLP_PROTOCOL"
        raise ValueError(f"{source} must be one of {', '.join(PROTOCOLS)}, got {chosen!r}")
    if endpoint is None:  # the exporter reads the variable itself: checked as it will be
        variable = next(v for v in _ENDPOINT_VARIABLES if environ.get(v))
        if not (chosen == GRPC and _is_grpc_target(environ[variable])):
            _checked_endpoint(environ[variable], variable)
    if interval_s is None:
        interval_s = _interval_from(environ)
    if endpoint is not None and chosen == HTTP_PROTOBUF:
        endpoint = _with_metrics_path(endpoint)
    return OtlpSettings(protocol=chosen, interval_s=interval_s, endpoint=endpoint,
                        timeout_s=_timeout_from(environ))


def _is_grpc_target(value: str) -> bool:
    """A scheme-less `host:port`, which the gRPC exporter takes from the variable too."""
    host, _, port = value.rpartition(":")
    return "://" not in value and bool(host) and port.isdigit() and " " not in value


def _checked_endpoint(endpoint: str, source: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{source} must be an http:// or https:// URL with a host, "
                         f"got {endpoint!r}")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ValueError(f"{source} has an invalid port: {endpoint!r}") from None
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
    low, high = MIN_INTERVAL_S * 1000, MAX_INTERVAL_S * 1000
    if not low <= milliseconds <= high:  # also refuses nan
        raise ValueError(f"{_INTERVAL_VARIABLE} must be between {low:.0f} and {high:.0f} "
                         f"milliseconds, got {raw!r}")
    return milliseconds / 1000


def _timeout_from(environ: Mapping[str, str]) -> float | None:
    variable = next((v for v in _TIMEOUT_VARIABLES if environ.get(v)), None)
    if variable is None:
        return None
    raw = environ[variable]
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{variable} must be seconds, got {raw!r}") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{variable} must be a positive number of seconds, got {raw!r}")
    return seconds
