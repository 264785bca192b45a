"""Fitting a dataset's examples to a model's input shape: the one simple, documented
fit that lets a model made for other inputs (a converted torchvision network taking
32x32 RGB images) train on the built-in data (8x8 gray digits).

    x = fit_to_input(digits.x_train, (32, 32, 3))   # (N, 8, 8, 1) -> (N, 32, 32, 3)
"""

from __future__ import annotations

import numpy as np

from .._checks import describe, is_int


def _shape(op, input_shape):
    if not isinstance(input_shape, (tuple, list)) or not input_shape or not all(
            is_int(d) and d >= 1 for d in input_shape):
        raise TypeError(f"{op}: 'input_shape' must be a tuple of ints >= 1 (spatial sizes, "
                        f"then channels); received {describe(input_shape)}")
    return tuple(int(d) for d in input_shape)


def fit_factor(data_shape, input_shape) -> int:
    """The whole factor :func:`fit_to_input` enlarges each spatial axis by; a ValueError
    naming both shapes when there is no simple fit."""
    op = "fit_to_input"
    data, model = _shape(op, data_shape), _shape(op, input_shape)
    if len(data) != len(model):
        raise ValueError(f"{op}: the examples have shape {data} and the model takes "
                         f"{model}: another number of axes; no simple fit")
    if data[-1] not in (1, model[-1]):
        raise ValueError(f"{op}: the examples have shape {data} and the model takes "
                         f"{model}: {data[-1]} channels cannot become {model[-1]} (only "
                         f"one gray channel is replicated)")
    small = [i for i, (d, m) in enumerate(zip(data[:-1], model[:-1])) if d > m]
    if small:
        raise ValueError(f"{op}: the examples have shape {data} and the model takes "
                         f"{model}: the model's input is smaller along axis {small[0] + 1} "
                         f"(examples are enlarged and padded, never cropped)")
    return min((m // d for d, m in zip(data[:-1], model[:-1])), default=1)


def fit_to_input(x, input_shape):
    """Examples ``x`` of shape ``(N, *spatial, C)`` as ``(N, *input_shape)``: each
    spatial axis enlarged by the largest whole factor ``k`` that fits every axis (each
    value repeated ``k`` times: nearest-neighbour upsampling), then zero-padded evenly
    (the odd value after) to the model's size; a single channel is replicated to the
    model's channels. Refuses (ValueError naming both shapes) another rank, other
    channel counts or a model input smaller than the examples. Returns ``x`` itself when
    it already fits."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")) or x.ndim < 2:
        raise TypeError(f"fit_to_input: 'x' must be an array (N, *spatial, C); received "
                        f"{describe(x)}")
    target = _shape("fit_to_input", input_shape)
    factor = fit_factor(tuple(x.shape[1:]), target)
    if tuple(x.shape[1:]) == target:
        return x
    for axis in range(1, x.ndim - 1):
        x = np.repeat(x, factor, axis=axis)
    pads = [(0, 0)] + [((m - d) // 2, m - d - (m - d) // 2)
                       for d, m in zip(x.shape[1:-1], target[:-1])] + [(0, 0)]
    x = np.pad(x, pads)
    if x.shape[-1] != target[-1]:
        x = np.repeat(x, target[-1], axis=-1)
    return x
