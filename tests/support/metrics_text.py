"""Reading a Prometheus text body in tests: the samples of one metric, by device index."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families as parse_text


def series(body: bytes, name: str) -> list:
    """Every sample of metric `name` in a /metrics body."""
    return [s for family in parse_text(body.decode()) for s in family.samples if s.name == name]


def by_index(samples) -> dict[str, float]:
    """{device index: value} of `samples`."""
    return {s.labels["index"]: s.value for s in samples}
