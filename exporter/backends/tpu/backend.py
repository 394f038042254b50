"""The Tpu backend (not yet reading anything: reports no TPU chips)."""

from __future__ import annotations

from collections.abc import Sequence

from ...model import Device, DeviceSample
from ..base import Backend, BackendUnavailable


class TpuBackend(Backend):
    """Reads TPU chips."""

    name = "tpu"
    vendor = "google"

    def open(self) -> Sequence[Device]:
        raise BackendUnavailable("no TPU chips found")

    def sample(self, device: Device) -> DeviceSample:
        raise BackendUnavailable("no TPU chips found")
