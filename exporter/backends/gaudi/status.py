"""HLML return codes: the C enum `hlml_return_t` that pyhlml's HLMLError carries as `.value`.

The values are the library's ABI (pyhlml 1.24 lists them in
``pyhlml_types_generated.HLML_RETURN``); they are spelled out here so that
the backend does not depend on where a pyhlml release keeps them.
"""

from __future__ import annotations

# name (without HLML_ERROR_) -> code, as HLMLError.value carries it
HLML_RETURN: dict[str, int] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "AIP_IS_LOST": 15,
    "MEMORY": 20,
    "NO_DATA": 21,
    "UNKNOWN": 49,
}

KIND_BY_CODE: dict[int, str] = {code: name.lower() for name, code in HLML_RETURN.items()}


def status_kind(code: object) -> str:
    """A short, stable name for an HLML code: ``not_supported``, ``aip_is_lost``, ..."""
    if not isinstance(code, int):
        return "unknown_code"
    return KIND_BY_CODE.get(code, f"code_{code}")
