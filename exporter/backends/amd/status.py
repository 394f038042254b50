"""amdsmi status codes: the C enum `amdsmi_status_t` that AmdSmiLibraryException carries.

The values are the library's ABI, the same in every amdsmi release; the Python
package has no enum for them (its ``amdsmi_wrapper`` holds them as
``AMDSMI_STATUS_*`` constants, and loading it needs the library).
"""

from __future__ import annotations

# name (without AMDSMI_STATUS_) -> code, as AmdSmiLibraryException.err_code carries it
AMDSMI_STATUS: dict[str, int] = {
    "INVAL": 1,
    "NOT_SUPPORTED": 2,
    "NOT_YET_IMPLEMENTED": 3,
    "FAIL_LOAD_MODULE": 4,
    "FAIL_LOAD_SYMBOL": 5,
    "DRM_ERROR": 6,
    "API_FAILED": 7,
    "TIMEOUT": 8,
    "RETRY": 9,
    "NO_PERM": 10,
    "INTERRUPT": 11,
    "IO": 12,
    "ADDRESS_FAULT": 13,
    "FILE_ERROR": 14,
    "OUT_OF_RESOURCES": 15,
    "INTERNAL_EXCEPTION": 16,
    "INPUT_OUT_OF_BOUNDS": 17,
    "INIT_ERROR": 18,
    "REFCOUNT_OVERFLOW": 19,
    "DIRECTORY_NOT_FOUND": 20,
    "BUSY": 30,
    "NOT_FOUND": 31,
    "NOT_INIT": 32,
    "NO_SLOT": 33,
    "DRIVER_NOT_LOADED": 34,
    "MORE_DATA": 39,
    "NO_DATA": 40,
    "INSUFFICIENT_SIZE": 41,
    "UNEXPECTED_SIZE": 42,
    "UNEXPECTED_DATA": 43,
    "NON_AMD_CPU": 44,
    "NO_ENERGY_DRV": 45,
    "NO_MSR_DRV": 46,
    "NO_HSMP_DRV": 47,
    "NO_HSMP_SUP": 48,
    "NO_HSMP_MSG_SUP": 49,
    "HSMP_TIMEOUT": 50,
    "NO_DRV": 51,
    "FILE_NOT_FOUND": 52,
    "ARG_PTR_NULL": 53,
    "AMDGPU_RESTART_ERR": 54,
    "SETTING_UNAVAILABLE": 55,
    "CORRUPTED_EEPROM": 56,
    "MAP_ERROR": 0xFFFFFFFE,
    "UNKNOWN_ERROR": 0xFFFFFFFF,
}

KIND_BY_CODE: dict[int, str] = {code: name.lower() for name, code in AMDSMI_STATUS.items()}


def status_kind(code: int | None) -> str:
    """A short, stable name for a status: ``not_supported``, ``not_found``, ..."""
    if code is None:
        return "parameter"
    return KIND_BY_CODE.get(code, f"status_{code}")
