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
from .attention import MultiHeadAttention
from .base import Layer, WeightedLayer
from .conv import Conv1D, Conv2D, ConvTranspose1D, ConvTranspose2D, Deconv2D
from .core import Dense, Dropout, Flatten, Reshape
from .embedding import Embedding
from .normalization import BatchNorm, GroupNorm, InstanceNorm, LayerNorm
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
from .recurrent import GRU, LSTM, RNN, BiLSTM
from .structure import Add, Concatenate, Multiply, Residual
from .wavenet import WaveNetBlock

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

# Attention, merge and residual-structure layers.
for _cls in (MultiHeadAttention, Add, Concatenate, Multiply, Residual, WaveNetBlock):
    register(_cls)

# Normalization and embedding layers.
for _cls in (BatchNorm, Embedding, GroupNorm, InstanceNorm, LayerNorm):
    register(_cls)

# Recurrent layers.
for _cls in (RNN, LSTM, GRU, BiLSTM):
    register(_cls)
