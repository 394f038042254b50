"""Ready-made promtool cases for the two shapes most rules have.

- `sustained`: a gauge condition that must hold for a while (`for:`);
- `increased`: a counter that must grow within a window.

Each returns (firing cases, near misses). `subject(values)` builds the input
series from the timeline of the one that varies; the alert is expected on the
labels of the first series it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .model import Case, Series, counting, held, steps, then, tick_for

Subject = Callable[[str], tuple[Series, ...]]
Cases = tuple[tuple[Case, ...], tuple[Case, ...]]


def fired_on(found: tuple[Series, ...]) -> tuple[dict[str, str], ...]:
    """The alert label set a case expects: the first series' labels."""
    return (dict(found[0].labels),)


def sustained(for_s: float, subject: Subject, bad: float, good: float,
              near: float | None = None, value: float | None = None) -> Cases:
    """`bad` held past `for_s` fires; `bad` for about half of it, or `near` held, does not."""
    tick = tick_for(for_s) if for_s else 15.0
    hold = steps(for_s, tick)
    count = hold + 3
    at = count * tick
    found = subject(held(bad, count))
    fires = (Case(f"held at {bad:g} for longer than the rule's for", found, at, tick,
                  fired_on(found), bad if value is None else value),)
    near_misses = []
    if for_s:
        short = hold // 2
        near_misses.append(Case(
            f"at {bad:g} for only {short * tick:g}s of the {for_s:g}s needed",
            subject(then(held(good, count - short - 1), held(bad, short))), at, tick))
    if near is not None:
        near_misses.append(Case(f"held at {near:g}, not past the threshold",
                                subject(held(near, count)), at, tick))
    return fires, tuple(near_misses)


def increased(window_s: float, subject: Subject, start: float, jump: float,
              small_jump: float | None = None) -> Cases:
    """A jump of `jump` inside the window fires; one before the window (or `small_jump`) not."""
    tick = tick_for(window_s)
    window = steps(window_s, tick)
    fresh = subject(then(held(start, window + 2), held(start + jump, window // 2)))
    fires = (Case(f"grew by {jump:g} within the window", fresh,
                  (window + 3 + window // 2) * tick, tick, fired_on(fresh)),)
    near_misses = [Case(
        f"grew by {jump:g}, but before the window", subject(then(held(start, 2),
                                                                 held(start + jump, window + 3))),
        (window + 6) * tick, tick)]
    if small_jump is not None:
        near_misses.append(Case(
            f"grew by only {small_jump:g} within the window",
            subject(then(held(start, window + 2), held(start + small_jump, window // 2))),
            (window + 3 + window // 2) * tick, tick))
    return fires, tuple(near_misses)


def appeared(window_s: float, subject: Subject) -> Case:
    """A counter series that is new within the window (its first events): fires."""
    tick = tick_for(window_s)
    window = steps(window_s, tick)
    found = subject(then(f"_x{window + 4}", counting(1, 0, 2)))
    return Case("a new series (first events) within the window", found,
                (window + 6) * tick, tick, fired_on(found))


def split(cases: Cases) -> dict[str, tuple[Case, ...]]:
    """(fires, near misses) as the `fires=` and `near_misses=` arguments of a `Rule`."""
    fires, near_misses = cases
    return {"fires": fires, "near_misses": near_misses}


def dropping(cases: Cases, *labels: str) -> Cases:
    """The cases with `labels` left out of the expected alerts (labels a join ignores)."""
    fires, near_misses = cases
    return tuple(
        replace(c, alerts=tuple({k: v for k, v in a.items() if k not in labels}
                                for a in c.alerts))
        for c in fires
    ), near_misses
