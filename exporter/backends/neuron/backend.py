"""The Neuron backend (not yet reading anything: reports no Neuron devices)."""

from __future__ import annotations

from collections.abc import Sequence

from ...model import Device, DeviceSample
from ..base import Backend, BackendUnavailable


class NeuronBackend(Backend):
    """Reads Neuron devices."""

    name = "neuron"
    vendor = "aws"

    def open(self) -> Sequence[Device]:
        raise BackendUnavailable("no Neuron devices found")

    def sample(self, device: Device) -> DeviceSample:
        raise BackendUnavailable("no Neuron devices found")
