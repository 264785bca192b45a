"""Argument checks of ``fit``, ``evaluate`` and ``predict``: the data arrays, the
validation split and the layout of the inputs (handgrad is channels-last).

Channels-first data is refused, not warned about: a transposed image still trains (a
convolution over the wrong axes), so a warning scrolls away while the run is wasted.
The check is a heuristic for a model built from the data (no ``input_shape``): an input
of a convolution or pooling layer whose channel axis would be small (<= 4) while every
"spatial" axis is >= 8, e.g. ``(N, 1, 28, 28)`` or ``(N, 3, 32, 32)``. Real
channels-last data (``(N, 28, 28, 1)``, ``(N, 40, 1)``, ``(N, 4, 4, 64)``, sequences)
passes; a model built with ``input_shape`` is never second-guessed, which is also the
way to confirm an unusual layout. A built model reports a rank that differs from its
``input_shape``, or a shape that is its ``input_shape`` with the channel axis first.
"""

from __future__ import annotations

import numpy as np

from .._checks import describe, is_int
from .._hyper import number

_CHANNELS_FIRST_MAX = 4  # at most this many channels on axis 1 ...
_SPATIAL_MIN = 8  # ... and at least this many positions on every later axis


def _brief(value) -> str:
    text = describe(value)
    return text if len(text) <= 120 else f"{text[:100]}... ({type(value).__name__})"


def as_examples(op, name, value):
    """``value`` as a numeric array with a leading example axis."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        if not isinstance(value, (list, tuple)) and not hasattr(value, "__array__"):
            what = "targets, one per example of 'x'" if name == "y" else "inputs"
            raise TypeError(f"{op}: '{name}' must be an array of {what}; received "
                            f"{_brief(value)}")
        try:
            value = np.asarray(value)
        except ValueError as error:
            raise ValueError(f"{op}: '{name}' is not a rectangular array: {error}") from None
    if value.dtype.kind not in "biuf":
        raise TypeError(f"{op}: '{name}' must be a numeric array; received {_brief(value)}")
    if value.ndim < 1:
        raise ValueError(f"{op}: '{name}' must have a leading example axis (ndim >= 1); "
                         f"received {_brief(value)}")
    return value


def check_data(op, x, y=None, *, need_y=True, allow_empty=False):
    """``(x, y)`` as arrays of the same length; ``x`` must not be empty unless allowed."""
    x = as_examples(op, "x", x)
    if need_y:
        y = as_examples(op, "y", y)
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"{op}: 'x' and 'y' must have the same number of examples; "
                             f"received {x.shape[0]} in 'x' and {y.shape[0]} in 'y'")
    if x.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{op}: 'x' has no examples (shape {tuple(x.shape)}); {op} needs at "
                         f"least one")
    return x, y


def check_validation_data(op, validation_data, x):
    """``(x_val, y_val)`` checked (None stays None); ``x_val`` has the rank of ``x``."""
    if validation_data is None:
        return None
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
        raise ValueError(f"{op}: 'validation_data' must be a pair (x_val, y_val); received "
                         f"{_brief(validation_data)}")
    x_val, y_val = validation_data
    if not (hasattr(x_val, "shape") and hasattr(y_val, "shape")) or len(x_val) != len(y_val):
        raise ValueError(f"{op}: 'validation_data' must be two arrays of the same length; "
                         f"received {_brief(x_val)} and {_brief(y_val)}")
    if len(x_val) == 0:
        raise ValueError(f"{op}: 'validation_data' has no examples (x_val of shape "
                         f"{tuple(x_val.shape)})")
    if x_val.ndim != x.ndim:
        raise ValueError(f"{op}: 'validation_data' inputs of shape {tuple(x_val.shape)} must "
                         f"have the rank of 'x' {tuple(x.shape)}")
    return x_val, y_val


def split_validation(op, x, y, validation_split, validation_data):
    """Keras's ``validation_split``: the last ``N - floor(N * (1 - split))`` examples,
    taken before any shuffling, become ``validation_data``. Returns
    ``(x_train, y_train, validation_data)``; 0 or None means no split."""
    if validation_split is None or (is_int(validation_split) and validation_split == 0):
        return x, y, validation_data
    split = number(op, "validation_split", validation_split, low=0.0, high=1.0,
                   high_open=True)
    if split == 0.0:
        return x, y, validation_data
    if validation_data is not None:
        raise ValueError(f"{op}: pass either 'validation_data' or 'validation_split', not "
                         f"both (received validation_split={validation_split!r})")
    n = x.shape[0]
    cut = int(np.floor(n * (1.0 - split)))
    if cut < 1 or cut >= n:
        raise ValueError(f"{op}: validation_split={validation_split!r} of {n} examples leaves "
                         f"{cut} for training and {n - cut} for validation; both need at "
                         f"least one")
    return x[:cut], y[:cut], (x[cut:], y[cut:])


def edge_layer(model, index):
    """The first (``index=0``) or last (``-1``) layer, looking into nested models."""
    layer = model
    while getattr(layer, "layers", None):
        layer = layer.layers[index]
    return layer


def _channels_first_message(op, name, shape, expected=None):
    moved = (shape[0], *shape[2:], shape[1])
    spatial = ("L",) if len(shape) == 3 else ("H", "W", "D")[: len(shape) - 2]
    axes = ", ".join(spatial)
    fix = (f"If the layout really is channels-last, build the model with "
           f"input_shape={tuple(shape[1:])} to skip this check." if expected is None else
           f"The model expects per-example shape {expected}.")
    return (f"{op}: '{name}' of shape {tuple(shape)} looks channels-first (N, C, {axes}), but "
            f"handgrad is channels-last (N, {axes}, C): move the channel axis last with "
            f"np.moveaxis({name}, 1, -1) (shape {moved}). {fix}")


def check_layout(op, model, x, name="x"):
    """Refuse inputs of the wrong rank for a built model and inputs that look
    channels-first (see the module docstring)."""
    shape = tuple(x.shape)
    if model.built and model.input_shape is not None:
        expected = tuple(model.input_shape)
        if len(shape) - 1 != len(expected):
            hint = (f"; add the channel axis with {name}[..., None]"
                    if shape[1:] + (1,) == expected else "")
            raise ValueError(f"{op}: '{name}' must have shape (N, {', '.join(map(str, expected))}) "
                             f"(the model's input_shape {expected} with a batch axis); received "
                             f"an array of shape {shape}{hint}")
        if len(shape) >= 3 and shape[1:] != expected and \
                (*shape[2:], shape[1]) == expected:
            raise ValueError(_channels_first_message(op, name, shape, expected))
        return
    rank = getattr(edge_layer(model, 0), "rank", None)
    if is_int(rank) and len(shape) == rank + 2 and shape[1] <= _CHANNELS_FIRST_MAX \
            and min(shape[2:]) >= _SPATIAL_MIN:
        raise ValueError(_channels_first_message(op, name, shape))
