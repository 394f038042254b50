"""What went wrong during a recording, as scenario rules: errors, losses, hangs, XIDs, costs.

- a call that failed with a vendor library error (a sample's `errors`) for a run of
  cycles becomes an `errors` rule for that function and device over that window
  (NOT_SUPPORTED is no rule: the scenario leaves the key out); so does the call a
  device went down on (not stale), with its code, where it came back or went down
  for another reason than the vendor's lost kind (a device that answered no call:
  the library's every call);
- a device down with the lost kind (GPU_IS_LOST) to the end of the recording becomes
  `lost_at_s` just after its sample before;
- a device that stopped answering (stale) becomes `delays` rules on its sampling calls;
- XID events are placed at the cycle their count grew in (before the recording: t = 0);
- a call whose measured CPU cost (NVML, amdsmi, pyhlml: the call wrapper times each
  vendor's calls by function) averaged above `COSTLY_CALL_CPU_S` becomes a `busy`
  delay, so a benchmark on the replay costs what the node costs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .. import catalog as m
from ..backends.calls import COSTLY_CALL_CPU_S
from .series import DeviceSeries, label_map
from .vendors import VendorRecorder

# What a down sample names when the device answered no call (backends/calls.py's
# `raise_if_silent`).
SILENT = "every call"


def failure_windows(series: DeviceSeries, interval_s: float,
                    recorded: Callable[[str, str], bool],
                    name: Callable[[str], str] = lambda call: call,
                    ) -> list[tuple[str, str, float, float]]:
    """(name, kind, from_s, until_s) of each run of cycles in which a call (named with its
    key, as in a sample's `errors`; `name` maps it to what a rule names) failed with a
    kind that `recorded(call, kind)` accepts (a run: samples in a row, or within one and a
    half intervals, where cycles came late because the calls did); a window reaches half
    an interval either side of its run."""
    sampled = {*series.up_times, *series.down_times, *series.stale_times,
               *(t for t, _ in series.errors)}
    order = {t: i for i, t in enumerate(sorted(sampled))}  # each sample's place in turn
    windows: dict[tuple[str, str], list[list[float]]] = {}
    for t, errors in series.errors:
        for call, kind in errors.items():
            if not recorded(call, kind):
                continue
            runs = windows.setdefault((name(call), kind), [])
            if runs and (t - runs[-1][1] <= 1.5 * interval_s
                         or order[t] == order[runs[-1][1]] + 1):
                runs[-1][1] = t
            else:
                runs.append([t, t])
    return [(named, kind, round(max(first - interval_s / 2, 0.0), 3),
             round(last + interval_s / 2, 3))
            for (named, kind), runs in sorted(windows.items()) for first, last in runs]


def error_rules(index: int, series: DeviceSeries, interval_s: float,
                recorder: VendorRecorder) -> list[dict[str, Any]]:
    """`errors` rules of one device from the per-cycle errors of its samples: the calls
    named with the recorder's `call_prefix` that failed other than with one of its
    `absent_kinds` (the backend's own names, such as "gpm", are no call), and the call
    each down sample failed on, whatever its kind (its `wildcard` for a device that
    answered no call), until the device was lost for good (`lost_at`); and, for the whole
    replay, each of its `unkeyed_calls` that failed as absent."""
    lost = lost_at(series, recorder.lost_kinds)
    down = set(series.down_times)
    failed = [(t, {recorder.wildcard if call == SILENT else call: kind
                   for call, kind in errors.items() if _ruled(recorder, call, kind, t in down)})
              for t, errors in series.errors if lost is None or t < lost]
    windows = failure_windows(replace(series, errors=failed), interval_s,
                              lambda call, kind: True, lambda call: call.partition("[")[0])
    lasting = recorder.absent_kinds - recorder.lost_kinds
    return [*({"function": call, "device": index, "code": kind.upper()}
              for call in sorted(recorder.unkeyed_calls) for kind in sorted(lasting)
              if series.failed_with(call, {kind})),
            *({"function": function, "device": index, "code": kind.upper(),
               "from_s": start, "until_s": until} for function, kind, start, until in windows)]


def _ruled(recorder: VendorRecorder, call: str, kind: str, down: bool) -> bool:
    """Whether a failed call becomes an error rule: one of the vendor library's that did
    not fail with a kind that only leaves its key out; in a down sample, the call the device
    went down on (its kind is why), or every call where it answered none."""
    if down and call == SILENT:
        return True
    return call.startswith(recorder.call_prefix) and (down or kind not in recorder.absent_kinds)


def lost_at(series: DeviceSeries, lost_kinds: Collection[str]) -> float | None:
    """When the device was lost for good: just after the sample before its last run of
    down samples, where every sample from then to the end of the recording was down with
    one of `lost_kinds` (a device that came back, or went down otherwise, is not lost)."""
    why = dict(series.errors)
    others = [*series.up_times, *series.stale_times,
              *(t for t in series.down_times
                if not any(kind in lost_kinds for kind in why.get(t, {}).values()))]
    last = max(others, default=None)
    if not any(last is None or t > last for t in series.down_times):
        return None
    return round(last + 0.001, 3) if last is not None else 0.0


def hang_rules(index: int, series: DeviceSeries, interval_s: float, end_s: float,
               hung_calls: Sequence[str]) -> list[dict[str, Any]]:
    """`delays` rules on the device's sampling calls (`hung_calls`: which call hung is not
    in the samples) for each run of stale samples."""
    rules: list[dict[str, Any]] = []
    for t in series.stale_times:
        if rules and t - rules[-1]["until_s"] <= 1.5 * interval_s:
            rules[-1]["until_s"] = round(t, 3)
            continue
        before = [u for u in series.up_times if u < t]
        rules.append({"device": index,
                      "from_s": round(before[-1] + 0.001 if before else 0.0, 3),
                      "until_s": round(t, 3)})
    kept = []
    for rule in rules:
        fresh_again = [u for u in series.up_times if u > rule["until_s"]]
        until = fresh_again[0] if fresh_again else end_s + 3600
        rule["seconds"] = round(until - rule["from_s"], 3)
        if fresh_again:
            rule["until_s"] = round(fresh_again[0] - interval_s / 2, 3)
            if rule["until_s"] <= rule["from_s"]:
                continue  # answered again within half a cycle of its last answer: late, not hung
        else:
            del rule["until_s"]
        kept.append(rule)
    return [{"function": function, **rule} for rule in kept for function in hung_calls]


def xid_events(series: DeviceSeries) -> list[dict[str, Any]]:
    """`xid_events` from the per-code XID counters: one event per counted occurrence."""
    events = []
    for key, points in series.matching("d", m.XID_ERRORS):
        code = int(label_map(key)["xid"])
        previous = 0.0
        for t, count in points:
            at = round(t, 3) if t > series.first_t else 0.0  # counted before the recording
            events.extend({"at_s": at, "xid": code} for _ in range(int(count - previous)))
            previous = max(previous, count)
    return sorted(events, key=lambda e: (e["at_s"], e["xid"]))


def busy_rules(costs: Mapping[str, list[float]], call_prefix: str) -> list[dict[str, Any]]:
    """`busy` delays for the calls named `call_prefix...` (one vendor library's) that cost
    more CPU on average than `COSTLY_CALL_CPU_S`."""
    rules = []
    for function, (calls, spent) in sorted(costs.items()):
        if not call_prefix or not function.startswith(call_prefix):
            continue
        mean = spent / calls if calls else 0.0
        if mean > COSTLY_CALL_CPU_S:
            rules.append({"function": function, "seconds": round(mean, 6), "busy": True})
    return rules
