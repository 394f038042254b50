"""Slotted records read like the dicts they replace.

The head keeps 80,000 devices' summaries; a dict per device costs its hash table
(about 900 bytes for two dozen fields), a slotted object eight bytes a field.
`FieldRecord` subclasses name their fields in `__slots__` and give every field a
default in `DEFAULTS`; a field never set reads as its default without being
stored. They answer `record["name"]`, `.get()` and `in` as the dict form did, so
code that reads both the summary form and a full snapshot's dict form walks them
alike, and `as_dict()` gives the whole dict form back (for answers that list
every field).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class FieldRecord:
    """A record of named fields with shared defaults (see the module's docstring)."""

    __slots__ = ()
    DEFAULTS: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, fields: Mapping[str, Any]) -> None:
        """The fields of `fields` this record has (others are ignored)."""
        for name, value in fields.items():
            if name in self.DEFAULTS:
                object.__setattr__(self, name, value)

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            if name in self.DEFAULTS:
                return self.DEFAULTS[name]
            raise KeyError(name) from None

    def __setitem__(self, name: str, value: Any) -> None:
        if name not in self.DEFAULTS:
            raise KeyError(f"{type(self).__name__} has no field {name!r}")
        object.__setattr__(self, name, value)

    def __contains__(self, name: object) -> bool:
        """Whether the field was set (a default is not stored), as `in` on the dict form."""
        return isinstance(name, str) and name in self.DEFAULTS and hasattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        """The field's value where it was set, else `default` (as dict.get)."""
        return getattr(self, name, default) if name in self.DEFAULTS else default

    def as_dict(self) -> dict[str, Any]:
        """Every field, the ones not set with their defaults."""
        return {name: self[name] for name in self.DEFAULTS}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FieldRecord):
            return self.as_dict() == other.as_dict()
        if isinstance(other, Mapping):
            return self.as_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, like the dict form

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.as_dict()!r})"
