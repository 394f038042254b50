"""Agent registration in the GCS and the Prometheus discovery file.

The record format, staleness and the discovery file are checked on their own;
then a standalone `ray-accel agent` registers in a real one-node Ray cluster
(token auth on), heart-beats, and deletes its record on a clean stop, while a
killed agent's record goes stale and drops out of `status` and `sd-file`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from agent_process import AgentProcess
from loopback_ray import LoopbackCluster
from ray._raylet import AuthenticationTokenLoader

from ray_accel.exporter.attribution.ray_sources import RaySourceError
from ray_accel.exporter.cluster.deploy import other_versions
from ray_accel.exporter.cluster.gcs import ClusterGcs
from ray_accel.exporter.cluster.registry import (
    MISSED_HEARTBEATS,
    NAMESPACE,
    STALE_MARGIN_S,
    AgentRecord,
    AgentRegistry,
    advertised_url,
    loopback_only,
)
from ray_accel.exporter.cluster.sd_file import FILE_NAME, render, write_atomically, write_sd_file

NOW = 1_700_000_000.0


def record(node: str = "aa", port: int = 9478, heartbeat_at: float = NOW, **changes) -> AgentRecord:
    base = AgentRecord(node_id=node * 28, node_ip="127.0.0.1", url=f"http://127.0.0.1:{port}",
                       pid=4242, hostname="gpu-node-1", started_at=NOW - 60,
                       heartbeat_at=heartbeat_at, heartbeat_s=10.0, simulated=True,
                       deployed=False, version="0.1.0")
    return replace(base, **changes)


class MemoryGcs:
    """The key-value part of ClusterGcs, in memory."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], bytes] = {}

    def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        self.data[(namespace, key)] = value

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        return self.data.get((namespace, key))

    def kv_delete(self, namespace: str, key: str) -> bool:
        return self.data.pop((namespace, key), None) is not None

    def kv_items(self, namespace: str, prefix: str) -> dict[str, bytes]:
        return {key: value for (ns, key), value in self.data.items()
                if ns == namespace and key.startswith(prefix)}


# ------------------------------------------------------------------ records


def test_record_round_trips_and_knows_its_target():
    original = record()
    assert AgentRecord.from_json(original.to_json()) == original
    assert original.target == "127.0.0.1:9478"
    assert original.key == "agent/" + "aa" * 28
    # Fields a newer agent adds are ignored; a record missing fields is refused.
    doc = json.loads(original.to_json()) | {"gpu_count": 8}
    assert AgentRecord.from_json(json.dumps(doc).encode()) == original
    for bad in (b"not json", b"[1, 2]", json.dumps({"node_id": "x"}).encode()):
        with pytest.raises(ValueError, match="not an agent record"):
            AgentRecord.from_json(bad)


def test_a_record_is_live_until_it_misses_heartbeats():
    fresh = record()
    limit = MISSED_HEARTBEATS * fresh.heartbeat_s + STALE_MARGIN_S
    assert fresh.is_live(NOW + limit)
    assert not fresh.is_live(NOW + limit + 0.1)
    assert fresh.age_s(NOW + 12) == 12


def test_advertised_url_uses_the_node_ip_for_wildcard_hosts():
    assert advertised_url("0.0.0.0", 9478, "10.0.0.7") == "http://10.0.0.7:9478"
    assert advertised_url("::", 9478, "fd00::7") == "http://[fd00::7]:9478"
    assert advertised_url("127.0.0.1", 1234, "10.0.0.7") == "http://127.0.0.1:1234"


def test_agents_running_another_version_than_the_deploy_command_are_named():
    agents = [record("aa"), record("bb", version="0.2.0"), record("cc", version="0.1.0"),
              record("dd", version="unknown"), record("ee", version="0.0.9")]
    assert other_versions(agents, "0.2.0") == {"0.1.0": ["aa" * 28, "cc" * 28],
                                               "0.0.9": ["ee" * 28]}
    assert other_versions(agents[:1], "0.1.0") == {}


@pytest.mark.parametrize(("url", "node_ip", "only"), [
    ("http://127.0.0.1:9478", "10.0.0.5", True), ("http://[::1]:9478", "10.0.0.5", True),
    ("http://localhost:9478", "10.0.0.5", True), ("http://10.0.0.5:9478", "10.0.0.5", False),
    ("http://127.0.0.1:9478", "127.0.0.1", False)])  # a one-host cluster reaches it
def test_a_loopback_url_on_a_node_reached_elsewhere_is_told_apart(url, node_ip, only):
    assert loopback_only(url, node_ip) is only


def test_registry_register_heartbeat_delete():
    registry = AgentRegistry(MemoryGcs())
    first, second = record("aa"), record("bb", port=9479, heartbeat_at=NOW - 3600)
    registry.put(first)
    registry.put(second)
    assert registry.records() == [first, second]
    assert registry.live(NOW + 1) == [first]

    beat = replace(first, heartbeat_at=NOW + 10)
    registry.put(beat)  # a heartbeat overwrites the node's record
    assert registry.get(first.node_id) == beat

    assert not registry.remove(first.node_id, pid=999)  # someone else's by now: kept
    assert registry.remove(first.node_id, pid=first.pid)
    assert registry.get(first.node_id) is None
    assert registry.remove(second.node_id)
    assert registry.records() == []


def test_unreadable_entries_are_skipped():
    gcs = MemoryGcs()
    registry = AgentRegistry(gcs)
    registry.put(record())
    gcs.kv_put(NAMESPACE, "agent/garbage", b"{")
    assert registry.records() == [record()]


# ------------------------------------------------------------- discovery file


def test_sd_file_lists_only_live_agents(tmp_path):
    path = tmp_path / FILE_NAME
    live, dead = record("aa", heartbeat_at=time.time()), record("bb", heartbeat_at=0.0)
    assert write_sd_file(path, [dead, live])
    assert json.loads(path.read_text()) == [
        {"targets": ["127.0.0.1:9478"], "labels": {"job": "ray-accel", "ray_node_id": "aa" * 28}}
    ]
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_sd_file_is_replaced_atomically_and_only_on_change(tmp_path):
    path = tmp_path / FILE_NAME
    assert write_atomically(path, render([]))
    inode = path.stat().st_ino
    assert not write_atomically(path, render([]))  # same content: untouched
    assert path.stat().st_ino == inode
    assert write_atomically(path, render([record()]))
    # A new file renamed over the old one, never the old one rewritten in place.
    assert path.stat().st_ino != inode
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]


def test_sd_file_in_a_missing_folder_fails_and_leaves_nothing(tmp_path):
    with pytest.raises(OSError):
        write_atomically(tmp_path / "missing" / FILE_NAME, "[]")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------ against Ray


@pytest.fixture(scope="module")
def cluster() -> Iterator[LoopbackCluster]:
    local = LoopbackCluster(prefix="rg-")
    patch = pytest.MonkeyPatch()
    auth_mode = os.environ.get("RAY_AUTH_MODE")  # ClusterGcs turns token mode on
    try:
        local.start_head(None, "--num-cpus=0", "--num-gpus=0")
        patch.setenv("RAY_AUTH_TOKEN_PATH", str(local.token))
        AuthenticationTokenLoader.instance().reset_cache()
        yield local
    finally:
        local.stop()
        patch.undo()
        os.environ.pop("RAY_AUTH_MODE", None)
        if auth_mode is not None:
            os.environ["RAY_AUTH_MODE"] = auth_mode
        AuthenticationTokenLoader.instance().reset_cache()


@pytest.fixture
def registry(cluster: LoopbackCluster) -> Iterator[AgentRegistry]:
    with ClusterGcs(cluster.gcs_address) as gcs:
        yield AgentRegistry(gcs)


def cli(cluster: LoopbackCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", *args],
                          env=cluster.env, capture_output=True, text=True, timeout=120)


def wait_for(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while (value := check()) is None or value is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.2)
    return value


@pytest.mark.ray
def test_gcs_key_value_store(cluster: LoopbackCluster):
    with ClusterGcs(cluster.gcs_address) as gcs:
        gcs.kv_put("ray_accel_test", "k/1", b"one")
        gcs.kv_put("ray_accel_test", "k/2", b"two")
        gcs.kv_put("ray_accel_test", "other", b"x")
        assert gcs.kv_get("ray_accel_test", "k/1") == b"one"
        assert gcs.kv_items("ray_accel_test", "k/") == {"k/1": b"one", "k/2": b"two"}
        assert gcs.kv_delete("ray_accel_test", "k/1")
        assert not gcs.kv_delete("ray_accel_test", "k/1")
        assert gcs.kv_get("ray_accel_test", "k/1") is None
        (head,) = gcs.nodes()
        assert head.is_head and head.alive and head.node_ip == "127.0.0.1"
        assert Path(head.session_dir).is_dir()


@pytest.mark.ray
def test_an_agent_that_stopped_on_a_live_node_stays_watched(registry: AgentRegistry):
    """A killed agent's record goes stale; while Ray lists its node as alive the cluster view
    keeps following it (its node stays in view, unreachable), while a stale record of a node
    Ray does not list (scaled down) is left out, and live records are all kept."""
    (head,) = registry.gcs.nodes(alive_only=True)
    now = time.time()
    stale = now - (MISSED_HEARTBEATS * 10.0 + STALE_MARGIN_S + 60)
    on_live_node = record(port=9001, heartbeat_at=stale, node_id=head.node_id)
    on_gone_node = record("bb", port=9002, heartbeat_at=stale)
    heart_beating = record("cc", port=9003, heartbeat_at=now)
    for each in (on_live_node, on_gone_node, heart_beating):
        registry.put(each)
    try:
        watched = {r.url for r in registry.watched(now)}
        assert watched == {on_live_node.url, heart_beating.url}
        assert {r.url for r in registry.live(now)} == {heart_beating.url}
    finally:
        for each in (on_live_node, on_gone_node, heart_beating):
            registry.remove(each.node_id)


@pytest.mark.ray
def test_gcs_without_the_token_is_refused(cluster: LoopbackCluster, monkeypatch, tmp_path):
    wrong = tmp_path / "token"
    wrong.write_text("0" * 32)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(wrong))
    AuthenticationTokenLoader.instance().reset_cache()
    try:
        with ClusterGcs(cluster.gcs_address) as gcs, \
                pytest.raises(RaySourceError, match="authentication token"):
            gcs.kv_get(NAMESPACE, "anything")
    finally:
        monkeypatch.undo()
        AuthenticationTokenLoader.instance().reset_cache()


def _agent(cluster: LoopbackCluster) -> AgentProcess:
    return AgentProcess("--simulate", "l4-pcie", "--ray-address", cluster.gcs_address,
                        "--register-interval", "0.5", env=cluster.env, ray=True)


@pytest.mark.ray
def test_standalone_agent_registers_heartbeats_and_deregisters(cluster, registry):
    with _agent(cluster) as agent:
        pid = agent.proc.pid
        first = wait_for(lambda: next((r for r in registry.records() if r.pid == pid), None),
                         "the agent registered")
        assert first.url == agent.url and not first.deployed and first.simulated
        assert first.node_ip == "127.0.0.1" and first.heartbeat_s == 0.5
        later = wait_for(lambda: (r := registry.get(first.node_id)).heartbeat_at
                         > first.heartbeat_at and r, "a heartbeat")
        assert later.started_at == first.started_at

        status = json.loads(cli(cluster, "status", "--address", cluster.gcs_address,
                                "--json").stdout)
        assert [(r["url"], r["health"], r["deployed"]) for r in status] == [
            (agent.url, "ok", False)]
    # SIGTERM: a clean stop removes the record.
    assert registry.get(first.node_id) is None


@pytest.mark.ray
def test_a_second_agent_of_a_node_stays_unregistered_until_the_first_stops(cluster, registry):
    first = _agent(cluster).__enter__()
    try:
        held = wait_for(lambda: next((r for r in registry.records()
                                      if r.pid == first.proc.pid), None), "the first registered")
        with _agent(cluster) as second:
            # a few of the second agent's 0.5 s heartbeats later, the node is still the first's
            wait_for(lambda: registry.get(held.node_id).heartbeat_at > held.heartbeat_at + 2,
                     "the first agent's heartbeats go on")
            assert registry.get(held.node_id).pid == first.proc.pid
            first.__exit__()  # a clean stop deletes its record: the second takes the node
            wait_for(lambda: (r := registry.get(held.node_id)) and r.pid == second.proc.pid,
                     "the second agent registered once the first stopped")
        log = second.proc.stdout.read()
        assert f"node {held.node_id} already has a live agent (pid {first.proc.pid}" in log
    finally:
        first.__exit__()


@pytest.mark.ray
def test_killed_agent_goes_stale_and_leaves_discovery(cluster, registry, tmp_path):
    with _agent(cluster) as agent:
        record = wait_for(lambda: next(iter(registry.records()), None), "registered")
        output = tmp_path / "targets.json"
        result = cli(cluster, "sd-file", "--address", cluster.gcs_address, "--output", str(output))
        assert result.returncode == 0, result.stderr
        assert json.loads(output.read_text())[0]["targets"] == [record.target]
        os.kill(agent.proc.pid, signal.SIGKILL)
        agent.proc.wait()
    try:
        last = registry.get(record.node_id)
        assert last is not None  # nobody deleted it...
        # Stale counted from the last heartbeat the agent wrote before it was killed, which
        # may be later than the one first read (sd-file can take heartbeats' time under load).
        stale = MISSED_HEARTBEATS * last.heartbeat_s + STALE_MARGIN_S
        time.sleep(max(last.heartbeat_at + stale + 0.5 - time.time(), 0))
        rows = json.loads(cli(cluster, "status", "--address", cluster.gcs_address,
                              "--json").stdout)
        assert [r["health"] for r in rows] == ["stale registration"]  # ...but it is stale
        assert cli(cluster, "sd-file", "--address", cluster.gcs_address,
                   "--output", str(output)).returncode == 0
        assert json.loads(output.read_text()) == []
    finally:
        registry.remove(record.node_id)


@pytest.mark.ray
def test_sd_file_defaults_next_to_rays_own_on_the_head(cluster, registry):
    result = cli(cluster, "sd-file", "--address", cluster.gcs_address)
    assert result.returncode == 0, result.stderr
    session_dir = (cluster.root / "ray" / "session_latest").resolve()
    assert f"wrote 0 target(s) to {session_dir / FILE_NAME}" in result.stdout
    assert json.loads((session_dir / FILE_NAME).read_text()) == []


@pytest.mark.ray
def test_sd_file_prints_the_matching_scrape_job(cluster, registry, tmp_path):
    output = tmp_path / "targets.json"
    result = cli(cluster, "sd-file", "--address", cluster.gcs_address, "--output", str(output),
                 "--print-scrape-job", "--token-file", str(cluster.token))
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout.split("\n", 1)[1])
    (job,) = printed["scrape_configs"]
    assert job["file_sd_configs"] == [{"files": [str(output)]}]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": str(cluster.token)}
