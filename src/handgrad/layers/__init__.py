"""Stateful layers: validated config, lazily built parameters, gradients, caches."""

from .activations import (
    ELU,
    GELU,
    SELU,
    Activation,
    HardSigmoid,
    Identity,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    Softmax,
    Softplus,
    Tanh,
)
from .base import Layer, WeightedLayer
from .conv import Conv1D, Conv2D, ConvTranspose1D, ConvTranspose2D, Deconv2D
from .core import Dense, Dropout, Flatten, Reshape
from .pooling import (
    AvgPool1D,
    AvgPool2D,
    GlobalAvgPool1D,
    GlobalAvgPool2D,
    GlobalMaxPool1D,
    GlobalMaxPool2D,
    MaxPool1D,
    MaxPool2D,
)

REGISTRY: dict = {}


def register(cls):
    """Make a layer class loadable from a saved config by its class name."""
    REGISTRY[cls.__name__] = cls
    return cls


for _cls in (ELU, GELU, SELU, HardSigmoid, Identity, LeakyReLU, LogSoftmax, ReLU, Sigmoid,
             Softmax, Softplus, Tanh, Conv1D, Conv2D, ConvTranspose1D, ConvTranspose2D, Dense,
             Dropout, Flatten, Reshape, AvgPool1D, AvgPool2D, GlobalAvgPool1D, GlobalAvgPool2D,
             GlobalMaxPool1D, GlobalMaxPool2D, MaxPool1D, MaxPool2D):
    register(_cls)
