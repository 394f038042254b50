"""Which slice this host belongs to: the values Ray turns into its TPU node labels.

Ray labels a TPU node with ``ray.io/tpu-slice-name``, ``ray.io/tpu-worker-id``,
``ray.io/tpu-topology`` and ``ray.io/tpu-pod-type``, read on GKE from the
variables below (on a GCE TPU VM from the metadata server, which the backend
does not query). The agent runs beside the raylet with the same environment, so
it reads the same variables; the slice name also reaches the node's placement
from Ray's label (`exporter/placement.py`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# device fact -> GKE variable Ray reads for the matching node label
SLICE_VARIABLES: dict[str, str] = {
    "tpu_slice_name": "TPU_NAME",
    "tpu_worker_id": "TPU_WORKER_ID",
    "tpu_topology": "TPU_TOPOLOGY",
    "accelerator_type": "TPU_ACCELERATOR_TYPE",
}


def slice_facts(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Slice name, worker id, topology and accelerator type, where the environment has them."""
    environ = os.environ if environ is None else environ
    return {fact: environ[variable].strip() for fact, variable in SLICE_VARIABLES.items()
            if environ.get(variable, "").strip()}
