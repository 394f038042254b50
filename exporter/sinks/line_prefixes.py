"""The start of each series' line in the Prometheus text (`name{labels} `), kept between renders.

A node's series keep their labels from one cycle to the next while their values
change, so a render that finds a series' prefix here writes only its value. The
prefixes are kept per family, by the series' label values (the rows of
sinks/series.py). What they hold is bounded: about `limit` prefixes over all
families (about 350 bytes each with their keys: 0.5 MiB for the simulated 8-GPU
node's 1,450 series), families beyond it written from scratch on every render,
and a family that has lost many series since it was kept (processes come and go)
started again from the series it has now.
"""

from __future__ import annotations

#: About 4 MiB at most: a 10,000-series node's prefixes, with room for churn.
DEFAULT_LIMIT = 12_000

Prefixes = dict[tuple[str, ...], str]


class LinePrefixes:
    """Kept prefixes by family; one render at a time (the caller serialises renders)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._families: dict[tuple[str, ...], Prefixes] = {}
        self._held = 0

    def __len__(self) -> int:
        """How many prefixes are kept now."""
        return sum(len(kept) for kept in self._families.values())

    def start_render(self) -> None:
        """Counts what is kept before a render hands out families."""
        self._held = len(self)

    def family(self, name: tuple[str, ...], series: int) -> Prefixes:
        """The kept prefixes of a family, named by its sample name and label names (the
        prefixes' keys are only the label values), which has `series` series in this render;
        the render adds those it lacks. Beyond the limit: an empty dict that is not kept."""
        kept = self._families.get(name)
        if kept is not None and len(kept) > 2 * series + 16:
            self._held -= len(kept)
            del self._families[name]
            kept = None
        if kept is None:
            if self._held + series > self.limit:
                return {}
            kept = self._families[name] = {}
            self._held += series
        return kept
