"""Exposure of a real agent process: token, --metrics-auth, basic auth, TLS, web-config reload.

A real Prometheus scrapes the agent over TLS with a bearer token and with basic
auth (certificates generated here); without credentials every endpoint but
/healthz answers a JSON 401.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from agent_process import AgentProcess
from aiohttp.test_utils import TestClient, TestServer
from prometheus_server import PrometheusServer, wait_until
from tls_files import make_certificates, make_client_certificate, write_web_config

from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.dashboard_module.standalone import build_app

TOKEN = "t0ken-for-tests"
GUARDED = ("/", "/api/v1/snapshot", "/nope")


def fetch(url: str, headers: dict[str, str] | None = None,
          context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def test_token_guards_every_endpoint_but_healthz(token_file):
    with AgentProcess("--simulate", "l4-pcie", "--token-file", str(token_file),
                      "--metrics-auth", "token") as agent:
        for path in ("/metrics", *GUARDED):
            for headers in ({}, bearer("wrong"), basic("x", "y")):
                status, reply_headers, body = fetch(agent.url + path, headers)
                assert status == 401, (path, headers)
                assert reply_headers["Content-Type"] == "application/json"
                assert json.loads(body)["status"] == 401
                assert "Bearer" in reply_headers["WWW-Authenticate"]
        status, _, _ = fetch(agent.url + "/healthz")
        assert status in (200, 503)
        wait_until(lambda: fetch(agent.url + "/api/v1/snapshot", bearer())[0] == 200,
                   "a snapshot with the token")
        assert fetch(agent.url + "/metrics", bearer())[0] == 200
        assert fetch(agent.url + "/nope", bearer())[0] == 404


def test_metrics_auth_none_leaves_only_metrics_open(token_file):
    with AgentProcess("--simulate", "l4-pcie", "--token-file", str(token_file),
                      "--metrics-auth", "none") as agent:
        wait_until(lambda: fetch(agent.url + "/metrics")[0] == 200, "/metrics without token")
        assert fetch(agent.url + "/api/v1/snapshot")[0] == 401


def test_loopback_agent_without_token_is_open():
    with AgentProcess("--simulate", "l4-pcie") as agent:
        wait_until(lambda: fetch(agent.url + "/api/v1/snapshot")[0] == 200, "an open snapshot")


def _run_agent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "agent", "--no-ray",
                           "--port", "0", *args], capture_output=True, text=True, timeout=60)


def test_bad_web_config_is_refused_at_start(tmp_path):
    cases = {
        "basic_auth_users: {prom: plaintext}\n": "not a bcrypt hash",
        "tls_server_config: {cert_file: missing.crt, key_file: missing.key}\n":
            "cannot load cert_file",
        "tls_server_config: {cert_file: a, key_file: b, cipher_suites: [X]}\n":
            "cipher_suites is not supported",
        "tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequestClientCert}\n":
            "RequestClientCert is not supported",
        "basic_auth: {}\n": "unknown key(s) basic_auth",
        "[unclosed\n": "not valid YAML",
        # the form of a bcrypt hash, with a salt bcrypt refuses
        "basic_auth_users: {prom: '$2b$12$" + "z" * 53 + "'}\n": "not a bcrypt hash",
        "basic_auth_users: {prom: '$2b$12$" + "!" * 53 + "'}\n": "not a bcrypt hash",
        "tls_server_config: {cert_file: a, key_file: b, min_version: [1]}\n":
            "min_version must be a string",
        "tls_server_config: {cert_file: {a: 1}, key_file: b}\n": "cert_file must be a string",
        "tls_server_config: {cert_file: a, key_file: b, 7: x}\n":
            "unknown tls_server_config key(s) 7",
    }
    for text, message in cases.items():
        path = tmp_path / "web.yml"
        path.write_text(text)
        done = _run_agent("--web-config-file", str(path))
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and str(path) in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one line
    done = _run_agent("--metrics-auth", "token")
    assert done.returncode == 2 and "no token to require" in done.stderr


def _client_context(ca) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def test_prometheus_scrapes_over_tls_with_token_and_with_basic_auth(tmp_path, token_file):
    certs = make_certificates(tmp_path)
    web = write_web_config(tmp_path / "web.yml", tls={"cert_file": certs["cert"],
                                                      "key_file": certs["key"]},
                           users={"prometheus": "s3cret"})
    (tmp_path / "password").write_text("s3cret")
    with AgentProcess("--simulate", "l4-pcie", "--token-file", str(token_file),
                      "--metrics-auth", "token", "--web-config-file", str(web)) as agent:
        assert agent.url.startswith("https://127.0.0.1:")
        context = _client_context(certs["ca"])
        for path in ("/metrics", *GUARDED):
            assert fetch(agent.url + path, context=context)[0] == 401, path
        target = agent.url.removeprefix("https://")
        tls = f"tls_config: {{ca_file: {certs['ca']}}}"
        config = f"""
global: {{scrape_interval: 1s}}
scrape_configs:
  - job_name: token
    scheme: https
    {tls}
    authorization: {{type: Bearer, credentials_file: {token_file}}}
    static_configs: [{{targets: ["{target}"]}}]
  - job_name: basic
    scheme: https
    {tls}
    basic_auth: {{username: prometheus, password_file: {tmp_path / 'password'}}}
    static_configs: [{{targets: ["{target}"]}}]
  - job_name: anonymous
    scheme: https
    {tls}
    static_configs: [{{targets: ["{target}"]}}]
"""
        with PrometheusServer(config, tmp_path / "prom") as prom:
            def up() -> dict[str, float]:
                found = {r["metric"]["job"]: float(r["value"][1]) for r in prom.query("up")}
                return found if len(found) == 3 else {}

            wait_until(lambda: up().get("token") == 1 and up().get("basic") == 1, "both scrapes")
            assert up()["anonymous"] == 0
            devices = prom.query('hw_power_watts{job="basic"}')
            assert devices and {d["metric"]["job"] for d in devices} == {"basic"}
            assert prom.query('hw_power_watts{job="token"}')


def test_web_config_reload_keeps_the_last_good_file(tmp_path):
    certs = make_certificates(tmp_path)
    tls = {"cert_file": certs["cert"], "key_file": certs["key"]}
    web = write_web_config(tmp_path / "web.yml", tls=tls, users={"alice": "one"})
    with AgentProcess("--simulate", "l4-pcie", "--web-config-file", str(web)) as agent:
        follower = _follow_output(agent)
        context = _client_context(certs["ca"])
        snapshot = agent.url + "/api/v1/snapshot"
        wait_until(lambda: fetch(snapshot, basic("alice", "one"), context)[0] == 200, "alice")
        assert fetch(snapshot, context=context)[0] == 401
        write_web_config(web, tls=tls, users={"bob": "two"})
        wait_until(lambda: fetch(snapshot, basic("bob", "two"), context)[0] == 200, "bob")
        assert fetch(snapshot, basic("alice", "one"), context)[0] == 401
        web.write_text("basic_auth_users: {carol: not-a-hash}\n")
        wait_until(lambda: "not reloaded, keeping the last good one" in "".join(agent.output),
                   "the bad file refused", every=0.1)
        assert fetch(snapshot, basic("bob", "two"), context)[0] == 200
        (tmp_path / "renewed").mkdir()
        renewed = make_certificates(tmp_path / "renewed", "renewed server")
        write_web_config(web, tls={"cert_file": renewed["cert"], "key_file": renewed["key"]},
                         users={"bob": "two"})
        new_context = _client_context(renewed["ca"])
        wait_until(lambda: fetch(snapshot, basic("bob", "two"), new_context)[0] == 200,
                   "the renewed certificate")
    follower.join(15)
    assert "not a bcrypt hash" in "".join(agent.output)


def _follow_output(agent: AgentProcess) -> threading.Thread:
    """Keeps appending the agent's output lines to `agent.output` until it exits."""
    def follow() -> None:
        for line in agent.proc.stdout:
            agent.output.append(line)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    return follower


RAY_TOKEN = "ray-cluster-token-0123456789abcdef"
RAY_TOKEN_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": RAY_TOKEN}


def test_agent_beyond_loopback_requires_rays_token_and_the_collector_sends_it():
    with AgentProcess("--simulate", "l4-pcie", "--host", "0.0.0.0", env=RAY_TOKEN_ENV) as agent:
        url = agent.url.replace("0.0.0.0", "127.0.0.1")
        for path in ("/metrics", *GUARDED):
            assert fetch(url + path)[0] == 401, path  # --metrics-auth defaults to token here
        wait_until(lambda: fetch(url + "/api/v1/snapshot", bearer(RAY_TOKEN))[0] == 200,
                   "a snapshot with Ray's token")

        async def dashboard(token: str):
            async def discover():
                return [AgentTarget("a" * 56, url, "agent-host")]

            collector = Collector(discover, refresh_s=60, token=lambda: token)
            client = TestClient(TestServer(build_app(AcceleratorsApi(collector, "standalone"))))
            await client.start_server()
            try:
                await collector.refresh()
                reply = await client.get("/accelerators/api/nodes")
                return (await reply.json())["nodes"]
            finally:
                await client.close()
                await collector.stop()

        nodes = wait_until(lambda: [n for n in asyncio.run(dashboard(RAY_TOKEN))
                                    if n["status"] == "ok" and n["device_count"]], "the node shown")
        assert nodes[0]["hostname"] == "agent-host"
        refused = asyncio.run(dashboard("wrong"))
        assert refused[0]["status"] == "unreachable" and "401" in refused[0]["error"]


def test_clients_present_rays_token_when_rays_auth_is_on():
    code = ("from ray_accel.exporter.agent_client import client_token; print(client_token())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **RAY_TOKEN_ENV})
    assert done.stdout.strip() == RAY_TOKEN, done.stderr


def test_topo_presents_rays_token_to_a_guarded_agent(tmp_path):
    (tmp_path / "token").write_text(RAY_TOKEN)
    code = ("import sys; from ray_accel.exporter.topo_command import _fetch; "
            "view = _fetch('n', sys.argv[1]); print(view.devices, view.error)")
    with AgentProcess("--simulate", "l4-pcie", "--token-file", str(tmp_path / "token"),
                      "--metrics-auth", "token") as agent:
        wait_until(lambda: fetch(agent.url + "/api/v1/snapshot", bearer(RAY_TOKEN))[0] == 200,
                   "the agent's first snapshot")
        runs = {}
        for name, extra in (("with", RAY_TOKEN_ENV), ("without", {})):
            env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
            runs[name] = subprocess.run([sys.executable, "-c", code, agent.url],
                                        capture_output=True, text=True, timeout=60,
                                        env={**env, **extra}).stdout
    assert runs["with"].startswith("['NVIDIA L4'") and "401" not in runs["with"], runs
    assert "401" in runs["without"], runs


def test_dashboard_with_basic_auth_users_and_tls(tmp_path):
    certs = make_certificates(tmp_path)
    web = write_web_config(tmp_path / "web.yml", tls={"cert_file": certs["cert"],
                                                      "key_file": certs["key"]},
                           users={"viewer": "pw"})

    async def go():
        from ray_accel.exporter.aiohttp_serving import serve
        from ray_accel.exporter.web_config import WebConfigWatcher

        async def nobody():
            return []

        watcher = WebConfigWatcher(web)
        api = AcceleratorsApi(Collector(nobody, refresh_s=60, token=lambda: None), "standalone")
        serving = await serve(build_app(api, TOKEN, watcher), "127.0.0.1", 0,
                              ssl_context=watcher.ssl_context)
        try:
            context = _client_context(certs["ca"])
            page = serving.url + "/accelerators/"
            api_path = serving.url + "/accelerators/api/config"
            return await asyncio.to_thread(lambda: [
                fetch(page, context=context)[0],
                fetch(page, basic("viewer", "pw"), context)[0],
                fetch(page, bearer(), context)[0],
                fetch(api_path, basic("viewer", "pw"), context)[0],
                fetch(api_path, bearer(), context)[0],
            ])
        finally:
            await serving.close()

    assert asyncio.run(go()) == [401, 200, 200, 401, 200]
    web.write_text("basic_auth_users: []\n")
    done = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "dashboard",
                           "--web-config-file", str(web)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "basic_auth_users must map" in done.stderr, done.stderr


def test_client_certificates_are_required_and_verified_also_after_a_reload(tmp_path):
    certs = make_certificates(tmp_path)
    client_cert, client_key = make_client_certificate(tmp_path, certs["ca"], certs["ca_key"])
    (tmp_path / "other").mkdir()
    stranger = make_certificates(tmp_path / "other")
    stranger_cert, stranger_key = make_client_certificate(tmp_path / "other", stranger["ca"],
                                                          stranger["ca_key"])
    tls = {"cert_file": certs["cert"], "key_file": certs["key"],
           "client_ca_file": certs["ca"], "min_version": "TLS12"}
    web = write_web_config(tmp_path / "web.yml", tls=tls)

    def status(cert: Path | None, key: Path | None) -> object:
        context = _client_context(certs["ca"])
        if cert is not None:
            context.load_cert_chain(cert, key)
        try:
            return fetch(agent.url + "/metrics", context=context)[0]
        except (ssl.SSLError, ConnectionError, urllib.error.URLError) as error:
            return type(error).__name__

    with AgentProcess("--simulate", "l4-pcie", "--web-config-file", str(web)) as agent:
        wait_until(lambda: status(client_cert, client_key) == 200, "a verified client")
        assert status(None, None) != 200
        assert status(stranger_cert, stranger_key) != 200
        # A reload (new server certificate, same CA) keeps requiring client certificates.
        (tmp_path / "renewed").mkdir()
        renewed = make_certificates(tmp_path / "renewed", "renewed server")
        write_web_config(web, tls={**tls, "cert_file": renewed["cert"],
                                   "key_file": renewed["key"]})
        renewed_context = _client_context(renewed["ca"])
        renewed_context.load_cert_chain(client_cert, client_key)
        wait_until(lambda: fetch(agent.url + "/metrics", context=renewed_context)[0] == 200,
                   "the renewed certificate")
        bare = _client_context(renewed["ca"])
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            fetch(agent.url + "/metrics", context=bare)
