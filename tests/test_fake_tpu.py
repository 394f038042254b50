"""The simulated TPU host on its own: its gRPC service, device plugin endpoint and files."""

from __future__ import annotations

import pathlib
import urllib.request

import grpc
import pytest

from ray_accel.exporter.backends.tpu import proto
from ray_accel.exporter.simulate import SimulatedHardware


@pytest.fixture
def hardware():
    with SimulatedHardware.start("tpu-v5e-8") as hw:
        yield hw


def _call(port: int, path: str, request, response_type):
    channel = grpc.secure_channel(
        f"localhost:{port}", grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP))
    with channel:
        method = channel.unary_unary(path, request_serializer=type(request).SerializeToString,
                                     response_deserializer=response_type.FromString)
        return method(request, timeout=5)


def test_service_answers_like_libtpu(hardware):
    port = int(hardware.environ()["TPU_RUNTIME_METRICS_PORTS"])
    listed = _call(port, proto.LIST_SUPPORTED_METRICS, proto.ListSupportedMetricsRequest(),
                   proto.ListSupportedMetricsResponse)
    assert {s.metric_name for s in listed.supported_metric} == set(proto.ALL_METRICS)
    answer = _call(port, proto.GET_RUNTIME_METRIC,
                   proto.MetricRequest(metric_name=proto.HBM_TOTAL), proto.MetricResponse)
    assert answer.metric.name == proto.HBM_TOTAL
    assert [(x.attribute.key, x.attribute.value.int_attr, x.gauge.as_int)
            for x in answer.metric.metrics] == [("device-id", i, 16 * 2**30) for i in range(8)]
    with pytest.raises(grpc.RpcError) as unknown:
        _call(port, proto.GET_RUNTIME_METRIC, proto.MetricRequest(metric_name="no.such.metric"),
              proto.MetricResponse)
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND


def test_service_can_be_taken_down_by_scenario_update(hardware):
    port = int(hardware.environ()["TPU_RUNTIME_METRICS_PORTS"])
    hardware.modify(lambda s: s["tpu"].update(runtime_service=False))
    with pytest.raises(grpc.RpcError) as down:
        _call(port, proto.GET_RUNTIME_METRIC, proto.MetricRequest(metric_name=proto.HBM_USAGE),
              proto.MetricResponse)
    assert down.value.code() is grpc.StatusCode.UNAVAILABLE


def test_device_plugin_endpoint_and_files(hardware):
    environ = hardware.environ()
    with urllib.request.urlopen(f"http://{environ['TPU_DEVICE_PLUGIN_ADDR']}/metrics") as reply:
        text = reply.read().decode()
    # worker 1 of the slice: runtime metrics are numbered 8..15, host metrics 0..7
    assert 'duty_cycle{accelerator_id="4804690994094478883-8"' in text
    assert 'tensorcore_utilization{accelerator_id="4804690994094478883-0"' in text
    dev = pathlib.Path(environ["RAY_ACCEL_TPU_DEV_DIR"])
    assert sorted(p.name for p in (dev / "vfio").iterdir()) == [*map(str, range(8)), "vfio"]
    hardware.close()
    assert not dev.exists()
