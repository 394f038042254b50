"""docs/backends.md's NVIDIA table and walk-through name real calls, metrics and files."""

from __future__ import annotations

import re
from pathlib import Path

import pynvml

from ray_accel.exporter import catalog as m

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "backends.md").read_text()
NVIDIA_CODE = "\n".join(p.read_text() for p in (ROOT / "exporter/backends/nvidia").glob("*.py"))


def _section(title: str) -> str:
    start = DOC.index(f"## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end]


SECTION = _section("The NVIDIA backend")
TABLE = [line for line in SECTION[SECTION.index("| NVML call |"):].splitlines()[2:]
         if line.startswith("|")]


def test_every_metric_the_backend_reads_is_in_the_table():
    metric_names = {s.name for s in m.CATALOG}
    read = {getattr(m, constant) for constant in re.findall(r"\bm\.([A-Z][A-Z0-9_]+)", NVIDIA_CODE)
            if getattr(m, constant, None) in metric_names}
    in_table = "\n".join(row.split("|")[2] for row in TABLE)
    assert m.GPU_UTILIZATION in read
    assert not {name for name in read if f"`{name}`" not in in_table}


def test_every_nvml_function_in_the_table_exists_and_the_backend_calls_it():
    named = {name for row in TABLE for name in re.findall(r"`(nvml\w+)`", row.split("|")[1])}
    assert "nvmlDeviceGetUtilizationRates" in named
    for name in named:
        assert hasattr(pynvml, name), name
        assert name in NVIDIA_CODE, f"{name} is in the table but the backend does not call it"


def test_every_metric_in_the_table_is_in_the_catalog():
    names = {s.name for s in m.CATALOG}
    for row in TABLE:
        for metric in re.findall(r"`((?:hw|ray\.accelerator)\.[a-z_.]+)`", row.split("|")[2]):
            assert metric in names, metric


def test_the_walk_through_names_files_that_exist_and_the_line_the_agent_writes():
    walk = SECTION[SECTION.index("### Following one value"):]
    files = set(re.findall(r"`(exporter/[\w/]+\.py)`", walk))
    assert "exporter/sinks/series.py" in files and "exporter/catalog.py" in files
    for path in files:
        assert (ROOT / path).is_file(), path
    assert m.spec(m.GPU_UTILIZATION).prometheus_name + '{index="0"' in walk
