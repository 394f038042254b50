"""Link byte counters read only when due, filled in between their reads from GPM's rates.

On an NVIDIA GPU whose GPM measures every link's throughput each cycle, the
backend reads the link byte counters (NVLink fields 138/139, PCIe 197/198) only
when due, seconds apart (docs/backends.md), and exports the last read in
between. A counter signal fitted to those reads alone would spread each gap's
bytes evenly over it, so a burst of traffic would replay as a steady trickle.
Where GPM measured the link's rate during a gap, the gap's bytes are spread
the way GPM saw them move instead: the counter at each sample between two reads
is the first read plus the gap's bytes in proportion to the bytes GPM measured
by then. After the last read the counter goes on by the bytes GPM measured
since, so a recording that ends between two reads keeps its tail. Each GPM
rate stands for the interval before its sample.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from .series import Points
from .timeline import unwrap

# Reads further apart than this many intervals are a gap to fill in (each cycle's reads:
# nothing to fill in).
GAP_INTERVALS = 1.5


def filled_in(reads: Points, rates: Points, interval_s: float,
              wrap: int | None = None) -> Points:
    """The counter `reads` (unwrapped at `wrap`), with a point at each of the `rates`'
    samples that falls in a gap between two reads, from the rates' integral."""
    totals = unwrap(reads, wrap)
    if len(totals) < 2 or not rates:
        return totals
    times = [t for t, _ in rates]
    out = [totals[0]]
    for (start, first), (end, last) in itertools.pairwise(totals):
        inside = [t for t in times if start < t < end]
        if end - start > GAP_INTERVALS * interval_s and inside and last >= first:
            moved = [_integral(rates, times, start, t) for t in (*inside, end)]
            if moved[-1] > 0:
                out.extend((t, first + (last - first) * part / moved[-1])
                           for t, part in zip(inside, moved, strict=False))
        out.append((end, last))
    end, last = totals[-1]
    after = [t for t in times if t > end]
    if after and after[-1] - end > GAP_INTERVALS * interval_s:
        # past the last read, up to the recording's end: the bytes GPM saw move since
        out.extend((t, last + _integral(rates, times, end, t)) for t in after)
    return out


def _integral(rates: Points, times: Sequence[float], start: float, end: float) -> float:
    """Bytes the step rates moved over (start, end]: the rate sampled at u held over the
    interval before u (after the last sample: the last rate)."""
    total, at = 0.0, start
    i = bisect.bisect_right(times, start)
    while at < end:
        if i < len(times):
            upto, rate = min(times[i], end), rates[i][1]
        else:
            upto, rate = end, rates[-1][1]
        total += rate * (upto - at)
        at = upto
        i += 1
    return total
