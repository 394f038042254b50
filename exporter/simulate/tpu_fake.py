"""The simulated TPU host: libtpu's runtime metric service, the GKE device plugin and /dev.

`start(hardware)` serves a scenario's ``tpu`` section (see tpu_scenario.py):

- a real gRPC server on 127.0.0.1 speaking ``tpu.monitoring.runtime.RuntimeMetricService``
  (the descriptors of `backends.tpu.proto`), with local credentials as libtpu; a
  `delays` rule makes it answer a metric late (a hung libtpu), an `errors` rule fail;
- optionally an HTTP endpoint with the device plugin's Prometheus metrics;
- a folder standing for ``/dev`` (``vfio/<group>`` or ``accel<N>`` files) and one
  for ``/sys`` (the chips' PCI devices, IOMMU groups or accel class links).

It re-reads the saved scenario (``hardware.scenario_path``) when it changes, so
`SimulatedHardware.update` and `modify` reach it. The chips' device files are
created once, at start.
"""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Mapping
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import grpc

from ..backends.tpu import proto
from ..backends.tpu.chips import DEV_DIR_ENV, GOOGLE_PCI_VENDOR, SYSFS_DIR_ENV, find_chips
from ..backends.tpu.device_plugin import ADDRESS_ENV
from ..backends.tpu.runtime import PORTS_ENV
from .delays import pass_delay
from .saved import SavedScenario, scenario_time
from .signals import counter_at, value_at
from .tpu_scenario import WILDCARD

if TYPE_CHECKING:
    from . import SimulatedHardware

# latency key of the scenario -> libtpu distribution
LATENCY_METRICS: dict[str, str] = {
    "collective_e2e": proto.COLLECTIVE_E2E,
    "dcn_outbound": proto.DCN_TRANSFER,
    "dcn_inbound": proto.DCN_INBOUND,
    "host_to_device": proto.HOST_TO_DEVICE,
    "device_to_host": proto.DEVICE_TO_HOST,
}
# Device files opened by `open_chips`, held until the process exits (as libtpu holds them).
_HELD_CHIP_FILES: list[int] = []
# The bucket layout the fake reports: exponential, 1 us doubling, 24 finite buckets.
BUCKET_SCALE_US, BUCKET_GROWTH, FINITE_BUCKETS = 1.0, 2.0, 24
TAIL_SHARE = 0.1  # observations one bucket above the latency, for a visible tail


class _Scenario:
    """The saved scenario's ``tpu`` section and clock, re-read when the file changes."""

    def __init__(self, path: pathlib.Path) -> None:
        # looked at on every request, so a change is served from the next call on
        self._saved = SavedScenario(path, recheck_s=0)

    def current(self) -> tuple[dict[str, Any], float]:
        """(tpu section, scenario time t); an empty section while there is none to read."""
        try:
            document = self._saved.document()
        except (OSError, ValueError):
            return {}, 0.0
        return document.get("scenario", {}).get("tpu") or {}, scenario_time(document)


def _gauge_metric(chip: int, value: float, as_int: bool) -> Any:
    gauge = proto.Gauge(as_int=int(value)) if as_int else proto.Gauge(as_double=float(value))
    return proto.Metric(attribute=proto.Attribute(key=proto.DEVICE_ID_KEY,
                                                  value=proto.AttrValue(int_attr=chip)),
                        gauge=gauge)


def bucket_counts(count: int, latency_us: float) -> list[int]:
    """Cumulative bucket counts: most observations in the latency's bucket, a tail above."""
    buckets = [0] * (FINITE_BUCKETS + 2)
    if latency_us < BUCKET_SCALE_US:
        index = 0
    else:
        index = min(int(math.log(latency_us / BUCKET_SCALE_US, BUCKET_GROWTH)) + 1,
                    FINITE_BUCKETS + 1)
    tail = int(count * TAIL_SHARE)
    buckets[index] += count - tail
    buckets[min(index + 1, FINITE_BUCKETS + 1)] += tail
    return buckets


def _distribution_metric(count: int, latency_us: float) -> Any:
    options = {"exponential_buckets": {"num_finite_buckets": FINITE_BUCKETS,
                                       "growth_factor": BUCKET_GROWTH,
                                       "scale": BUCKET_SCALE_US}}
    buckets = bucket_counts(count, latency_us)
    size = proto.Attribute(key="buffer-size", value=proto.AttrValue(string_attr="8MB+"))
    return proto.Metric(
        attribute=proto.Attribute(key="", value=proto.AttrValue(
            kvlist_attr=proto.KeyValueList(attributes=[size]))),
        distribution=proto.Distribution(count=count, mean=latency_us, bucket_options=options,
                                        bucket_counts=buckets))


def runtime_metrics(section: Mapping[str, Any], name: str, t: float) -> list[Any] | None:
    """The ``Metric`` entries for `name` at time t; None for a metric libtpu lacks."""
    chips = section.get("chips", [])
    per_chip = {
        proto.HBM_USAGE: ("hbm_used_bytes", True),
        proto.HBM_TOTAL: ("hbm_total_bytes", True),
        proto.DUTY_CYCLE: ("duty_cycle_percent", False),
        proto.HBM_BANDWIDTH: ("hbm_bandwidth_percent", False),
    }
    if name in per_chip:
        key, as_int = per_chip[name]
        return [_gauge_metric(i, value_at(chip[key], t), as_int)
                for i, chip in enumerate(chips) if chip.get(key) is not None]
    for key, metric in LATENCY_METRICS.items():
        if metric == name:
            latency = (section.get("latencies") or {}).get(key)
            if latency is None:
                return []
            return [_distribution_metric(counter_at(latency["count"], t),
                                         value_at(latency["latency_us"], t))]
    return None


def _matching(rules: Any, name: str, t: float) -> Mapping[str, Any] | None:
    """The first rule for metric `name` (or every metric) whose window holds t."""
    for rule in rules or ():
        until = rule.get("until_s")
        if (rule["metric"] in (name, WILDCARD) and rule["from_s"] <= t
                and (until is None or t < until)):
            return rule
    return None


def _failure(section: Mapping[str, Any], name: str, t: float) -> grpc.StatusCode | None:
    if not section.get("runtime_service", True):
        return grpc.StatusCode.UNAVAILABLE
    if name in section.get("unsupported_metrics", ()):
        return grpc.StatusCode.NOT_FOUND
    rule = _matching(section.get("errors"), name, t)
    return None if rule is None else grpc.StatusCode[rule["status"]]


class _Service:
    """The runtime metric service's two methods, answering from the scenario; each request
    also brings the chips' device files up to date with their `lost_at_s` (the agent asks
    every cycle before it looks at them)."""

    def __init__(self, scenario: _Scenario, root: pathlib.Path) -> None:
        self._scenario = scenario
        self._root = root
        self.asked: Counter[str] = Counter()  # GetRuntimeMetric requests by metric name

    def get_runtime_metric(self, request: Any, context: grpc.ServicerContext) -> Any:
        section, t = self._scenario.current()
        sync_lost_chips(self._root, section, t)
        name = request.metric_name
        self.asked[name] += 1
        delay = _matching(section.get("delays"), name, t)
        if delay is not None:
            pass_delay(delay)  # a hung libtpu: the caller's deadline may pass meanwhile
            section, t = self._scenario.current()
        failure = _failure(section, name, t)
        if failure is not None:
            context.abort(failure, f"simulated {failure.name} for {name}")
        metrics = runtime_metrics(section, name, t)
        if metrics is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"metric {name} not found")
        return proto.MetricResponse(metric=proto.TPUMetric(name=name, metrics=metrics))

    def list_supported_metrics(self, request: Any, context: grpc.ServicerContext) -> Any:
        section, _ = self._scenario.current()
        if not section.get("runtime_service", True):
            context.abort(grpc.StatusCode.UNAVAILABLE, "no TPU workload")
        names = [n for n in proto.ALL_METRICS if n not in section.get("unsupported_metrics", ())]
        return proto.ListSupportedMetricsResponse(
            supported_metric=[proto.SupportedMetric(metric_name=n) for n in names])

    def handler(self) -> grpc.GenericRpcHandler:
        """The gRPC handler serving both methods."""
        return grpc.method_handlers_generic_handler(proto.SERVICE, {
            "GetRuntimeMetric": grpc.unary_unary_rpc_method_handler(
                self.get_runtime_metric, request_deserializer=proto.MetricRequest.FromString,
                response_serializer=proto.MetricResponse.SerializeToString),
            "ListSupportedMetrics": grpc.unary_unary_rpc_method_handler(
                self.list_supported_metrics,
                request_deserializer=proto.ListSupportedMetricsRequest.FromString,
                response_serializer=proto.ListSupportedMetricsResponse.SerializeToString),
        })


def plugin_text(section: Mapping[str, Any], t: float) -> str:
    """The device plugin's /metrics: host metrics by host index, runtime ones slice-wide."""
    chips = section.get("chips", [])
    first = int(section.get("worker_id", 0)) * len(chips)  # this host's first slice-wide number
    base = {"make": "cloud-tpu", "model": section.get("device_plugin_model", ""),
            "tpu_topology": section.get("topology", "")}
    lines: list[str] = []
    series = (
        ("duty_cycle", "duty_cycle_percent", True),
        ("memory_used", "hbm_used_bytes", True),
        ("memory_total", "hbm_total_bytes", True),
        ("tensorcore_utilization", "tensorcore_utilization_percent", False),
        ("memory_bandwidth_utilization", "hbm_bandwidth_percent", False),
    )
    for name, key, slice_wide in series:
        lines.append(f"# TYPE {name} gauge")
        for i, chip in enumerate(chips):
            if chip.get(key) is None:
                continue
            number = first + i if slice_wide else i
            labels = {"accelerator_id": f"{section.get('accelerator_id', '0')}-{number}", **base}
            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {float(value_at(chip[key], t))!r}")
    return "\n".join(lines) + "\n"


def _plugin_server(scenario: _Scenario) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            section, t = scenario.current()
            if self.path != "/metrics" or not section.get("device_plugin", False):
                self.send_error(404 if self.path != "/metrics" else 503)
                return
            body = plugin_text(section, t).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="fake-tpu-plugin", daemon=True).start()
    return server


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """"00000000:00:04.0" (the scenario's form) -> "0000:00:04.0" (sysfs' form)."""
    domain, rest = nvml_bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def chip_file(root: pathlib.Path, section: Mapping[str, Any], chip: int) -> pathlib.Path:
    """The device file of chip number `chip` under root/dev."""
    if section.get("device_files", "vfio") == "vfio":
        return root / "dev" / "vfio" / str(chip)
    return root / "dev" / f"accel{chip}"


def sync_lost_chips(root: pathlib.Path, section: Mapping[str, Any], t: float) -> None:
    """Removes the device file of each chip lost by scenario time t (`lost_at_s`), and puts
    back that of one not lost (yet, or any more: the scenario changed)."""
    for i, chip in enumerate(section.get("chips", [])):
        if chip.get("lost_at_s") is None:
            continue
        path = chip_file(root, section, i)
        if t >= chip["lost_at_s"]:
            path.unlink(missing_ok=True)
        else:
            path.touch(exist_ok=True)


def build_host_files(root: pathlib.Path, section: Mapping[str, Any]) -> None:
    """Writes root/dev (the chips' device files) and root/sys (their PCI devices)."""
    dev, sys = root / "dev", root / "sys"
    pci = sys / "bus" / "pci" / "devices"
    pci.mkdir(parents=True)
    (dev / "vfio").mkdir(parents=True)
    if section.get("device_files", "vfio") == "vfio":
        (dev / "vfio" / "vfio").touch()  # the container node, not a group
    for i, chip in enumerate(section.get("chips", [])):
        bus_id = sysfs_bus_id(chip["pci_bus_id"])
        device = pci / bus_id
        device.mkdir()
        (device / "vendor").write_text(GOOGLE_PCI_VENDOR + "\n")
        (device / "device").write_text(section.get("pci_device_id", "0x0063") + "\n")
        (device / "subsystem_device").write_text("0x0000\n")
        (device / "numa_node").write_text(f"{chip.get('numa_node', 0)}\n")
        chip_file(root, section, i).touch()
        if section.get("device_files", "vfio") == "vfio":
            members = sys / "kernel" / "iommu_groups" / str(i) / "devices"
            members.mkdir(parents=True)
            (members / bus_id).symlink_to(device)
        else:
            accel = sys / "class" / "accel" / f"accel{i}"
            accel.mkdir(parents=True)
            (accel / "device").symlink_to(device)


class TpuFake:
    """The running fake of one simulated TPU host (a `FamilyFake`)."""

    def __init__(self, hardware: SimulatedHardware) -> None:
        self._scenario = _Scenario(hardware.scenario_path)
        section, _ = self._scenario.current()
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="fake-tpu-"))
        self._grpc: grpc.Server | None = None
        self._plugin: ThreadingHTTPServer | None = None
        try:
            build_host_files(self.root, section)
            self.service = _Service(self._scenario, self.root)
            self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            self._grpc.add_generic_rpc_handlers((self.service.handler(),))
            self.port = self._grpc.add_secure_port(
                "127.0.0.1:0", grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP))
            self._grpc.start()
            if section.get("device_plugin", False):
                self._plugin = _plugin_server(self._scenario)
            self._slice = {
                "TPU_NAME": section.get("slice_name", ""),
                "TPU_WORKER_ID": str(section.get("worker_id", 0)),
                "TPU_TOPOLOGY": section.get("topology", ""),
                "TPU_ACCELERATOR_TYPE": section.get("accelerator_type", ""),
            }
        except BaseException:
            self.close()
            raise

    @property
    def plugin_address(self) -> str:
        """``127.0.0.1:<port>`` of the device plugin endpoint, "" when not served."""
        return f"127.0.0.1:{self._plugin.server_address[1]}" if self._plugin else ""

    def environ(self) -> dict[str, str]:
        """Variables pointing the TPU backend (and Ray's TPU labels) at this host."""
        variables = {
            DEV_DIR_ENV: str(self.root / "dev"),
            SYSFS_DIR_ENV: str(self.root / "sys"),
            PORTS_ENV: str(self.port),
            **{k: v for k, v in self._slice.items() if v},
        }
        if self._plugin is not None:
            variables[ADDRESS_ENV] = self.plugin_address
        return variables

    def activate(self) -> None:
        """Makes this process's TPU backend read this host."""
        os.environ.update(self.environ())

    def close(self) -> None:
        """Stops the servers and removes the files."""
        if self._grpc is not None:
            self._grpc.stop(None)
            self._grpc = None
        if self._plugin is not None:
            self._plugin.shutdown()
            self._plugin.server_close()
            self._plugin = None
        shutil.rmtree(self.root, ignore_errors=True)


def start(hardware: SimulatedHardware) -> TpuFake:
    """Starts the fake TPU host of `hardware`'s scenario."""
    return TpuFake(hardware)


def open_chips() -> list[str]:
    """Opens this process's visible simulated TPU chips, as libtpu does; returns their files.

    The chips come from TPU_VISIBLE_CHIPS (which Ray sets for a worker holding
    ``TPU``); with it unset, every chip is opened. The files stay open until the
    process exits, so the TPU backend lists this process on those chips.
    """
    chips = find_chips()
    visible = os.environ.get("TPU_VISIBLE_CHIPS")
    if visible is not None:
        wanted = {int(e) for e in visible.split(",") if e.strip().isdigit()}
        chips = [c for c in chips if c.index in wanted]
    for chip in chips:
        _HELD_CHIP_FILES.append(os.open(chip.path, os.O_RDONLY))
    return [c.path for c in chips]
