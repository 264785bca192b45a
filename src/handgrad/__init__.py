"""handgrad: neural networks in NumPy with explicit, hand-derived backward passes.

``handgrad.ops`` holds the stateless kernels (each a forward and a backward),
``handgrad.ops.reference`` their loop twins, ``handgrad.layers`` the stateful
layers and ``Sequential`` the model with its training loop.
"""

from . import layers, ops
from .model import Input, Model, Sequential

__version__ = "0.1.0"
__all__ = ["Input", "Model", "Sequential", "layers", "ops"]
