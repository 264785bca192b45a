"""Models: ``Sequential`` (a chain of layers) and ``Model`` (any graph of layer calls
from ``Input`` tensors), both with the training loop."""

from .graph import Input, Model
from .sequential import Sequential

__all__ = ["Input", "Model", "Sequential"]
