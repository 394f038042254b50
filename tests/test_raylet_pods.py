"""The agent's own raylet among raylets of other pods (a KubeRay sidecar with `hostPID`).

With `hostPID` a sidecar sees every raylet on its Kubernetes node: several GPU
pods of one cluster may share it, each with its own Ray node. The raylet of the
sidecar's own pod shares its network, IPC and UTS namespaces; the agent attributes
to that one. Here stand-in raylets (processes named `raylet` with a node id on
their command line) run in the test's namespaces and in namespaces of their own
(`unshare`), as a pod beside the sidecar's would.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from ray_accel.exporter.attribution.raylet_discovery import (
    LocalRaylet,
    choose_node,
    local_raylets,
)

SLEEPER = "import time; time.sleep(120)"


def _node(node_id: str, head: bool = False) -> SimpleNamespace:
    """What `choose_node` reads of a GcsNodeInfo."""
    return SimpleNamespace(node_id=bytes.fromhex(node_id), is_head_node=head)


def _raylet(node_id: str, started: int, beside: bool) -> LocalRaylet:
    return LocalRaylet(pid=1, node_id=node_id, gcs_address="10.0.0.1:6379", temp_dir="/tmp/ray",
                       started=started, beside=beside)


def test_the_raylet_of_the_agents_own_pod_wins_over_the_head_and_the_oldest():
    nodes = [_node("aa", head=True), _node("bb"), _node("cc")]
    raylets = {"aa": _raylet("aa", 10, beside=False), "bb": _raylet("bb", 20, beside=False),
               "cc": _raylet("cc", 30, beside=True)}
    assert choose_node(nodes, raylets, None, "10.0.0.1:6379").node_id.hex() == "cc"


def test_without_pods_the_head_then_the_oldest_win_as_before():
    nodes = [_node("aa"), _node("bb"), _node("cc", head=True)]
    raylets = {n: _raylet(n, started, beside=True) for n, started in
               (("aa", 20), ("bb", 10), ("cc", 30))}
    assert choose_node(nodes, raylets, None, "10.0.0.1:6379").node_id.hex() == "cc"
    del raylets["cc"]
    assert choose_node(nodes[:2], raylets, None, "10.0.0.1:6379").node_id.hex() == "bb"


def test_a_node_id_given_wins_over_the_own_pod():
    nodes = [_node("aa"), _node("bb")]
    raylets = {"aa": _raylet("aa", 10, beside=True), "bb": _raylet("bb", 20, beside=False)}
    assert choose_node(nodes, raylets, "bb", "10.0.0.1:6379").node_id.hex() == "bb"


@pytest.fixture
def stand_in_raylets() -> Iterator[dict[str, subprocess.Popen]]:
    """A raylet stand-in in this process's namespaces (node id "beside") and one in a pod's
    namespaces of its own (node id "apart")."""
    started: dict[str, subprocess.Popen] = {}
    for node_id, prefix in (("beside", []),
                            ("apart", ["unshare", "--user", "--map-root-user", "--net",
                                       "--ipc", "--uts"])):
        command = (f"exec -a /opt/ray/raylet {shlex.quote(sys.executable)} -c "
                   f"{shlex.quote(SLEEPER)} --node_id={node_id} --gcs-address=10.0.0.1:6379")
        started[node_id] = subprocess.Popen([*prefix, "bash", "-c", command])
    yield started
    for process in started.values():
        process.kill()
        process.wait()


def test_raylets_of_other_pods_are_told_from_the_own_pods(stand_in_raylets):
    deadline = time.monotonic() + 20
    while True:
        found = {r.node_id: r for r in local_raylets() if r.node_id in stand_in_raylets}
        if len(found) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert set(found) == {"beside", "apart"}, [p.poll() for p in stand_in_raylets.values()]
    assert found["beside"].beside and not found["apart"].beside
    nodes = [_node(bytes(n, "ascii").hex()) for n in ("apart", "beside")]
    by_hex = {bytes(n, "ascii").hex(): r for n, r in found.items()}
    assert choose_node(nodes, by_hex, None, "10.0.0.1:6379").node_id == b"beside"
