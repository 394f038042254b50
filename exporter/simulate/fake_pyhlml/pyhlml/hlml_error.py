"""HLMLError, and the per-code subclasses pyhlml creates in hlmlInit (HLMLError_NotSupported...)."""

from string import capwords
from sys import modules
from typing import ClassVar

from . import hlml_types as hlml_t


def ErrorsAsClass() -> None:
    """Creates one HLMLError subclass per HLML_ERROR_* code, as pyhlml does in hlmlInit."""
    this_module = modules[__name__]
    for name in [n for n in dir(hlml_t.HLML_RETURN) if n.startswith("HLML_ERROR")]:
        class_name = "HLMLError_" + capwords(name.replace("HLML_ERROR_", ""), "_").replace("_", "")
        code = getattr(hlml_t.HLML_RETURN, name)

        def new(typ, code=code):
            return HLMLError.__new__(typ, code)

        cls = type(class_name, (HLMLError,), {"__new__": new})
        cls.__module__ = __name__
        setattr(this_module, class_name, cls)
        HLMLError._cMap[code] = cls


class HLMLError(Exception):
    """An HLML call failed; `value` is the hlml_return_t code."""

    _cMap: ClassVar[dict[int, type]] = {}

    def __new__(typ, value):
        if typ == HLMLError:
            typ = HLMLError._cMap.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return f"HLML Error with code {self.value}"

    def __eq__(self, other) -> bool:
        return self.value == other.value

