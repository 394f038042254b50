"""The Kubernetes examples: valid objects, and sidecars that run our CLI as documented.

Pod templates, metadata and selectors are validated by the `kubernetes`
client's models (strict: unknown fields and wrong types are errors). The
RayCluster and PodMonitor custom resources are checked against compact
schemas of the fields the examples use (no official schema installs offline).
The sidecar's command line is parsed by `ray-accel`'s own parser.
"""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes.client import models as k8s
from prometheus_server import PrometheusServer, free_port

from ray_accel.exporter.cli import build_parser
from ray_accel.grafana.alerts.recording import GROUP_LABELS
from ray_accel.grafana.alerts.rules import DEFAULT_AGENT_JOB

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
SIDECAR = "ray-accel"
METRICS_PORT_NAME = "accel-metrics"

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_POD_TEMPLATE = {"type": "object", "required": ["spec"]}
_NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
RAY_CLUSTER_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayCluster"},
        "metadata": {"type": "object", "required": ["name"], "properties": {"name": _NAME}},
        "spec": {
            "type": "object",
            "required": ["headGroupSpec"],
            "additionalProperties": False,
            "properties": {
                "rayVersion": {"type": "string"},
                "headGroupSpec": {
                    "type": "object",
                    "required": ["template"],
                    "additionalProperties": False,
                    "properties": {"rayStartParams": _STRING_MAP, "template": _POD_TEMPLATE},
                },
                "workerGroupSpecs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["groupName", "template"],
                        "additionalProperties": False,
                        "properties": {
                            "groupName": _NAME,
                            "replicas": {"type": "integer", "minimum": 0},
                            "minReplicas": {"type": "integer", "minimum": 0},
                            "maxReplicas": {"type": "integer", "minimum": 0},
                            "rayStartParams": _STRING_MAP,
                            "template": _POD_TEMPLATE,
                        },
                    },
                },
            },
        },
    },
}
_LABEL_NAME = {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}
# The Prometheus Operator's RelabelConfig.
_RELABELING = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": _LABEL_NAME},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {"enum": ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop",
                            "labelkeep", "lowercase", "uppercase", "keepequal", "dropequal"]},
    },
}
POD_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["selector", "podMetricsEndpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {"type": "object"},
                "podMetricsEndpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {"type": "string", "pattern": r"^[0-9]+(ms|s|m|h)$"},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array", "items": _RELABELING},
                            "authorization": {
                                "type": "object",
                                "required": ["type", "credentials"],
                                "additionalProperties": False,
                                "properties": {
                                    "type": {"const": "Bearer"},
                                    "credentials": {
                                        "type": "object", "required": ["name", "key"],
                                        "additionalProperties": False,
                                        "properties": {"name": {"type": "string"},
                                                       "key": {"type": "string"}}},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def _load(name: str) -> dict:
    (document,) = yaml.safe_load_all((MANIFESTS / name).read_text())
    return document


@pytest.fixture(scope="module")
def ray_cluster() -> dict:
    return _load("raycluster-with-ray-accel.yaml")


@pytest.fixture(scope="module")
def pod_monitor() -> dict:
    return _load("podmonitor.yaml")


def pod_templates(cluster: dict) -> dict[str, dict]:
    """Group name ("head" for the head) -> pod template."""
    spec = cluster["spec"]
    return {"head": spec["headGroupSpec"]["template"],
            **{g["groupName"]: g["template"] for g in spec.get("workerGroupSpecs", [])}}


def container(template: dict, name: str) -> dict:
    (found,) = [c for c in template["spec"]["containers"] if c["name"] == name]
    return found


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def test_ray_cluster_matches_the_schema_and_the_pod_models(ray_cluster):
    jsonschema.validate(ray_cluster, RAY_CLUSTER_SCHEMA)
    k8s.V1ObjectMeta.model_validate(ray_cluster["metadata"])
    for group, template in pod_templates(ray_cluster).items():
        pod = k8s.V1PodTemplateSpec.model_validate(template)
        assert pod.spec is not None, group
        assert not (pod.spec.host_pid and pod.spec.share_process_namespace), group
    workers = ray_cluster["spec"]["workerGroupSpecs"]
    assert all(g["minReplicas"] <= g["replicas"] <= g["maxReplicas"] for g in workers)


def test_every_pod_runs_the_agent_sidecar_with_valid_arguments(ray_cluster):
    parser = build_parser()
    for group, template in pod_templates(ray_cluster).items():
        sidecar = container(template, SIDECAR)
        assert sidecar["command"] == ["ray-accel"], group
        args = parser.parse_args(sidecar["args"])
        assert args.command == "agent" and not args.no_ray and not args.no_register, group
        assert args.host == "0.0.0.0", group  # reachable on the pod IP, which it registers
        (port,) = [p for p in sidecar["ports"] if p["name"] == METRICS_PORT_NAME]
        assert port["containerPort"] == args.port, group
        # /healthz restarts a stopped agent; it must not take the Ray pod out of service
        assert "readinessProbe" not in sidecar, group
        for kind in ("startupProbe", "livenessProbe"):
            probe = sidecar[kind]["httpGet"]
            assert (probe["path"], probe["port"]) == ("/healthz", METRICS_PORT_NAME), group
        security = k8s.V1SecurityContext.model_validate(sidecar["securityContext"])
        assert security.run_as_non_root and security.read_only_root_filesystem, group
        assert security.allow_privilege_escalation is False, group
        assert security.capabilities.drop == ["ALL"], group
        # GPUs are the Ray container's to request; the sidecar only looks at them.
        assert "nvidia.com/gpu" not in str(sidecar.get("resources", {})), group


def test_agents_can_see_the_raylet_and_the_gpus(ray_cluster):
    templates = pod_templates(ray_cluster)
    assert templates["head"]["spec"]["shareProcessNamespace"] is True
    for group, template in templates.items():
        if group == "head":
            continue
        ray = next(c for c in template["spec"]["containers"] if c["name"] != SIDECAR)
        assert ray["resources"]["limits"]["nvidia.com/gpu"], group
        # NVML reports host PIDs, so the pod shares the host's PID namespace.
        assert template["spec"]["hostPID"] is True, group
        assert env_of(container(template, SIDECAR))["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"


def test_the_heads_ray_container_serves_the_accelerators_tab(ray_cluster):
    head = pod_templates(ray_cluster)["head"]
    ray = next(c for c in head["spec"]["containers"] if c["name"] != SIDECAR)
    assert ray["image"] == container(head, SIDECAR)["image"]  # the one with ray-accel installed
    assert env_of(ray)["RAY_ACCEL_DASHBOARD"]["value"] == "1"
    assert "dashboard" in {p["name"] for p in ray["ports"]}


def test_sidecars_share_the_ray_containers_token(ray_cluster):
    for group, template in pod_templates(ray_cluster).items():
        tokens = {
            c["name"]: env_of(c)["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"]
            for c in template["spec"]["containers"]
        }
        assert len(set(tokens.values())) == 1, (group, tokens)
        assert all(env_of(c)["RAY_AUTH_MODE"]["value"] == "token"
                   for c in template["spec"]["containers"])


def test_worker_sidecars_reach_the_head_service(ray_cluster):
    parser = build_parser()
    name = ray_cluster["metadata"]["name"]
    for group, template in pod_templates(ray_cluster).items():
        address = parser.parse_args(container(template, SIDECAR)["args"]).ray_address
        expected = "127.0.0.1:6379" if group == "head" else f"{name}-head-svc:6379"
        assert address == expected, group


def test_pod_monitor_scrapes_the_sidecars_of_the_cluster(pod_monitor, ray_cluster):
    jsonschema.validate(pod_monitor, POD_MONITOR_SCHEMA)
    k8s.V1ObjectMeta.model_validate(pod_monitor["metadata"])
    selector = k8s.V1LabelSelector.model_validate(pod_monitor["spec"]["selector"])
    # KubeRay labels every pod of a cluster with ray.io/cluster=<cluster name>.
    assert selector.match_labels == {"ray.io/cluster": ray_cluster["metadata"]["name"]}
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == METRICS_PORT_NAME
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True
    # The sidecars require the cluster's token on /metrics: the PodMonitor sends
    # the very secret key the pods take RAY_AUTH_TOKEN from.
    secrets = {(ref["name"], ref["key"])
               for template in pod_templates(ray_cluster).values()
               for c in template["spec"]["containers"]
               for ref in [env_of(c)["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]]}
    credentials = endpoint["authorization"]["credentials"]
    assert secrets == {(credentials["name"], credentials["key"])}


def test_the_schemas_catch_mistakes(ray_cluster):
    broken = yaml.safe_load(yaml.safe_dump(ray_cluster))
    broken["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, RAY_CLUSTER_SCHEMA)
    template = pod_templates(ray_cluster)["head"]
    typo = yaml.safe_load(yaml.safe_dump(template))
    typo["spec"]["containers"][1]["readinesProbe"] = {}
    with pytest.raises(ValueError, match="readinesProbe"):
        k8s.V1PodTemplateSpec.model_validate(typo)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def test_pod_monitor_targets_carry_the_job_and_cluster_the_rules_and_boards_select(
        pod_monitor, ray_cluster, tmp_path):
    name, cluster = pod_monitor["metadata"]["name"], ray_cluster["metadata"]["name"]
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    # The scrape job the Prometheus Operator writes for the PodMonitor: its own rule naming
    # the job <namespace>/<name>, then the endpoint's relabelings; a pod's labels as
    # Kubernetes discovery gives them.
    relabel = [{"target_label": "job", "replacement": f"default/{name}"},
               *({_snake(k): v for k, v in rule.items()} for rule in endpoint["relabelings"])]
    config = {"scrape_configs": [{
        "job_name": f"podMonitor/default/{name}/0", "scrape_interval": "1h",
        "static_configs": [{"targets": [f"127.0.0.1:{free_port()}"], "labels": {
            "__meta_kubernetes_namespace": "default",
            "__meta_kubernetes_pod_label_ray_io_cluster": cluster}}],
        "relabel_configs": relabel}]}
    with PrometheusServer(yaml.safe_dump(config), tmp_path) as prometheus:
        (target,) = prometheus.wait_until(prometheus.targets, "the sidecar's target")
    assert target["labels"]["job"] == DEFAULT_AGENT_JOB
    assert "ray_io_cluster" in GROUP_LABELS  # the recording rules' (and boards') cluster
    assert target["labels"]["ray_io_cluster"] == cluster
