"""Percentiles of libtpu's cumulative latency distributions (microsecond buckets).

libtpu keeps each latency as a histogram since the workload started, possibly
several (one per buffer size); they are summed, as tpu-info does. Between two
cycles only the new observations count, so a percentile describes the last
interval (the first reading, and one after the counts went down, cover the
whole run); an interval without new observations gives no percentile.

Bucket layouts (those of Cloud Monitoring's Distribution): bucket 0 is the
underflow, the last the overflow; exponential bucket i >= 1 spans
[scale*g^(i-1), scale*g^i), linear bucket i spans [offset + width*(i-1),
offset + width*i), explicit bucket i spans [bounds[i-1], bounds[i]).
Within a bucket the value is interpolated linearly; in the overflow bucket
it is the bucket's lower bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

QUANTILES = (0.5, 0.9, 0.99)
MICROSECOND = 1e-6


def upper_bounds(options: Any, buckets: int) -> list[float] | None:
    """The upper bound of each bucket but the overflow; None for an unknown layout."""
    kind = options.WhichOneof("options")
    if kind == "exponential_buckets":
        spec = options.exponential_buckets
        if spec.scale <= 0 or spec.growth_factor <= 1:
            return None
        return [spec.scale * spec.growth_factor ** i for i in range(buckets - 1)]
    if kind == "linear_buckets":
        spec = options.linear_buckets
        if spec.width <= 0:
            return None
        return [spec.offset + spec.width * i for i in range(buckets - 1)]
    if kind == "explicit_buckets":
        bounds = list(options.explicit_buckets.bounds)
        return bounds[:buckets - 1] if len(bounds) >= buckets - 1 else None
    return None


def quantile(counts: Sequence[int], bounds: Sequence[float], q: float) -> float | None:
    """The q-quantile of a histogram (`bounds`: upper bounds of all buckets but the last)."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(counts):
        if count <= 0:
            continue
        if seen + count >= rank:
            lower = bounds[i - 1] if 0 < i <= len(bounds) else 0.0
            if i >= len(bounds):  # overflow bucket: no upper bound to interpolate to
                return lower
            upper = bounds[i]
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return bounds[-1] if bounds else None


class LatencyWindow:
    """The previous cycle's summed bucket counts of one distribution."""

    def __init__(self) -> None:
        self._previous: list[int] | None = None

    def percentiles(self, distributions: Sequence[Any]) -> dict[float, float]:
        """Quantile -> seconds over the observations since the last call."""
        usable = [d for d in distributions if d.bucket_counts]
        if not usable:
            return {}
        size = max(len(d.bucket_counts) for d in usable)
        summed = [0] * size
        for distribution in usable:
            for i, count in enumerate(distribution.bucket_counts):
                summed[i] += int(count)
        bounds = upper_bounds(usable[0].bucket_options, size)
        previous, self._previous = self._previous, summed
        window = summed
        if previous is not None and len(previous) == size and all(
                now >= before for now, before in zip(summed, previous, strict=True)):
            window = [now - before for now, before in zip(summed, previous, strict=True)]
        if bounds is None:
            return {}
        found = {q: quantile(window, bounds, q) for q in QUANTILES}
        return {q: value * MICROSECOND for q, value in found.items() if value is not None}
