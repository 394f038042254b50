"""Argument types the `ray-accel` subcommands share: bounded numbers and node labels."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .catalog import CATALOG, NODE_LABELS

# Label names a --node-label may not take: the agent's own node labels and metric labels.
RESERVED_LABELS = frozenset({*NODE_LABELS, *(n for spec in CATALOG for n in spec.all_labels)})


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


def label_pair(text: str) -> tuple[str, str]:
    """An argparse type: `NAME=VALUE` with a label-safe NAME."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with a label-safe NAME, got {text!r}"
        )
    return key, value
