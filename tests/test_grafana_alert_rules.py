"""The generated alert rules: promtool checks them, and its unit tests show every rule firing
on a matching series and quiet on a near miss; every rule has its runbook section.

The rules against a live agent are in test_grafana_prometheus.py.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from board_queries import THRESHOLDS

from ray_accel.exporter.backends.amd.probes import VIOLATIONS as AMD_VIOLATIONS
from ray_accel.exporter.backends.amd.xcp import DEVICE_RESIDENCY as AMD_RESIDENCY
from ray_accel.exporter.backends.gaudi.probes import THROTTLE_REASONS as GAUDI_THROTTLE_REASONS
from ray_accel.exporter.backends.nvidia.probes import THROTTLE_REASONS
from ray_accel.exporter.cli import main as cli_main
from ray_accel.grafana import generate
from ray_accel.grafana.alerts import rules as alert_rules
from ray_accel.grafana.alerts.rules import AlertConfig, all_rules, groups
from ray_accel.grafana.alerts.templates import check, expand
from ray_accel.grafana.thresholds import Thresholds, load_file, parse_assignments

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
GENERATED = generate.GENERATED_DIR
RULES_FILE = GENERATED / generate.RULES
TEST_FILES = [GENERATED / name for name in generate.rule_test_files(generate.files())]
RUNBOOK = generate.RUNBOOK_DOC
# What test_grafana_prometheus.py runs with: every rule able to fire within seconds.
SHORT = [f"--alert-threshold={name}={value}" for name, value in THRESHOLDS.items()]

needs_promtool = pytest.mark.skipif(not Path(PROMTOOL).exists(),
                                    reason="promtool is not installed (tools/system-deps.sh)")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def cli(*args: str) -> subprocess.CompletedProcess:
    """`ray-accel grafana ARGS`, in this process: its exit status and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli_main(["grafana", *args])
        except SystemExit as leaving:
            status = leaving.code
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


@needs_promtool
def test_promtool_accepts_the_rules():
    result = promtool("check", "rules", RULES_FILE.name, cwd=RULES_FILE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(all_rules())} rules found" in result.stdout


@needs_promtool
def test_every_rule_fires_on_its_cases_and_not_on_near_misses():
    tests = [test for path in TEST_FILES for test in yaml.safe_load(path.read_text())["tests"]]
    for rule in all_rules():
        mine = [t for t in tests if t["alert_rule_test"][0]["alertname"] == rule.name]
        assert any(t["alert_rule_test"][0]["exp_alerts"] for t in mine), rule.name
        assert any(not t["alert_rule_test"][0]["exp_alerts"] for t in mine), rule.name
    result = promtool("test", "rules", *(p.name for p in TEST_FILES), cwd=RULES_FILE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(TEST_FILES)


@needs_promtool
def test_rules_with_other_thresholds_pass_their_own_tests(tmp_path):
    result = cli("--out", str(tmp_path), "--agent-job", "gpu-agents", *SHORT)
    assert result.returncode == 0, result.stderr
    rules_text = (tmp_path / generate.RULES).read_text()
    assert "ray_accelerator_allocation_idle == 1\n    for: 2s" in rules_text
    assert 'up{job="gpu-agents"}' in rules_text
    folder = (tmp_path / generate.RULES).parent
    checked = promtool("check", "rules", Path(generate.RULES).name, cwd=folder)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    test_files = sorted(p.name for p in folder.glob("ray-accel-alerts.*.test.yml"))
    assert "ray-accel-alerts.1s.test.yml" in test_files  # the short thresholds' own interval
    tested = promtool("test", "rules", *test_files, cwd=folder)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_rule_has_labels_annotations_and_a_runbook_link():
    document = yaml.safe_load(RULES_FILE.read_text())
    found = [r for g in document["groups"] for r in g["rules"]]
    assert [r["alert"] for r in found] == [r.name for r in all_rules()]
    for rule in found:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"].keys() == {"summary", "description", "runbook_url"}
        assert rule["annotations"]["runbook_url"] == f"docs/alerts.md#{rule['alert'].lower()}"


def test_every_rule_has_its_runbook_section():
    text = RUNBOOK.read_text()
    headings = {h.lower() for h in re.findall(r"^## (\S+)$", text, re.M)}
    for rule in all_rules():
        assert rule.name.lower() in headings, f"docs/alerts.md lacks a section for {rule.name}"
        section = text.split(f"## {rule.name}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**What it means.**", "**Likely causes.**", "**What to check.**",
                     "**Silence or tune.**", rule.expr):
            assert part in section, (rule.name, part)


def test_every_threshold_is_documented_and_used():
    used = {name for rule in all_rules() for name in rule.thresholds}
    text = RUNBOOK.read_text()
    for name in Thresholds.__dataclass_fields__:
        assert f"| `{name}` |" in text
        assert name in used, f"threshold {name} is used by no rule"


def test_thresholds_change_the_rules():
    config = AlertConfig(Thresholds().with_overrides(
        {"memory_full_ratio": "0.8", "memory_full_for": "90s", "agent_down_for": 30}),
        agent_job="gpus")
    rules = {r.name: r for r in all_rules(config)}
    assert rules["RayAcceleratorMemoryNearlyFull"].expr.endswith("> 0.8")
    assert rules["RayAcceleratorMemoryNearlyFull"].for_s == 90
    assert rules["RayAcceleratorAgentDown"].for_s == 30
    assert 'up{job="gpus"}' in rules["RayAcceleratorAgentDown"].expr


@pytest.mark.parametrize(("overrides", "message"), [
    ({"no_such": "1"}, "unknown alert threshold 'no_such'"),
    ({"memory_full_ratio": "1.5"}, "between 0 and 1"),
    ({"memory_full_ratio": "lots"}, "could not convert"),
    ({"idle_allocation_for": "soon"}, "not a duration"),
    ({"link_error_burst": "-3"}, ">= 0"),
])
def test_bad_thresholds_are_refused_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        Thresholds().with_overrides(overrides)


def test_thresholds_file_and_assignments(tmp_path):
    path = tmp_path / "t.yml"
    path.write_text((GENERATED / generate.THRESHOLDS).read_text())
    assert Thresholds().with_overrides(load_file(path)) == Thresholds()
    path.write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="mapping"):
        load_file(path)
    assert parse_assignments(["a=1", " b = 2m "]) == {"a": "1", "b": "2m"}
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_assignments(["oops"])


def test_bad_cli_input_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = cli("--out", str(out), "--alert-threshold", "memory_full_ratio=7")
    assert result.returncode == 2
    assert "memory_full_ratio: a ratio must be between 0 and 1" in result.stderr
    assert not out.exists()
    bad_file = tmp_path / "t.yml"
    bad_file.write_text("xid_window: forever\n")
    result = cli("--out", str(out), "--thresholds", str(bad_file))
    assert result.returncode == 2 and "xid_window" in result.stderr
    assert not out.exists()


def test_every_throttle_reason_a_backend_reports_is_judged_or_known_harmless():
    reported = {name for table in (THROTTLE_REASONS, AMD_VIOLATIONS, AMD_RESIDENCY,
                                   GAUDI_THROTTLE_REASONS) for _, name in table}
    judged = set(alert_rules.THERMAL_REASONS) | set(alert_rules.POWER_REASONS)
    assert judged <= reported
    # clocks held by the device being idle or by its settings, not by heat or power
    harmless = {"gpu_idle", "applications_clocks_setting", "sync_boost",
                "display_clock_setting"}
    assert reported - judged == harmless
    assert {"socket_thermal", "prochot", "vr_thermal", "hbm_thermal"} <= set(
        alert_rules.THERMAL_REASONS)


def test_annotation_templates_are_predictable():
    for rule in all_rules():
        check(rule.summary)
        check(rule.description)
    assert expand("{{ $labels.a }} at {{ $value | humanizePercentage }}", {"a": "x"},
                  0.97) == "x at 97%"
    with pytest.raises(ValueError, match="unsupported"):
        check("{{ $value | humanize }}")


def test_annotations_name_the_instance_where_an_alert_has_no_ray_node():
    node = "{{ or $labels.ray_node_id $labels.instance }}"
    assert expand(node, {"instance": "b:9478"}, None) == "b:9478"
    assert expand(node, {"ray_node_id": "n1", "instance": "b:9478"}, None) == "n1"
    assert expand(node, {}, None) == ""
    for rule in all_rules():
        for text in (rule.summary, rule.description):
            assert "{{ $labels.ray_node_id }}" not in text, (rule.name, text)
    lost = next(r for r in all_rules() if r.name == "RayAcceleratorDeviceLost")
    (no_ray,) = [c for c in lost.fires if "ray_node_id" not in c.alerts[0]]
    assert expand(lost.summary, no_ray.alerts[0], None) == (
        f"Device 3 of node {no_ray.alerts[0]['instance']} does not answer")


def test_transfer_stall_rules_are_in_their_group():
    names = {r.name for r in alert_rules.transfer_rules(AlertConfig())}
    assert names == {"RayAcceleratorTransferStalled", "RayAcceleratorCollectiveSuspectedStall",
                     "RayAcceleratorTransferAborted"}
    (group,) = [g for g in groups() if g.name == "ray-accel.transfers"]
    assert {r.name for r in group.rules} == names
