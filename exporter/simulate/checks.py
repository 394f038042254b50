"""Value checks shared by every section of a scenario.

Each takes a value and its key path in the scenario (``devices[2].power_mw``)
and raises ScenarioError naming that path when the value is wrong; those that
return, return the value as it is to be used.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAX_LIST_ITEMS = 4096
MAX_KEYFRAMES = 4096

UUID_BODY = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
PLAIN_UUID = re.compile(rf"^{UUID_BODY}$")
_PCI_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)


class ScenarioError(ValueError):
    """A scenario is invalid; the message names the offending key path."""


def describe(value: Any) -> str:
    """How a wrong value is named in a message: its kind, or a string itself."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, Sequence):
        return "list"
    return type(value).__name__


def fail(path: str, message: str) -> ScenarioError:
    """The error for the value at `path` (to raise)."""
    return ScenarioError(f"{path}: {message}")


def is_number(value: Any) -> bool:
    """True for an int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def number(value: Any, path: str, lo: float | None = None, hi: float | None = None) -> float:
    """A finite number within [lo, hi]."""
    if not is_number(value) or not math.isfinite(value):
        raise fail(path, f"expected a finite number, got {describe(value)}")
    if lo is not None and value < lo:
        raise fail(path, f"must be >= {lo:g}, got {value!r}")
    if hi is not None and value > hi:
        raise fail(path, f"must be <= {hi:g}, got {value!r}")
    return value


def integer(value: Any, path: str, lo: int | None = 0, hi: int | None = None) -> int:
    """An integer (not a bool) within [lo, hi]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(path, f"expected an integer, got {describe(value)}")
    if lo is not None and value < lo:
        raise fail(path, f"must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise fail(path, f"must be <= {hi}, got {value}")
    return value


def boolean(value: Any, path: str) -> bool:
    """true or false."""
    if not isinstance(value, bool):
        raise fail(path, f"expected true or false, got {describe(value)}")
    return value


def string(value: Any, path: str, max_len: int = 1024) -> str:
    """A string of at most `max_len` bytes, without control or format characters (which
    reorder or hide what logs and pages show: bidi overrides, zero-width marks) or outer
    whitespace."""
    if not isinstance(value, str):
        raise fail(path, f"expected a string, got {describe(value)}")
    if not value.isascii() and any(unicodedata.category(ch) in ("Cc", "Cf") for ch in value):
        raise fail(path, "must not contain control or format characters (newlines, tabs, "
                         "bidi overrides, zero-width marks, ...)")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise fail(path, "must not contain control characters (newlines, tabs, ...)")
    if value != value.strip():
        raise fail(path, "must not start or end with whitespace")
    if len(value.encode()) > max_len:
        raise fail(path, f"longer than {max_len} bytes")
    return value


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    """An object."""
    if not isinstance(value, Mapping):
        raise fail(path, f"expected an object, got {describe(value)}")
    return value


def sequence(value: Any, path: str, max_items: int = MAX_LIST_ITEMS) -> Sequence[Any]:
    """A list of at most `max_items` items."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise fail(path, f"expected a list, got {describe(value)}")
    if len(value) > max_items:
        raise fail(path, f"at most {max_items} items allowed, got {len(value)}")
    return value


def keys(
    obj: Mapping[str, Any], path: str, allowed: Sequence[str], required: Sequence[str] = ()
) -> None:
    """Only `allowed` keys, and every `required` one with a value."""
    for key in obj:
        if key not in allowed:
            raise fail(f"{path}.{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
    for key in required:
        if obj.get(key) is None:
            raise fail(f"{path}.{key}", "required key is missing")


def enum(value: Any, path: str, names: Mapping[str, int], what: str) -> int:
    """A name from names (case-insensitive) or one of its integer values."""
    if isinstance(value, str):
        for name, code in names.items():
            if name.lower() == value.lower():
                return code
    elif isinstance(value, int) and not isinstance(value, bool) and value in names.values():
        return value
    raise fail(path, f"expected a {what}: one of {', '.join(names)}, got {describe(value)}")


def _check_value(value: Any, path: str, lo: float | None, hi: float | None, whole: bool) -> None:
    number(value, path, lo, hi)
    if whole and value != int(value):
        raise fail(path, f"must be a whole number, got {value!r}")


def signal(
    value: Any,
    path: str,
    lo: float | None = 0,
    hi: float | None = None,
    whole: bool = False,
) -> None:
    """Checks a signal: a number, or {"keyframes", "period_s", "interpolate"}."""
    if is_number(value):
        _check_value(value, path, lo, hi, whole)
        return
    if not isinstance(value, Mapping):
        raise fail(path, f"expected number or signal object, got {describe(value)}")
    keys(value, path, ("keyframes", "period_s", "interpolate"), required=("keyframes",))
    frames = sequence(value["keyframes"], f"{path}.keyframes", MAX_KEYFRAMES)
    if not frames:
        raise fail(f"{path}.keyframes", "needs at least one [t, value] pair")
    period = value.get("period_s")
    if period is not None:
        number(period, f"{path}.period_s")
        if period <= 0:
            raise fail(f"{path}.period_s", "must be > 0")
    interpolate = value.get("interpolate", "linear")
    if interpolate not in ("linear", "step"):
        raise fail(f"{path}.interpolate", f'expected "linear" or "step", got {interpolate!r}')
    previous = -math.inf
    for i, frame in enumerate(frames):
        where = f"{path}.keyframes[{i}]"
        if isinstance(frame, str) or not isinstance(frame, Sequence) or len(frame) != 2:
            raise fail(where, f"expected a [t, value] pair, got {describe(frame)}")
        t = number(frame[0], f"{where}[0]")
        _check_value(frame[1], f"{where}[1]", lo, hi, whole)
        if t < previous:
            raise fail(f"{where}[0]", "keyframe times must not decrease")
        if period is not None and not 0 <= t <= period:
            raise fail(f"{where}[0]", f"with period_s, times must lie in [0, {period:g}]")
        previous = t


def counter(value: Any, path: str) -> None:
    """Checks a counter: an integer, or {"start": n, "rate_per_s": signal}."""
    if isinstance(value, int) and not isinstance(value, bool):
        integer(value, path, lo=0)
        return
    if not isinstance(value, Mapping):
        raise fail(path, f"expected integer or counter object, got {describe(value)}")
    keys(value, path, ("start", "rate_per_s"), required=("rate_per_s",))
    integer(value.get("start", 0), f"{path}.start", lo=0)
    signal(value["rate_per_s"], f"{path}.rate_per_s", lo=0)


def is_counter(value: Any) -> bool:
    """True for what `counter` accepts in form: an integer or a counter object."""
    if isinstance(value, Mapping):
        return "rate_per_s" in value or "start" in value
    return isinstance(value, int) and not isinstance(value, bool)


def normalize_pci_bus_id(value: Any, path: str) -> str:
    """The canonical NVML form "DDDDDDDD:BB:DD.F" of a PCI bus id."""
    string(value, path, 31)
    match = _PCI_BUS_ID.match(value)
    if not match or int(match["device"], 16) > 0x1F:
        raise fail(path, f'expected a PCI bus id like "00000000:18:00.0", got {value!r}')
    domain = int(match["domain"] or "0", 16)
    return (
        f"{domain:08X}:{int(match['bus'], 16):02X}:"
        f"{int(match['device'], 16):02X}.{int(match['function'])}"
    )


def signal_check(
    lo: float | None = 0, hi: float | None = None, whole: bool = False
) -> Callable[[Any, str], None]:
    """`signal` with these bounds, as a check(value, path)."""
    def check(value: Any, path: str) -> None:
        signal(value, path, lo, hi, whole)

    return check


def int_check(lo: int = 0, hi: int | None = None) -> Callable[[Any, str], None]:
    """`integer` with these bounds, as a check(value, path)."""
    def check(value: Any, path: str) -> None:
        integer(value, path, lo, hi)

    return check


def str_check(max_len: int) -> Callable[[Any, str], None]:
    """`string` of at most `max_len` bytes, as a check(value, path)."""
    def check(value: Any, path: str) -> None:
        string(value, path, max_len)

    return check


def keys_with(
    obj: Mapping[str, Any], path: str, checks: Mapping[str, Callable[[Any, str], None]]
) -> None:
    """Only the keys of `checks`, each value (unless null) passing its check."""
    keys(obj, path, tuple(checks))
    for key, value in obj.items():
        if value is not None:
            checks[key](value, f"{path}.{key}")


def pcie_link(value: Any, path: str) -> None:
    """A device's `pcie_link`: current and maximum generation and width (any vendor)."""
    link = mapping(value, path)
    required = ("gen_current", "gen_max", "width_current", "width_max")
    keys(link, path, (*required, "gen_gpu_max"), required=required)
    for key in (*required, "gen_gpu_max"):
        if key in link:
            integer(link[key], f"{path}.{key}", lo=0, hi=64)


def process_window(process: Mapping[str, Any], path: str) -> None:
    """A process entry's optional `from_s`/`until_s`: listed only for from_s <= t < until_s."""
    start = number(process.get("from_s", 0), f"{path}.from_s", lo=0)
    until = process.get("until_s")
    if until is not None and number(until, f"{path}.until_s") <= start:
        raise fail(f"{path}.until_s", "must be after from_s")
