"""Named architectures for the command line, one small network per dataset."""

from __future__ import annotations

from .. import layers as L
from ..model.sequential import Sequential
from .resnet import resnet1d, resnet2d


def mnist1d_cnn():
    """1-D CNN for MNIST-1D (N, 40, 1): three conv blocks, two max-pools, a dense head."""
    return [
        L.Conv1D(64, 5, padding=2), L.ReLU(), L.MaxPool1D(2),
        L.Conv1D(64, 3, padding=1), L.ReLU(), L.MaxPool1D(2),
        L.Conv1D(64, 3, padding=1), L.ReLU(),
        L.Flatten(), L.Dense(10),
    ]


def image_cnn(num_classes, height):
    """2-D CNN for small images (N, H, W, 1): two conv blocks and global average pooling."""
    blocks = [
        L.Conv2D(32, 3, padding=1), L.ReLU(),
        L.Conv2D(32, 3, padding=1), L.ReLU(), L.MaxPool2D(2),
        L.Conv2D(64, 3, padding=1), L.ReLU(),
    ]
    if height >= 16:
        blocks += [L.MaxPool2D(2), L.Conv2D(64, 3, padding=1), L.ReLU()]
    return [*blocks, L.GlobalAvgPool2D(), L.Dense(num_classes)]


def mlp(num_classes):
    """Two hidden layers of 256 and 128 ReLU units on the flattened input."""
    return [L.Flatten(), L.Dense(256), L.ReLU(), L.Dense(128), L.ReLU(),
            L.Dense(num_classes)]


def sequence_gru(num_classes, input_shape, hidden=64):
    """GRU classifier for sequences (N, T, F): one GRU layer of ``hidden`` units, its last
    output into a dense head. Images (N, H, W, C) are read row by row as (N, H, W*C)."""
    rows = [L.Reshape((input_shape[0], -1))] if len(input_shape) == 3 else []
    return [*rows, L.GRU(hidden, return_sequences=False), L.Dense(num_classes)]


MODELS = ("resnet", "cnn", "mlp", "gru")


def build(model_name, dataset, seed=0, dtype=None):
    """A fresh, built model for ``dataset`` (a :class:`handgrad.data.Dataset`): a graph
    ``Model`` for "resnet", a ``Sequential`` for the others; parameters of ``dtype``
    (default float32)."""
    shape = dataset.input_shape
    if model_name == "resnet" and len(shape) == 2:
        return resnet1d(dataset.num_classes, shape, seed=seed, dtype=dtype)
    if model_name == "resnet" and len(shape) == 3:
        return resnet2d(dataset.num_classes, shape, seed=seed, dtype=dtype)
    if model_name == "mlp":
        layers = mlp(dataset.num_classes)
    elif model_name == "cnn" and len(shape) == 2:
        layers = mnist1d_cnn()[:-1] + [L.Dense(dataset.num_classes)]
    elif model_name == "cnn" and len(shape) == 3:
        layers = image_cnn(dataset.num_classes, shape[0])
    elif model_name == "gru" and len(shape) in (2, 3):
        layers = sequence_gru(dataset.num_classes, shape)
    else:
        raise ValueError(f"unknown model {model_name!r} for inputs of shape {shape}; "
                         f"choose one of {', '.join(MODELS)}")
    return Sequential(layers, seed=seed, dtype=dtype, input_shape=shape)
