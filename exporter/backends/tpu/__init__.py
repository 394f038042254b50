"""The TPU backend: Google TPU chips through libtpu's runtime metric service."""

from .backend import TpuBackend

__all__ = ["TpuBackend"]
