"""The Tpu backend."""

from .backend import TpuBackend

__all__ = ["TpuBackend"]
