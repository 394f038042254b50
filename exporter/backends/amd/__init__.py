"""AMD GPUs through the ``amdsmi`` Python API (ROCm's amd-smi-lib)."""

from .backend import AmdBackend

__all__ = ["AmdBackend"]
