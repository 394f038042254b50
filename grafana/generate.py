"""Every generated file, from the board and rule definitions.

`files()` returns the output as {relative path: text}; `write()` puts it in a
folder. The committed copy under `grafana/generated/` (and `docs/alerts.md`)
is `files(CANONICAL)`; `make grafana` rewrites it and a test fails when it is
out of date.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import boards
from .alerts import recording, recording_cases, rules_file, runbook, unit_tests
from .alerts.rules import AlertConfig, all_rules, groups
from .provisioning import RAY_DEFAULT_DASHBOARD_UID, render_provider
from .thresholds import render_file

PACKAGE_DIR = Path(__file__).resolve().parent
GENERATED_DIR = PACKAGE_DIR / "generated"
RUNBOOK_DOC = PACKAGE_DIR.parent / "docs" / "alerts.md"

DASHBOARDS = "dashboards"
PROVIDER = "provisioning/dashboards/ray-accel.yml"
RULES = "prometheus/ray-accel-alerts.yml"
# promtool unit tests, one file per evaluation interval: RULE_TESTS.format(interval="60s").
RULE_TESTS = "prometheus/ray-accel-alerts.{interval}.test.yml"
THRESHOLDS = "prometheus/alert-thresholds.yml"
#: The cluster aggregates the Accelerators tab reads for long ranges, and their promtool tests.
RECORDING = "prometheus/ray-accel-recording.yml"
RECORDING_TESTS = "prometheus/ray-accel-recording.test.yml"
#: Where the committed provider file expects the boards (a conventional Grafana path).
DEFAULT_DASHBOARDS_PATH = "/var/lib/grafana/dashboards/ray-accel"


@dataclass(frozen=True)
class Output:
    """Choices that change the generated text."""

    alerts: AlertConfig = field(default_factory=AlertConfig)
    runbook_base: str = rules_file.DEFAULT_RUNBOOK_BASE
    dashboards_path: str = DEFAULT_DASHBOARDS_PATH
    ray_default_uid: str = RAY_DEFAULT_DASHBOARD_UID


CANONICAL = Output()


def board_files(ray_default_uid: str = RAY_DEFAULT_DASHBOARD_UID) -> dict[str, str]:
    """{`dashboards/<uid>.json`: board JSON} for every board."""
    return {f"{DASHBOARDS}/{b.uid}.json": boards.render(b, ray_default_uid)
            for b in boards.boards()}


def files(output: Output = CANONICAL) -> dict[str, str]:
    """Every generated file for `output`, by path relative to the output folder."""
    found = board_files(output.ray_default_uid)
    found[PROVIDER] = render_provider(output.dashboards_path)
    found[RULES] = rules_file.render(groups(output.alerts), output.runbook_base)
    tests = unit_tests.render_by_interval(all_rules(output.alerts), Path(RULES).name,
                                          output.runbook_base)
    found.update({RULE_TESTS.format(interval=interval): text for interval, text in tests.items()})
    found[THRESHOLDS] = render_file(output.alerts.thresholds)
    found[RECORDING] = recording.render()
    found[RECORDING_TESTS] = recording_cases.render(Path(RECORDING).name)
    return found


def rule_test_files(contents: Mapping[str, str]) -> list[str]:
    """The promtool test files among `contents`, by relative path."""
    prefix, suffix = RULE_TESTS.split("{interval}")
    return sorted(p for p in contents if p.startswith(prefix) and p.endswith(suffix))


def runbook_doc(output: Output = CANONICAL) -> str:
    """docs/alerts.md."""
    return runbook.render(groups(output.alerts), output.alerts.agent_job)


def write(folder: Path, contents: Mapping[str, str]) -> list[Path]:
    """Write `contents` under `folder` (each file atomically); returns the paths written."""
    written = []
    for relative, text in contents.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text)
        temporary.replace(path)
        written.append(path)
    return written


def stale(folder: Path = GENERATED_DIR, doc: Path = RUNBOOK_DOC) -> list[str]:
    """Committed files that differ from what the definitions generate now (or are extra)."""
    expected = {folder / k: v for k, v in files(CANONICAL).items()}
    expected[doc] = runbook_doc(CANONICAL)
    wrong = [str(p) for p, text in expected.items()
             if not p.exists() or p.read_text() != text]
    extra = [str(p) for p in folder.rglob("*") if p.is_file() and p not in expected]
    return sorted(wrong + extra)


def regenerate(folder: Path = GENERATED_DIR, doc: Path = RUNBOOK_DOC) -> list[Path]:
    """Rewrite the committed files (what `make grafana` runs), removing extra ones."""
    contents = files(CANONICAL)
    for path in folder.rglob("*"):
        if path.is_file() and str(path.relative_to(folder)) not in contents:
            path.unlink()
    written = write(folder, contents)
    doc.write_text(runbook_doc(CANONICAL))
    return [*written, doc]


if __name__ == "__main__":
    for path in regenerate():
        print(path)
