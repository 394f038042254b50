"""The Gaudi backend."""

from .backend import GaudiBackend

__all__ = ["GaudiBackend"]
