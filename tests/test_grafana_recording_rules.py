"""The generated recording rules: promtool checks them, and its unit tests show every recorded
series equal to its devices' aggregate; the tab's raw cluster query and the rules come from
one definition.

The tab reading them from a live Prometheus is in test_dashboard_prometheus_history.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ray_accel.dashboard_module.prometheus_history import Scope, scope_queries
from ray_accel.grafana import generate
from ray_accel.grafana.alerts import recording, recording_cases
from ray_accel.grafana.promql import TOP_LEVEL

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
FOLDER = (generate.GENERATED_DIR / generate.RECORDING).parent
RULES = Path(generate.RECORDING).name
TESTS = Path(generate.RECORDING_TESTS).name

needs_promtool = pytest.mark.skipif(not Path(PROMTOOL).exists(),
                                    reason="promtool is not installed (tools/system-deps.sh)")


def promtool(*args: str, cwd: Path = FOLDER) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@needs_promtool
def test_promtool_accepts_the_recording_rules_and_their_tests_pass():
    checked = promtool("check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(recording.PARTS)} rules found" in checked.stdout
    tested = promtool("test", "rules", TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@needs_promtool
def test_the_unit_tests_fail_on_a_wrong_rule(tmp_path):
    wrong = (FOLDER / RULES).read_text().replace("== bool 0)", "== bool 1)")
    assert wrong != (FOLDER / RULES).read_text()
    (tmp_path / RULES).write_text(wrong)
    (tmp_path / TESTS).write_text((FOLDER / TESTS).read_text())
    tested = promtool("test", "rules", TESTS, cwd=tmp_path)
    assert tested.returncode != 0
    assert recording.record_name("devices_down") in tested.stdout + tested.stderr


def test_a_gpus_mig_instances_are_not_summed_again():
    parent, *instances = recording_cases.MIG_FLEET
    assert [d.labels()["index"] for d in instances] == ["6/1/0", "6/2/0"]
    expected = recording_cases.expected_parts(recording_cases.MIG_FLEET)
    assert expected["memory_used_bytes"] == parent.memory_bytes == 40e9
    assert expected["power_watts"] == parent.power_watts == 400
    assert expected["utilization_count"] == 3 and expected["devices_down"] == 0
    memory = recording.record_name("memory_used_bytes")
    (test,) = [t for t in yaml.safe_load((FOLDER / TESTS).read_text())["tests"]
               if "MIG" in t["name"]]
    (check,) = [c for c in test["promql_expr_test"] if c["expr"] == memory]
    assert [s["value"] for s in check["exp_samples"]] == [40e9]


@needs_promtool
def test_the_unit_tests_fail_where_memory_and_power_sum_a_gpus_parts(tmp_path):
    top_level = "{" + TOP_LEVEL + "}"
    wrong = (FOLDER / RULES).read_text().replace(top_level, "")
    assert wrong != (FOLDER / RULES).read_text()
    (tmp_path / RULES).write_text(wrong)
    (tmp_path / TESTS).write_text((FOLDER / TESTS).read_text())
    tested = promtool("test", "rules", TESTS, cwd=tmp_path)
    assert tested.returncode != 0
    failed = tested.stdout + tested.stderr
    assert recording.record_name("memory_used_bytes") in failed
    assert 'SessionName="s4"' in failed  # the GPU with MIG instances; the others pass
    assert "got: {} 8E+02" in failed  # the GPU's 400 W and its instances' 400 W


def test_one_group_per_session_and_cluster_at_the_scrape_interval():
    (group,) = yaml.safe_load((FOLDER / RULES).read_text())["groups"]
    assert group["name"] == recording.GROUP_NAME and group["interval"] == "10s"
    for rule in group["rules"]:
        level, _, operation = rule["record"].split(":")
        assert level == "ray_accel_cluster" and operation
        assert rule["expr"].startswith(("sum by (SessionName, ray_io_cluster) (",
                                        "count by (SessionName, ray_io_cluster) ("))
        assert "SessionName=" not in rule["expr"]  # every session's, scoped by the tab


def test_the_rules_aggregate_what_the_tabs_raw_cluster_query_does():
    raw = scope_queries(Scope("cluster"), (), step_s=1)
    rules = recording.recording_rules()
    by = " by (SessionName, ray_io_cluster)"
    assert raw["utilization"] == (
        f"({rules[recording.record_name('utilization_sum')].replace(by, '')}) / "
        f"({rules[recording.record_name('utilization_count')].replace(by, '')})")
    for name in ("memory_used_bytes", "power_watts", "idle_allocations", "devices_down"):
        assert raw[name] == rules[recording.record_name(name)].replace(by, "")
    recorded = scope_queries(Scope("cluster"), ('SessionName=~"s1"',), step_s=1, recorded=True)
    assert recorded["power_watts"] == (
        'sum (ray_accel_cluster:hw_power_watts:sum{SessionName=~"s1"})')
