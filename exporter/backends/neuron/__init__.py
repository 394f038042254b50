"""The Neuron backend."""

from .backend import NeuronBackend

__all__ = ["NeuronBackend"]
