"""amdsmi's exceptions, with the real classes, attributes and messages."""

from __future__ import annotations

from . import amdsmi_wrapper

_DESCRIPTIONS = {
    "INVAL": "Invalid parameters",
    "NOT_SUPPORTED": "Feature not supported",
    "NOT_YET_IMPLEMENTED": "Feature not yet implemented",
    "TIMEOUT": "Timeout in API call",
    "RETRY": "Retry operation",
    "NO_PERM": "Permission Denied",
    "IO": "I/O Error",
    "FILE_ERROR": "Error opening file",
    "INIT_ERROR": "Initialization error",
    "BUSY": "Device busy",
    "NOT_FOUND": "Device Not found",
    "NOT_INIT": "Device not initialized",
    "DRIVER_NOT_LOADED": "Driver not loaded",
    "NO_DATA": "No data was found for given input",
    "UNKNOWN_ERROR": "An unknown error occurred",
}


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    """A status other than success from the library; `err_code` is the amdsmi_status_t."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.set_err_info()

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else str(self.err_info).split(" - ")[0]

    def get_error_code(self) -> int:
        return self.err_code

    def set_err_info(self) -> None:
        name = amdsmi_wrapper.amdsmi_status_t__enumvalues.get(self.err_code)
        if name is None:
            self.err_info = "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"
            return
        short = name.removeprefix("AMDSMI_STATUS_")
        self.err_info = f"{name} - {_DESCRIPTIONS.get(short, short.replace('_', ' ').title())}"


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(amdsmi_wrapper.AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(amdsmi_wrapper.AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, receivedValue, expectedType, msg=None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.actualType = type(receivedValue)
        self.expectedType = expectedType
        self.err_msg = msg or ("Invalid parameter:\n"
                               f"Actual type: {self.actualType}\n"
                               f"Expected type: {self.expectedType}")

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiKeyException(AmdSmiException):
    def __init__(self, key) -> None:
        super().__init__()
        self.key = key
        self.err_msg = "Key " + key + " is missing from dictionary"

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiBdfFormatException(AmdSmiException):
    def __init__(self, bdf) -> None:
        super().__init__()
        self.bdf = bdf

    def __str__(self) -> str:
        return (f"Wrong BDF format: {self.bdf}. \n"
                "BDF string should be: <domain>:<bus>:<device>.<function>\n"
                " or <bus>:<device>.<function> in hexcode format.")
