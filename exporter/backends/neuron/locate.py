"""Where the backend finds ``neuron-monitor``."""

from __future__ import annotations

import os
import shutil

from ..base import BackendUnavailable

# Names the neuron-monitor executable to run, overriding the search below.
MONITOR_ENV = "RAY_ACCEL_NEURON_MONITOR"
# Where the aws-neuronx-tools package installs it.
DEFAULT_MONITOR = "/opt/aws/neuron/bin/neuron-monitor"


def find_monitor() -> str:
    """$RAY_ACCEL_NEURON_MONITOR, else ``neuron-monitor`` on PATH, else the package's path.

    Raises:
        BackendUnavailable: none of them is an executable file.
    """
    named = os.environ.get(MONITOR_ENV)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        raise BackendUnavailable(f"{MONITOR_ENV}={named} is not an executable file")
    found = shutil.which("neuron-monitor")
    if found:
        return found
    if os.path.isfile(DEFAULT_MONITOR) and os.access(DEFAULT_MONITOR, os.X_OK):
        return DEFAULT_MONITOR
    raise BackendUnavailable(
        "neuron-monitor not found (install aws-neuronx-tools, or set "
        f"{MONITOR_ENV}): no Neuron devices can be read")
