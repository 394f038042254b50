"""Slotted records read like the dicts they replace.

The head keeps 80,000 devices' summaries; a dict per device costs its hash table
(about 900 bytes for two dozen fields), a slotted object eight bytes a field.
`FieldRecord` subclasses name their fields in `__slots__` and give every field a
default in `DEFAULTS`; a field the record is not given holds that (shared)
default. They answer `record["name"]`, `.get()` and `in` as the dict form did
(an unknown name raises AttributeError rather than KeyError: the lookup is the
slot's own, as fast as a dict's), so code that reads both the summary form and
a full snapshot's dict form walks them alike, and `as_dict()` gives the dict
form back (for answers that list every field).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from itertools import repeat
from typing import Any, ClassVar


class FieldRecord:
    """A record of named fields with shared defaults (see the module's docstring)."""

    __slots__ = ()
    DEFAULTS: ClassVar[Mapping[str, Any]] = {}
    _NAMES: ClassVar[tuple[str, ...]] = ()
    _DEFAULT_VALUES: ClassVar[tuple[Any, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._NAMES = tuple(cls.DEFAULTS)
        cls._DEFAULT_VALUES = tuple(cls.DEFAULTS.values())

    def __init__(self, fields: Mapping[str, Any]) -> None:
        """The fields of `fields` this record has (others are ignored), the rest their
        defaults."""
        # One pass in C (the head makes 80,000 of these for a 10,000-node fleet's first
        # round): setattr(self, name, fields.get(name, default)) for every field.
        names = self._NAMES
        deque(map(object.__setattr__, repeat(self, len(names)), names,
                  map(fields.get, names, self._DEFAULT_VALUES)), maxlen=0)

    # record["name"]: the slot's own lookup, with no Python frame in between
    __getitem__ = object.__getattribute__
    __setitem__ = object.__setattr__

    def __contains__(self, name: object) -> bool:
        return name in self.DEFAULTS

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default) if name in self.DEFAULTS else default

    def as_dict(self) -> dict[str, Any]:
        """Every field as the dict form has it."""
        return {name: getattr(self, name) for name in self.DEFAULTS}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FieldRecord):
            return self.as_dict() == other.as_dict()
        if isinstance(other, Mapping):
            return self.as_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, like the dict form

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.as_dict()!r})"
