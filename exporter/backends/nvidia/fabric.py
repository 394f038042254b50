"""The GPU's NVLink fabric, read every cycle: state, registration status, health.

`nvmlDeviceGetGpuFabricInfoV` with the v3 struct (health summary included); a
driver that only knows v2 answers ARGUMENT_VERSION_MISMATCH, and the device is
read with v2 (no summary) from then on. A GPU without an NVLink fabric answers
NOT_SUPPORTED (or state NOT_SUPPORTED): its fabric series are absent.

Every cycle, not on the slow cadence: the call is cheap (microseconds on a real H200),
the readings are made again only when the answer changes, and a change of health is
an event whose time matters (the tab's finding, a recording of it).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pynvml

from ... import catalog as m
from ...model import Reading
from ..calls import reading
from .calls import DeviceCalls, error_kind
from .fabric_health import (
    INCORRECT_CONFIGURATION,
    STATE_NOT_SUPPORTED,
    STATES,
    SUMMARIES,
    SUMMARY_NOT_SUPPORTED,
    issues,
)

if TYPE_CHECKING:
    from .probes import DeviceState

_V2_ONLY = "fabric_v2_only"  # DeviceState.extra key: the driver rejected the v3 struct
_LAST_ANSWER = "fabric_answer"  # DeviceState.extra key: the last answer and its readings
_VERSION_MISMATCH = frozenset({pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH})


def nvmlDeviceGetGpuFabricInfoV(handle: Any, struct: type = pynvml.c_nvmlGpuFabricInfo_v3_t,
                                ) -> Any:
    """The fabric info in a fresh struct of `struct`'s version (the binding fills it in place).

    Named after the NVML function so that errors are tallied under its name.
    """
    info = struct()  # its __init__ sets the version field, which NVML checks
    pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    return info


def read_fabric(nvml: DeviceCalls, handle: Any, state: DeviceState) -> Any | None:
    """The device's fabric info (v3 struct, or v2 on older drivers), None when not answered."""
    if not state.extra.get(_V2_ONLY):
        info = nvml.call(nvmlDeviceGetGpuFabricInfoV, handle, key="v3",
                         empty_on=_VERSION_MISMATCH, empty=False)
        if info is not False:
            return info
        state.extra[_V2_ONLY] = True
    return nvml.call(nvmlDeviceGetGpuFabricInfoV, handle, pynvml.c_nvmlGpuFabricInfo_v2_t,
                     key="v2")


def _name(names: Mapping[str, int], code: int) -> str:
    return next((name for name, value in names.items() if value == code), "not_supported")


def fabric(nvml: DeviceCalls, handle: Any, state: DeviceState) -> tuple[Reading, ...]:
    """Fabric state, registration status, health summary and health-mask issues.

    The readings are built again only when the answer changes (it rarely does)."""
    info = read_fabric(nvml, handle, state)
    if info is None:
        return ()
    # The answer's bytes, compared in one piece (reading its fields through the binding costs
    # more than the call, every cycle, for an answer that rarely changes).
    answer = bytes(info)
    last = state.extra.get(_LAST_ANSWER)
    if last is None or last[0] != answer:
        last = state.extra[_LAST_ANSWER] = (answer, _readings_of(info))
    return last[1]


def _readings_of(info: Any) -> tuple[Reading, ...]:
    if info.state == STATE_NOT_SUPPORTED or info.state not in STATES.values():
        return ()
    return tuple(_fabric_readings(info))


def _fabric_readings(info: Any) -> Iterator[Reading]:
    yield reading(m.FABRIC_STATE, info.state)
    yield reading(m.FABRIC_STATUS, info.status)
    summary = getattr(info, "healthSummary", SUMMARY_NOT_SUPPORTED)
    if summary != SUMMARY_NOT_SUPPORTED and summary in SUMMARIES.values():
        yield reading(m.FABRIC_HEALTH_SUMMARY, summary)
    for field, issue in issues(info.healthMask):
        yield reading(m.FABRIC_HEALTH_ISSUE, issue, field=field.issue)
    configuration = INCORRECT_CONFIGURATION.code(info.healthMask)
    yield reading(m.FABRIC_INFO, 1, cluster_uuid=uuid_text(bytes(info.clusterUuid)),
                  clique_id=str(info.cliqueId), state=_name(STATES, info.state),
                  status=error_kind(pynvml.NVMLError(info.status)) if info.status else "success",
                  health_summary=_name(SUMMARIES, summary),
                  incorrect_configuration=_name(INCORRECT_CONFIGURATION.values, configuration))


def uuid_text(raw: bytes) -> str:
    """A fabric cluster UUID's 16 bytes as 8-4-4-4-12 hex text."""
    hexa = raw.hex()
    return f"{hexa[:8]}-{hexa[8:12]}-{hexa[12:16]}-{hexa[16:20]}-{hexa[20:32]}"
