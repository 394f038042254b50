"""Argument types the `ray-accel` subcommands share: bounded numbers, node labels, scenarios."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence

from .catalog import CATALOG, NODE_LABELS

# Label names a --node-label may not take: the agent's own node labels and metric labels.
RESERVED_LABELS = frozenset({*NODE_LABELS, *(n for spec in CATALOG for n in spec.all_labels)})
# Prometheus' label names (names starting with "__" are its own, and refused in a scrape).
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def bounded_number(
    kind: Callable[[str], float], low: float, high: float, what: str
) -> Callable[[str], float]:
    """An argparse type: `kind(text)` between `low` and `high`, else a message naming `what`."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be between {low:g} and {high:g}, "
                                             f"got {text}")
        return value

    return parse


def scenario_name(text: str) -> str:
    """An argparse type for `--simulate`: a scenario's name or file, never empty (an empty
    one would read this machine's real hardware instead)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a shipped scenario's name or a JSON file, "
                                         "got an empty one")
    return text


def label_pair(text: str) -> tuple[str, str]:
    """An argparse type: `NAME=VALUE` with NAME a Prometheus label name of the user's own."""
    key, sep, value = text.partition("=")
    if not sep or not _LABEL_NAME.fullmatch(key) or key.startswith("__"):
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with NAME a label name (ASCII letters, digits and _, not "
            f"starting with a digit or __), got {text!r}"
        )
    return key, value


def node_label_problem(pairs: Sequence[tuple[str, str]]) -> str | None:
    """What is wrong with the `--node-label` pairs as a whole (a name the agent uses, or one
    given twice), or None."""
    reserved = sorted({key for key, _ in pairs} & RESERVED_LABELS)
    if reserved:
        return f"--node-label: {', '.join(reserved)} is already used by the agent's own labels"
    names = [key for key, _ in pairs]
    twice = sorted({key for key in names if names.count(key) > 1})
    if twice:
        return f"--node-label: {', '.join(twice)} given more than once"
    return None
