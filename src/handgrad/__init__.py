"""handgrad: neural networks in NumPy with explicit, hand-derived backward passes.

``handgrad.ops`` holds the stateless kernels (each a forward and a backward),
``handgrad.ops.reference`` their loop twins, ``handgrad.layers`` the stateful
layers, ``Sequential`` and ``Model`` the models with their training loop and
``handgrad.zoo`` the named networks and models (imported here, so that ``handgrad.io.load``
finds the zoo's model classes in a fresh interpreter). ``device="cuda"`` on any layer or
model (or ``model.to("cuda")``) runs the same kernels on CuPy arrays (the ``cuda`` extra).
"""

from . import layers, metrics, ops, regularizers, zoo
from ._device import to_device, to_host
from .io import load as load_model
from .model import Input, Model, Sequential

__version__ = "0.1.0"
__all__ = ["Input", "Model", "Sequential", "layers", "load_model", "metrics", "ops",
           "regularizers", "to_device", "to_host", "zoo"]
