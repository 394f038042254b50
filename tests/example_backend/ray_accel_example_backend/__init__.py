"""An example ray-accel backend for a made-up vendor library (see docs/backends.md)."""

from .backend import ExampleBackend

__all__ = ["ExampleBackend"]
