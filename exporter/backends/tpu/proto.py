"""libtpu's runtime metric service (``tpu.monitoring.runtime``), described in Python.

The messages are built from a ``FileDescriptorProto`` written here, with the
field names and numbers of libtpu's ``tpu_metric_service.proto`` (as published
with ``tpu-info``), instead of ``protoc``-generated modules: no build step, no
``grpcio-tools`` at test time, and no clash with generated code of whatever
protobuf runtime Ray pins. Only the parts the backend and the fake use are
described (``GetTpuRuntimeStatus`` and its telemetry messages are left out);
protobuf skips fields it does not know, so a real libtpu's answers still parse.

The same descriptors serve the client (`backends.tpu.runtime`) and the fake
server (`simulate.tpu_fake`), through `METHOD_PATHS` and the message classes.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from google.protobuf.message import Message

PACKAGE = "tpu.monitoring.runtime"
SERVICE = f"{PACKAGE}.RuntimeMetricService"
GET_RUNTIME_METRIC = f"/{SERVICE}/GetRuntimeMetric"
LIST_SUPPORTED_METRICS = f"/{SERVICE}/ListSupportedMetrics"

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_SCALARS = {
    "double": _F.TYPE_DOUBLE, "int64": _F.TYPE_INT64, "uint64": _F.TYPE_UINT64,
    "int32": _F.TYPE_INT32, "bool": _F.TYPE_BOOL, "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

# message -> fields (name, number, type, repeated, oneof); a type not in _SCALARS
# names a message (".pkg.Name" fully qualified, else in this package).
_Field = tuple[str, int, str, bool, str | None]
_MESSAGES: dict[str, tuple[_Field, ...]] = {
    "Exemplar": (
        ("value", 1, "double", False, None),
        ("timestamp", 2, ".google.protobuf.Timestamp", False, None),
        ("attributes", 3, "Attribute", True, None),
    ),
    "Distribution.BucketOptions.Exponential": (
        ("num_finite_buckets", 1, "int32", False, None),
        ("growth_factor", 2, "double", False, None),
        ("scale", 3, "double", False, None),
    ),
    "Distribution.BucketOptions.Linear": (
        ("num_finite_buckets", 1, "int32", False, None),
        ("width", 2, "double", False, None),
        ("offset", 3, "double", False, None),
    ),
    "Distribution.BucketOptions.Explicit": (
        ("bounds", 1, "double", True, None),
    ),
    # field 1 (the deprecated Regular buckets) is not described
    "Distribution.BucketOptions": (
        ("exponential_buckets", 2, "Distribution.BucketOptions.Exponential", False, "options"),
        ("explicit_buckets", 3, "Distribution.BucketOptions.Explicit", False, "options"),
        ("linear_buckets", 4, "Distribution.BucketOptions.Linear", False, "options"),
    ),
    "Distribution": (
        ("count", 1, "int64", False, None),
        ("mean", 2, "double", False, None),
        ("min", 3, "double", False, None),
        ("max", 4, "double", False, None),
        ("sum_of_squared_deviation", 5, "double", False, None),
        ("bucket_options", 6, "Distribution.BucketOptions", False, None),
        ("bucket_counts", 7, "int64", True, None),
        ("exemplars", 8, "Exemplar", True, None),
    ),
    "Gauge": (
        ("as_double", 1, "double", False, "value"),
        ("as_int", 2, "int64", False, "value"),
        ("as_string", 3, "string", False, "value"),
        ("as_bool", 4, "bool", False, "value"),
    ),
    "Counter": (
        ("as_double", 1, "double", False, "value"),
        ("as_int", 2, "uint64", False, "value"),
        ("exemplar", 3, "Exemplar", False, None),
    ),
    "Quantile": (
        ("quantile", 1, "double", False, None),
        ("value", 2, "double", False, None),
    ),
    "Summary": (
        ("sample_count", 1, "uint64", False, None),
        ("sample_sum", 2, "double", False, None),
        ("quantile", 3, "Quantile", True, None),
    ),
    "AttrValue": (
        ("string_attr", 1, "string", False, "attr"),
        ("bool_attr", 2, "bool", False, "attr"),
        ("int_attr", 3, "int64", False, "attr"),
        ("double_attr", 4, "double", False, "attr"),
        ("array_attr", 5, "ArrayAttrValue", False, "attr"),
        ("kvlist_attr", 6, "KeyValueList", False, "attr"),
        ("bytes_attr", 7, "bytes", False, "attr"),
    ),
    "ArrayAttrValue": (("attrs", 1, "AttrValue", True, None),),
    "KeyValueList": (("attributes", 1, "Attribute", True, None),),
    "Attribute": (
        ("key", 1, "string", False, None),
        ("value", 2, "AttrValue", False, None),
    ),
    "Metric": (
        ("attribute", 1, "Attribute", False, None),
        ("timestamp", 2, ".google.protobuf.Timestamp", False, None),
        ("gauge", 3, "Gauge", False, "measure"),
        ("counter", 4, "Counter", False, "measure"),
        ("distribution", 5, "Distribution", False, "measure"),
        ("summary", 6, "Summary", False, "measure"),
        ("start_timestamp", 7, ".google.protobuf.Timestamp", False, None),
    ),
    "TPUMetric": (
        ("name", 1, "string", False, None),
        ("description", 2, "string", False, None),
        ("metrics", 3, "Metric", True, None),
    ),
    "MetricRequest": (
        ("metric_name", 1, "string", False, None),
        ("skip_node_aggregation", 2, "bool", False, None),
    ),
    "MetricResponse": (("metric", 1, "TPUMetric", False, None),),
    "ListSupportedMetricsRequest": (("filter", 1, "string", False, None),),
    "SupportedMetric": (("metric_name", 1, "string", False, None),),
    "ListSupportedMetricsResponse": (
        ("supported_metric", 1, "SupportedMetric", True, None),
    ),
}


def _add_message(file: descriptor_pb2.FileDescriptorProto, name: str,
                 fields: tuple[_Field, ...]) -> None:
    parts = name.split(".")
    container = file.message_type
    message = None
    for part in parts:  # nested messages: parents are described before children
        message = next((m for m in container if m.name == part), None)
        if message is None:
            message = container.add(name=part)
        container = message.nested_type
    assert message is not None
    oneofs: list[str] = []
    for field_name, number, kind, repeated, oneof in fields:
        field = message.field.add(name=field_name, number=number,
                                  label=_REPEATED if repeated else _OPTIONAL)
        if kind in _SCALARS:
            field.type = _SCALARS[kind]
        else:
            field.type = _F.TYPE_MESSAGE
            field.type_name = kind if kind.startswith(".") else f".{PACKAGE}.{kind}"
        if oneof is not None:
            if oneof not in oneofs:
                oneofs.append(oneof)
                message.oneof_decl.add(name=oneof)
            field.oneof_index = oneofs.index(oneof)


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="ray_accel/tpu_metric_service.proto", package=PACKAGE, syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"])
    for name, fields in _MESSAGES.items():
        _add_message(file, name, fields)
    service = file.service.add(name="RuntimeMetricService")
    service.method.add(name="GetRuntimeMetric", input_type=f".{PACKAGE}.MetricRequest",
                       output_type=f".{PACKAGE}.MetricResponse")
    service.method.add(name="ListSupportedMetrics",
                       input_type=f".{PACKAGE}.ListSupportedMetricsRequest",
                       output_type=f".{PACKAGE}.ListSupportedMetricsResponse")
    return file


# A pool of our own: another copy of the same package (tpu-info's generated
# modules) in the default pool must not collide with this one.
_POOL = descriptor_pool.DescriptorPool()
_POOL.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
_POOL.Add(_file())


def _message(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


Gauge = _message("Gauge")
Distribution = _message("Distribution")
AttrValue = _message("AttrValue")
Attribute = _message("Attribute")
KeyValueList = _message("KeyValueList")
Metric = _message("Metric")
TPUMetric = _message("TPUMetric")
MetricRequest = _message("MetricRequest")
MetricResponse = _message("MetricResponse")
ListSupportedMetricsRequest = _message("ListSupportedMetricsRequest")
SupportedMetric = _message("SupportedMetric")
ListSupportedMetricsResponse = _message("ListSupportedMetricsResponse")

# Metric names libtpu serves (as tpu-info asks for them).
HBM_USAGE = "tpu.runtime.hbm.memory.usage.bytes"
HBM_TOTAL = "tpu.runtime.hbm.memory.total.bytes"
DUTY_CYCLE = "tpu.runtime.tensorcore.dutycycle.percent"
HBM_BANDWIDTH = "tpu.runtime.hbm.utilization.percent"  # newer libtpu releases only
COLLECTIVE_E2E = "megascale.collective_end_to_end_latencies.microsecond.cumulative.distribution"
DCN_TRANSFER = "megascale.dcn_transfer_latencies.microsecond.cumulative.distribution"
DCN_INBOUND = "megascale.dcn_inbound_transfer_latencies.microsecond.cumulative.distribution"
HOST_TO_DEVICE = "megascale.host_to_device_transfer_latencies.microsecond.cumulative.distribution"
DEVICE_TO_HOST = "megascale.device_to_host_transfer_latencies.microsecond.cumulative.distribution"
# Transfer latency distributions -> the `path` label they are exported with.
TRANSFER_PATHS: dict[str, str] = {
    DCN_TRANSFER: "dcn_outbound",
    DCN_INBOUND: "dcn_inbound",
    HOST_TO_DEVICE: "host_to_device",
    DEVICE_TO_HOST: "device_to_host",
}
PER_CHIP_GAUGES = (HBM_USAGE, HBM_TOTAL, DUTY_CYCLE, HBM_BANDWIDTH)
DISTRIBUTIONS = (COLLECTIVE_E2E, *TRANSFER_PATHS)
ALL_METRICS = (*PER_CHIP_GAUGES, *DISTRIBUTIONS)
DEVICE_ID_KEY = "device-id"
