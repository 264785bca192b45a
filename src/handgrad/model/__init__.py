"""Models: ``Sequential`` (a chain of layers with the training loop)."""

from .sequential import Sequential

__all__ = ["Sequential"]
