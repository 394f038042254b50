"""Every call to libtpu's runtime metric service goes through here once; errors are scoped.

libtpu serves ``tpu.monitoring.runtime.RuntimeMetricService`` on localhost while
a TPU workload runs, one port per TPU process on the host, listed in libtpu's
``TPU_RUNTIME_METRICS_PORTS`` (default 8431, the port ``tpu-info`` reads). The
agent reads the first port that answers and sticks to it while it does.

How a failed ``GetRuntimeMetric`` is scoped:
- UNAVAILABLE (nothing listening: no workload runs) on every port: `ServiceDown`;
  the backend falls back to the device plugin for the cycle.
- NOT_FOUND / UNIMPLEMENTED / INVALID_ARGUMENT: this libtpu does not serve the
  metric; it is absent and not asked again until the service goes away (the
  next workload may bring another libtpu).
- Anything else (DEADLINE_EXCEEDED, INTERNAL, ...): absent for this cycle only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from ..calls import CallErrors, ErrorTally, Failure
from . import proto

PORTS_ENV = "TPU_RUNTIME_METRICS_PORTS"
DEFAULT_PORT = 8431
CALL_TIMEOUT_S = 2.0
FUNCTION = "GetRuntimeMetric"
_UNSUPPORTED = frozenset({grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED,
                          grpc.StatusCode.INVALID_ARGUMENT})


class ServiceDown(Exception):
    """No port of the runtime metric service answers."""


def runtime_ports(environ: Mapping[str, str] | None = None) -> list[int]:
    """The ports of `TPU_RUNTIME_METRICS_PORTS` ("8431,8432"), else [8431]."""
    environ = os.environ if environ is None else environ
    ports = []
    for part in environ.get(PORTS_ENV, "").split(","):
        part = part.strip()
        if part.isdigit() and 0 < int(part) < 65536:
            ports.append(int(part))
    return ports or [DEFAULT_PORT]


def status_kind(code: grpc.StatusCode) -> str:
    """A gRPC status as an error kind: ``not_found``, ``unavailable``, ..."""
    return code.name.lower()


class RuntimeCalls(CallErrors):
    """Calls to the runtime metric service, remembering what it does not serve.

    `begin_cycle()` clears the previous cycle's errors. One thread at a time uses it.
    """

    def __init__(self, ports: Sequence[int], tally: ErrorTally,
                 timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.ports = list(ports)
        super().__init__(tally)
        self._timeout_s = timeout_s
        self._channels: dict[int, grpc.Channel] = {}
        self._current = 0  # index into ports of the port that answered last

    def metric(self, name: str) -> Sequence[Any] | None:
        """The ``Metric`` entries libtpu has for metric `name`; None when it is absent.

        Raises:
            ServiceDown: no port answers.
        """
        key = f"{FUNCTION}[{name}]"
        if key in self._unsupported:
            return None
        request = proto.MetricRequest(metric_name=name)
        for attempt in range(len(self.ports)):
            position = (self._current + attempt) % len(self.ports)
            try:
                response = self._call(self.ports[position], request)
            except grpc.RpcError as error:
                code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
                if code is grpc.StatusCode.UNAVAILABLE:
                    continue
                self.failed(key, FUNCTION, Failure(status_kind(code),
                                                   permanent=code in _UNSUPPORTED))
                return None
            self._current = position
            self.cycle_answers += 1
            return list(response.metric.metrics)
        self._tally.count("unavailable", FUNCTION)
        self._unsupported = {}  # the next workload may run another libtpu release
        raise ServiceDown(f"no runtime metric service on port(s) {self._ports_text()}")

    def _call(self, port: int, request: Any) -> Any:
        channel = self._channels.get(port)
        if channel is None:
            # libtpu serves plaintext on localhost; local credentials, as tpu-info uses
            channel = grpc.secure_channel(
                f"localhost:{port}",
                grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP))
            self._channels[port] = channel
        call = channel.unary_unary(proto.GET_RUNTIME_METRIC,
                                   request_serializer=proto.MetricRequest.SerializeToString,
                                   response_deserializer=proto.MetricResponse.FromString)
        return call(request, timeout=self._timeout_s)

    def _ports_text(self) -> str:
        return ",".join(str(p) for p in self.ports)

    def close(self) -> None:
        """Close the channels."""
        for channel in self._channels.values():
            channel.close()
        self._channels = {}


def device_id(metric: Any) -> int | None:
    """The chip a ``Metric`` is about: its ``device-id`` attribute (or a kvlist's
    ``device-id``/``device_ordinal``); None for host-wide metrics."""
    attribute = metric.attribute
    if attribute.key == proto.DEVICE_ID_KEY:
        return _int_attr(attribute.value)
    if attribute.value.WhichOneof("attr") == "kvlist_attr":
        for inner in attribute.value.kvlist_attr.attributes:
            if inner.key in (proto.DEVICE_ID_KEY, "device_ordinal"):
                return _int_attr(inner.value)
    return None


def _int_attr(value: Any) -> int | None:
    kind = value.WhichOneof("attr")
    if kind == "int_attr":
        return int(value.int_attr)
    if kind == "string_attr" and value.string_attr.isdigit():
        return int(value.string_attr)
    return None


def gauge_value(metric: Any) -> float | None:
    """A numeric gauge's value; None for another measure or a non-number."""
    if metric.WhichOneof("measure") != "gauge":
        return None
    kind = metric.gauge.WhichOneof("value")
    if kind in ("as_double", "as_int"):
        return float(getattr(metric.gauge, kind))
    return None
