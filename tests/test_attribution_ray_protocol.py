"""The agent speaks Ray's protocol without importing Ray: checked here against Ray itself.

The attribution modules replicate what the agent used to import from Ray
(addresses, the temp dir, raylet detection, placement-group names, gRPC
connection options, the token lookup, the State API query, the generated
messages). Each test compares the replica with Ray 2.60's own function on the
same inputs, so a Ray upgrade that changes one of them fails here first. The
end-to-end behaviour (a real token-auth cluster) is in test_attribution_ray_sources.py and
test_attribution_ray.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse

import pytest
import ray._common.network_utils as ray_network
from ray._common.utils import get_default_ray_temp_dir
from ray._private import ray_constants, services
from ray._private import utils as ray_utils

from ray_accel.exporter.attribution import (
    ray_addresses,
    ray_grpc,
    ray_records,
    ray_token,
    state_api,
)
from ray_accel.exporter.attribution.ray_sources import (
    _DASHBOARD_ADDRESS_KEY,
    _DASHBOARD_NAMESPACE,
)
from ray_accel.exporter.attribution.raylet_discovery import is_raylet

ADDRESSES = ["10.1.2.3:6379", "[::1]:6379", "[fe80::1]:1", "head-0.svc:80", "::1:6379",
             "nocolon", "[::1]", ":6379", "host:", "a:b:c", "[]:1", "[::1]:", "[::1]:1:2",
             "[a]b:1", ":"]


@pytest.mark.parametrize("address", ADDRESSES)
def test_addresses_parse_as_ray_parses_them(address):
    assert ray_addresses.parse_address(address) == ray_network.parse_address(address)


@pytest.mark.parametrize("host,port", [("10.0.0.1", 1), ("::1", 6379), ("fe80::2", "80"),
                                       ("head", "6379")])
def test_addresses_are_built_as_ray_builds_them(host, port):
    assert ray_addresses.build_address(host, port) == ray_network.build_address(host, port)


@pytest.mark.parametrize("address", ["localhost:6379", "127.0.0.1:1", "[::1]:2",
                                     "10.9.8.7:3", "head:4"])
def test_loopback_addresses_become_this_nodes_ip_as_in_ray(address, monkeypatch):
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    assert ray_addresses.canonical(address) == services.canonicalize_bootstrap_address(address)


def test_a_cluster_kept_on_one_machine_keeps_loopback(monkeypatch):
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    assert ray_addresses.canonical("localhost:6379") == \
        services.canonicalize_bootstrap_address("localhost:6379") == "127.0.0.1:6379"


@pytest.mark.parametrize("env", [{}, {"TMPDIR": "/var/tmp/x"}, {"RAY_TMPDIR": "/data/r"},
                                 {"RAY_TMPDIR": "/data/r", "TMPDIR": "/var/tmp/x"}])
def test_ray_temp_dir_and_recorded_address_as_in_ray(env, monkeypatch, tmp_path):
    for name in ("RAY_TMPDIR", "TMPDIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ray_addresses.default_temp_dir() == get_default_ray_temp_dir()
    assert ray_addresses.recorded_address(str(tmp_path)) is None
    (tmp_path / "ray_current_cluster").write_text(" 10.0.0.5:6379\n")
    assert ray_addresses.recorded_address(str(tmp_path)) == \
        services.find_bootstrap_address(str(tmp_path)) == "10.0.0.5:6379"


@pytest.mark.parametrize("cmdline", [
    ["/site-packages/ray/core/src/ray/raylet/raylet", "--node_id=ab"], ["raylet"],
    ["/usr/bin/python", "raylet"], ["/opt/bin/my-raylet-wrapper"], [""], [],
])
def test_raylets_are_told_as_ray_tells_them(cmdline):
    assert is_raylet(cmdline) == services._is_raylet_process(cmdline)


@pytest.mark.parametrize("name", ["GPU", "GPU_group_0_abc123", "GPU_group_abc123",
                                  "bundle_group_abc123", "bundle_group_1_abc123",
                                  "my_group", "memory"])
def test_placement_group_resource_names_as_in_ray(name):
    indexed = ray_utils.PLACEMENT_GROUP_INDEXED_BUNDLED_RESOURCE_PATTERN.fullmatch(name)
    wildcard = ray_utils.PLACEMENT_GROUP_WILDCARD_RESOURCE_PATTERN.fullmatch(name)
    expected = None if indexed else (name if wildcard is None else (
        None if wildcard.group(1) == "bundle" else wildcard.group(1)))
    assert ray_records._base_resource(name) == expected


def test_connections_open_with_rays_options(monkeypatch):
    import ray

    options = ray_grpc.connection_options()
    assert options.max_message_bytes == ray_constants.GRPC_CPP_MAX_MESSAGE_SIZE
    assert options.use_proxy == bool(ray_constants.GRPC_ENABLE_HTTP_PROXY)
    assert options.idle_reconnect_s == ray._config.grpc_client_keepalive_time_ms() / 1000
    monkeypatch.setenv("RAY_grpc_client_keepalive_time_ms", "1234")
    monkeypatch.setenv("RAY_grpc_enable_http_proxy", "1")
    options = ray_grpc.connection_options()
    assert options.idle_reconnect_s == 1.234 and options.use_proxy


def test_the_dashboard_is_found_under_rays_key():
    assert ray_constants.DASHBOARD_ADDRESS.encode() == _DASHBOARD_ADDRESS_KEY
    assert ray_constants.KV_NAMESPACE_DASHBOARD == _DASHBOARD_NAMESPACE


@pytest.mark.parametrize("timeout_s", [0.2, 1.0, 2.0, 5.0, 7.4])
def test_state_api_query_is_the_one_rays_client_sends(timeout_s):
    import requests
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import ListApiOptions

    filters = [("node_id", "=", "ab12"), ("state", "=", "RUNNING"), ("state", "!=", "FAILED")]
    options = ListApiOptions(limit=10_000, timeout=max(1, round(timeout_s)), detail=True,
                             filters=filters)
    theirs = requests.Request("GET", "http://h/api/v0/tasks",
                              params=StateApiClient._make_param(options)).prepare().url
    ours = state_api.task_query(filters, 10_000, timeout_s, detail=True)
    assert urllib.parse.parse_qs(ours) == urllib.parse.parse_qs(theirs.partition("?")[2])


# Each case: environment (HOME is the test's folder) and token files to write there.
TOKEN_CASES = {
    "none": ({}, {}),
    "home file": ({}, {".ray/auth_token": "  tok-home \nsecond line\n"}),
    "path file wins over home": ({"RAY_AUTH_TOKEN_PATH": "{home}/t"},
                                 {"t": "tok-path\n", ".ray/auth_token": "tok-home"}),
    "variable wins over files": ({"RAY_AUTH_TOKEN": " tok-env\t",
                                  "RAY_AUTH_TOKEN_PATH": "{home}/t"},
                                 {"t": "tok-path", ".ray/auth_token": "tok-home"}),
    "mode disabled": ({"RAY_AUTH_MODE": "disabled"}, {".ray/auth_token": "tok-home"}),
    "mode token": ({"RAY_AUTH_MODE": "token"}, {".ray/auth_token": "tok-home"}),
    "blank variable": ({"RAY_AUTH_TOKEN": "   "}, {".ray/auth_token": "tok-home"}),
}

_RAYS_TOKEN = """
import json, os
from ray._private.authentication.authentication_token_setup import (
    maybe_enable_token_auth_if_token_available)
from ray._raylet import AuthenticationTokenLoader
on = maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
header = AuthenticationTokenLoader.instance().get_token_for_http_header()
token = next(iter(header.values()), "").partition(" ")[2] if header else None
print(json.dumps([on, token or None, os.environ.get("RAY_AUTH_MODE")]))
"""


@pytest.mark.parametrize("case", TOKEN_CASES)
def test_token_is_found_as_rays_loader_finds_it(case, tmp_path, monkeypatch):
    variables, files = TOKEN_CASES[case]
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RAY_AUTH") and k != "RAY_ENABLE_K8S_TOKEN_AUTH"}
    env.update({k: v.format(home=tmp_path) for k, v in variables.items()}, HOME=str(tmp_path))
    rays = json.loads(subprocess.run([sys.executable, "-c", _RAYS_TOKEN], env=env,
                                     capture_output=True, text=True, check=True
                                     ).stdout.strip().splitlines()[-1])
    for name in list(os.environ):
        if name not in env:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ours = [ray_token.enable_if_token_available(), ray_token.current_token(),
            os.environ.get("RAY_AUTH_MODE")]
    assert ours == rays
    if case in ("home file", "path file wins over home", "variable wins over files",
                "mode token"):
        assert ours[1].startswith("tok-")


def test_a_token_file_is_read_again_only_when_it_changed(tmp_path, monkeypatch):
    path = tmp_path / "token"
    path.write_text("tok-one\n")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    opened = []

    def counting_open(*args, **kwargs):
        opened.append(args[0])
        return open(*args, **kwargs)

    monkeypatch.setattr(ray_token, "open", counting_open, raising=False)
    settled = ray_token.SETTLED_AFTER_NS / 1e9 + 0.2
    assert ray_token.current_token() == "tok-one"  # just written: read each time
    time.sleep(settled)
    assert [ray_token.current_token() for _ in range(3)] == ["tok-one"] * 3
    assert len(opened) == 2  # once while it was new, once when it had settled
    # Rotated in place to a token of the same length, its modification time put back:
    # its status time still moves, and the new token is sent.
    before = path.stat()
    path.write_text("tok-two\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    time.sleep(settled)
    assert ray_token.current_token() == "tok-two"
    assert len(opened) == 3
    path.unlink()  # gone: nothing is sent, and the token comes back with the file
    assert ray_token.current_token() is None
    path.write_text("tok-three")
    assert ray_token.current_token() == "tok-three"


def test_generated_messages_load_without_ray_and_match_rays():
    probe = """
import sys
from ray_accel.exporter.attribution.ray_generated import generated
service = generated("gcs_service_pb2")
request = service.GetAllNodeInfoRequest(limit=3, node_selectors=[
    service.GetAllNodeInfoRequest.NodeSelector(node_id=bytes.fromhex("ab12"))])
for name in ("gcs_pb2", "gcs_service_pb2_grpc", "node_manager_pb2", "node_manager_pb2_grpc",
             "common_pb2"):
    generated(name)
print("ray" in sys.modules, request.SerializeToString().hex())
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    from ray.core.generated import gcs_service_pb2

    assert out[0] == "False"
    theirs = gcs_service_pb2.GetAllNodeInfoRequest.FromString(bytes.fromhex(out[1]))
    assert theirs.limit == 3 and theirs.node_selectors[0].node_id.hex() == "ab12"


def test_attribution_reaches_ray_without_grpcio():
    probe = """
import sys
from ray_accel.exporter.attribution.ray_grpc import rpc_method
from ray_accel.exporter.attribution.ray_sources import RaySources
from ray_accel.exporter.cluster.gcs import ClusterGcs
method = rpc_method("node_manager_pb2", "NodeManagerService", "GetNodeStats")
print(method.path, method.reply_type.DESCRIPTOR.full_name, "grpc" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["/ray.rpc.NodeManagerService/GetNodeStats", "ray.rpc.GetNodeStatsReply",
                   "False"]
