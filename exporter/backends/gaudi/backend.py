"""The Gaudi backend (not yet reading anything: reports no Gaudi devices)."""

from __future__ import annotations

from collections.abc import Sequence

from ...model import Device, DeviceSample
from ..base import Backend, BackendUnavailable


class GaudiBackend(Backend):
    """Reads Gaudi devices."""

    name = "gaudi"
    vendor = "intel"

    def open(self) -> Sequence[Device]:
        raise BackendUnavailable("no Gaudi devices found")

    def sample(self, device: Device) -> DeviceSample:
        raise BackendUnavailable("no Gaudi devices found")
