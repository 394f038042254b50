"""NVIDIA GPUs through NVML (`nvidia-ml-py`)."""

from .backend import NvidiaBackend

__all__ = ["NvidiaBackend"]
