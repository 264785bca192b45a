"""The layout checks of ``fit``, ``evaluate`` and ``predict`` (handgrad is
channels-last): every input against the shape the model expects.

Channels-first data is refused, not warned about: a transposed image still trains (a
convolution over the wrong axes), so a warning scrolls away while the run is wasted.
The check is a heuristic for a model built from the data (no ``input_shape``): an input
of a convolution or pooling layer whose channel axis would be small (<= 4) while every
"spatial" axis is >= 8, e.g. ``(N, 1, 28, 28)`` or ``(N, 3, 32, 32)``. Real
channels-last data (``(N, 28, 28, 1)``, ``(N, 40, 1)``, ``(N, 4, 4, 64)``, sequences)
passes; a model built with ``input_shape`` is never second-guessed, which is also the
way to confirm an unusual layout. A built model reports a rank that differs from its
``input_shape``, or a shape that is its ``input_shape`` with the channel axis first. A
graph ``Model`` knows each Input's shape: every input array must match it exactly.
"""

from __future__ import annotations

from .._checks import is_int
from ..layers.symbolic import shape_matches

_CHANNELS_FIRST_MAX = 4  # at most this many channels on axis 1 ...
_SPATIAL_MIN = 8  # ... and at least this many positions on every later axis


def edge_layer(model, index):
    """The first (``index=0``) or last (``-1``) layer, looking into nested models."""
    layer = model
    while getattr(layer, "layers", None):
        layer = layer.layers[index]
    return layer


def _channels_first_message(op, label, code, shape, expected=None):
    moved = (shape[0], *shape[2:], shape[1])
    spatial = ("L",) if len(shape) == 3 else ("H", "W", "D")[: len(shape) - 2]
    axes = ", ".join(spatial)
    fix = (f"If the layout really is channels-last, build the model with "
           f"input_shape={tuple(shape[1:])} to skip this check." if expected is None else
           f"The model expects per-example shape {expected}.")
    return (f"{op}: {label} of shape {tuple(shape)} looks channels-first (N, C, {axes}), but "
            f"handgrad is channels-last (N, {axes}, C): move the channel axis last with "
            f"np.moveaxis({code}, 1, -1) (shape {moved}). {fix}")


def _check_shape(op, label, code, shape, expected, what, exact):
    """``shape`` (with a batch axis) against the per-example ``expected``; ``exact``:
    every axis must match, not only the rank."""
    wanted = f"(N, {', '.join(map(str, expected))})"
    if len(shape) - 1 != len(expected):
        hint = (f"; add the channel axis with {code}[..., None]"
                if shape[1:] + (1,) == expected else "")
        raise ValueError(f"{op}: {label} must have shape {wanted} ({what} {expected} with a "
                         f"batch axis); received an array of shape {shape}{hint}")
    if len(shape) >= 3 and not shape_matches(shape[1:], expected) and \
            shape_matches((*shape[2:], shape[1]), expected):
        raise ValueError(_channels_first_message(op, label, code, shape, expected))
    if exact and not shape_matches(shape[1:], expected):
        raise ValueError(f"{op}: {label} must have shape {wanted} ({what} {expected} with a "
                         f"batch axis); received an array of shape {shape}")


def check_layout(op, model, x, name="x"):
    """Refuse inputs of the wrong rank for a built model and inputs that look
    channels-first (see the module docstring). ``x`` is in the model's form: one array,
    or a list in input order for a graph model with several inputs."""
    names = getattr(model, "input_names", None)
    if names is not None and getattr(model, "inputs", None) is not None:  # a graph Model
        single = model.single_input
        for input_name, tensor, array in zip(names, model.inputs, [x] if single else x):
            label, code = ((f"'{name}'", name) if single else
                           (f"input {input_name!r} of '{name}'", f"{name}[{input_name!r}]"))
            _check_shape(op, label, code, tuple(array.shape), tensor.shape,
                         f"the shape of Input {input_name!r}", exact=True)
        return
    shape = tuple(x.shape)
    if model.built and model.input_shape is not None:
        _check_shape(op, f"'{name}'", name, shape, tuple(model.input_shape),
                     "the model's input_shape", exact=False)
        return
    rank = getattr(edge_layer(model, 0), "rank", None)
    if is_int(rank) and len(shape) == rank + 2 and shape[1] <= _CHANNELS_FIRST_MAX \
            and min(shape[2:]) >= _SPATIAL_MIN:
        raise ValueError(_channels_first_message(op, f"'{name}'", name, shape))
