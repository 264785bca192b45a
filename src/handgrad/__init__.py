"""handgrad: neural networks in NumPy with explicit, hand-derived backward passes."""

__version__ = "0.1.0"
