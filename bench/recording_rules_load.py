"""What the cluster recording rules cost a real Prometheus that scrapes N nodes x 8 devices.

A local HTTP target serves the device series the rules read (general utilization,
memory in use, power, device up, one allocation and its idle flag per device; the
labels the agents give them), /usr/bin/prometheus scrapes it every 10 s (the interval
of deploy/prometheus/prometheus.yml) and evaluates the generated recording group
(grafana/generated/prometheus/ray-accel-recording.yml) every 10 s, from its head
block as in production. Once the group has run a few times this reads, every
interval for `--seconds`: the group's evaluation time
(`prometheus_rule_group_last_duration_seconds`), the scrape's duration, and
Prometheus' CPU and resident memory from /proc. Run by hand:

    .venv/bin/python bench/recording_rules_load.py --nodes 1000 10000

It prints a Markdown table; its figures are in docs/benchmarks.md, section 5.
"""

from __future__ import annotations

import argparse
import http.server
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from ray_accel.grafana.alerts.recording import GROUP_NAME, INTERVAL_S, PRESENCE_PART, record_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from history_queries import DEVICES_PER_NODE, device_series
from measure import process_cpu_s
from prometheus_server import PrometheusServer, wait_until

RULES = Path(__file__).resolve().parents[1] / "grafana" / "generated" / "prometheus" / \
    "ray-accel-recording.yml"
WARM_ITERATIONS = 3


def exposition(nodes: int) -> bytes:
    """The device series of `nodes` x 8 devices, as the agents label them (one scrape)."""
    return "".join(device_series(nodes * DEVICES_PER_NODE, range(1))).encode()


class _Target(http.server.ThreadingHTTPServer):
    """Serves one exposition body at any path."""

    daemon_threads = True

    def __init__(self, body: bytes) -> None:
        self.body = body

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def _proc(pid: int) -> tuple[float, float]:
    """(CPU seconds so far, resident MiB) of `pid`."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = int(status.split("VmRSS:")[1].split()[0])
    return process_cpu_s(pid), rss_kib / 1024


def _value(prom: PrometheusServer, expr: str) -> float | None:
    result = prom.query(expr)
    return float(result[0]["value"][1]) if result else None


def _own(prom: PrometheusServer, name: str) -> float | None:
    """Prometheus' own metric `name` of the recording group, from its /metrics."""
    with urllib.request.urlopen(f"{prom.url}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + "{") and f';{GROUP_NAME}"' in line:
                return float(line.rsplit(" ", 1)[1])
    return None


def measure(nodes: int, seconds: float, rules: Path = RULES) -> dict[str, float]:
    body = exposition(nodes)
    target = _Target(body)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    interval = f"{INTERVAL_S:g}s"
    config = (f"global: {{scrape_interval: {interval}, evaluation_interval: {interval}, "
              f"scrape_timeout: {interval}}}\n"
              f"rule_files: [{RULES.name}]\n"
              "scrape_configs:\n"
              "  - job_name: fleet\n"
              f"    static_configs: [{{targets: ['127.0.0.1:{target.server_address[1]}']}}]\n")
    try:
        with tempfile.TemporaryDirectory(prefix="rules-bench-") as folder, PrometheusServer(
                config, Path(folder), rule_files={RULES.name: rules.read_text()},
                start_timeout_s=120) as prom:
            presence = record_name(PRESENCE_PART)
            wait_until(lambda: prom.query(presence), "the recorded series", timeout=600)
            wait_until(lambda: (_own(prom, "prometheus_rule_group_iterations_total") or 0)
                       >= WARM_ITERATIONS, "warm rule iterations", timeout=600)
            assert prom.process is not None
            cpu_before, _ = _proc(prom.process.pid)
            began = time.monotonic()
            durations, scrapes = [], []
            while time.monotonic() - began < seconds:
                time.sleep(INTERVAL_S)
                durations.append(_own(prom, "prometheus_rule_group_last_duration_seconds"))
                scrapes.append(_value(prom, 'scrape_duration_seconds{job="fleet"}'))
            cpu_after, rss = _proc(prom.process.pid)
            wall = time.monotonic() - began
            devices = _value(prom, f"sum({record_name('utilization_count')})")
    finally:
        target.shutdown()
        target.server_close()
    return {"nodes": nodes, "series": body.count(b"\n") - 6, "body_mib": len(body) / 2**20,
            "rules_s": statistics.median(d for d in durations if d is not None),
            "rules_max_s": max(d for d in durations if d is not None),
            "scrape_s": statistics.median(s for s in scrapes if s is not None),
            "cpu_share": (cpu_after - cpu_before) / wall, "rss_mib": rss,
            "devices_recorded": devices or 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rules", type=Path, default=RULES,
                        help="the recording rules file (the generated one)")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", file=sys.stderr)
    print("| Nodes x 8 devices | Series scraped (body) | Scrape | Rule group evaluation "
          "(median / max) | Prometheus CPU (scrapes, rules, head) | Prometheus memory |")
    print("|---|---|---|---|---|---|")
    for nodes in args.nodes:
        f = measure(nodes, args.seconds, args.rules)
        assert f["devices_recorded"] == nodes * DEVICES_PER_NODE, f
        print(f"| {nodes:,} x 8 | {f['series']:,} ({f['body_mib']:.0f} MiB) | "
              f"{f['scrape_s'] * 1000:.0f} ms | {f['rules_s'] * 1000:.0f} / "
              f"{f['rules_max_s'] * 1000:.0f} ms | {f['cpu_share']:.2f} core | "
              f"{f['rss_mib']:.0f} MiB |", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
