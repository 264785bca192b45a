"""Keras's preprocessing layers for numbers: ``Rescaling``, ``Normalization`` (with
``adapt``) and ``CategoryEncoding``. They have no parameters; Rescaling and Normalization
are affine maps with a hand-derived dx, CategoryEncoding takes integer ids (no dx).

Keras's Normalization, as written down in tests/test_preprocessing_layers.py: the mean and
variance are per feature (the entries along ``axis``) over every other axis, the batch
included (the population variance), and::

    y = (x - mean) / max(sqrt(variance), 1e-7)        dx = dy / max(sqrt(variance), 1e-7)

(1e-7 is Keras's ``backend.epsilon()``); ``invert=True`` maps back:
``y = mean + x max(sqrt(variance), 1e-7)``.
"""

from __future__ import annotations

import numpy as np

from .._checks import choice, describe, is_int, positive_int, upstream_grad
from .._hyper import number
from .base import Layer
from .caching import keeps_cache
from .registry import register

#: Keras's ``backend.epsilon()``: the floor of the standard deviation in Normalization
KERAS_EPSILON = 1e-7


def float_or_int_input(owner, x, dtype):
    """``x`` as an array; integer inputs (uint8 images) are cast to ``dtype`` (float32 when
    the layer has none yet), floats are kept for the base class's checks."""
    if hasattr(x, "dtype") and np.issubdtype(x.dtype, np.integer):
        return np.asarray(x, dtype=dtype or np.float32)
    return x


def _rescaling_onnx(layer, g, v):
    """Mul by the scale (then Add of a non-zero offset), scalars, in any layout."""
    y = g.op("Mul", [v.name, g.const(np.asarray(layer.scale), "scale")], "rescaling")
    if layer.offset:
        y = g.op("Add", [y, g.const(np.asarray(layer.offset), "offset")], "rescaling")
    return g.value(y, v.shape, v.first)


@register
class Rescaling(Layer):
    """Keras's Rescaling: ``y = x * scale + offset`` on any shape; ``dx = scale * dy``.
    Integer inputs (uint8 images) are cast to the layer's dtype first."""

    receptive_field = "pointwise"
    onnx_form = _rescaling_onnx

    def __init__(self, scale, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.scale = number(owner, "scale", scale)
        self.offset = number(owner, "offset", offset)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale, "offset": self.offset}

    def forward(self, x, training=True, grad=None):
        return super().forward(float_or_int_input(self.label, x, self.dtype), training, grad)

    def _forward(self, x, training):
        dtype = x.dtype.type
        return x * dtype(self.scale) + dtype(self.offset), (x.shape, x.dtype)

    def _backward(self, dy, cache):
        dy = upstream_grad(self.label, dy, *cache)
        return dy * dy.dtype.type(self.scale), {}


def _check_axis(owner, axis):
    """None, an int or a tuple of ints, none of them the batch axis 0."""
    if axis is None:
        return None
    entries = (axis,) if is_int(axis) else axis
    if not isinstance(entries, (tuple, list)) or not all(is_int(a) for a in entries):
        raise TypeError(f"{owner}: 'axis' must be an int, a tuple of ints or None; received "
                        f"{describe(axis)}")
    if any(a == 0 for a in entries):
        raise ValueError(f"{owner}: 'axis' may not include the batch axis 0; received {axis!r}")
    return int(axis) if is_int(axis) else tuple(int(a) for a in entries)


def _statistic(owner, name, value):
    if value is None:
        return None
    array = np.asarray(value, dtype=np.float64) if not isinstance(value, str) else None
    if array is None or not np.all(np.isfinite(array)):
        raise ValueError(f"{owner}: '{name}' must be finite numbers (a number or a nested "
                         f"list); received {describe(value)}")
    return array


@register
class Normalization(Layer):
    """Keras's Normalization (see the module for the formula): features along ``axis`` (an
    int, a tuple of ints, or None for one scalar mean) of inputs (N, ...). The statistics
    come from ``mean`` and ``variance`` (numbers or lists broadcastable to the feature
    shape, saved in the config) or from :meth:`adapt` (kept as the buffers ``mean`` and
    ``variance``, saved with the weights)."""

    receptive_field = "pointwise"

    def __init__(self, axis=-1, mean=None, variance=None, invert=False, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.axis = _check_axis(owner, axis)
        if (mean is None) != (variance is None):
            raise ValueError(f"{owner}: give both 'mean' and 'variance' or neither (then "
                             f"call adapt(data)); received mean={mean!r}, "
                             f"variance={variance!r}")
        self.mean = _statistic(owner, "mean", mean)
        self.variance = _statistic(owner, "variance", variance)
        if self.variance is not None and np.any(self.variance < 0):
            raise ValueError(f"{owner}: 'variance' must be >= 0; received {variance!r}")
        if not isinstance(invert, bool):
            raise TypeError(f"{owner}: 'invert' must be a bool; received {describe(invert)}")
        self.invert = invert
        self.adapted = self.mean is not None

    def get_config(self):
        def listed(a):
            return None if a is None else a.tolist()

        return {**super().get_config(), "axis": self.axis, "mean": listed(self.mean),
                "variance": listed(self.variance), "invert": self.invert}

    def feature_axes(self, rank):
        """The feature axes (>= 1) of an input of ``rank`` axes, the batch included."""
        if self.axis is None:
            return ()
        axes = (self.axis,) if isinstance(self.axis, int) else self.axis
        resolved = []
        for a in axes:
            if not -rank < a < rank or a % rank == 0:
                raise ValueError(f"{self.label}: 'axis' {self.axis!r} does not fit inputs of "
                                 f"rank {rank} (with the batch axis)")
            resolved.append(a % rank)
        return tuple(sorted(set(resolved)))

    def _build(self, input_shape, rng):
        rank = len(input_shape) + 1
        kept = self.feature_axes(rank)
        shape = tuple(d if i + 1 in kept else 1 for i, d in enumerate(input_shape))
        self.buffers["mean"] = np.zeros(shape, dtype=self.dtype)
        self.buffers["variance"] = np.ones(shape, dtype=self.dtype)
        if self.mean is not None:
            for key, value in (("mean", self.mean), ("variance", self.variance)):
                try:
                    self.buffers[key][...] = np.broadcast_to(value, shape)
                except ValueError:
                    raise ValueError(f"{self.label}: '{key}' of shape {value.shape} does not "
                                     f"broadcast to the feature shape {shape} of inputs "
                                     f"{(None, *input_shape)} with axis={self.axis!r}") from None

    def adapt(self, data):
        """Set the mean and variance from ``data`` (N, ...) (numbers; a model's whole
        training set, as Keras's adapt): per feature, over every other axis."""
        if self.mean is not None:
            raise ValueError(f"{self.label}: was given 'mean' and 'variance'; adapt(data) "
                             f"would overwrite them (make the layer without them to adapt)")
        x = np.asarray(data)
        if x.dtype.kind not in "iuf" or x.ndim < 1 or x.shape[0] == 0:
            raise ValueError(f"{self.label}: adapt() needs a non-empty array of numbers "
                             f"(N, ...); received {describe(data)}")
        if x.ndim == 1:  # Keras: a 1-D array is a batch of scalars
            x = x[:, None] if self.axis is not None else x
        self.ensure_built(x.shape[1:])
        self._check_shape(x)
        reduce = tuple(i for i in range(x.ndim) if i not in self.feature_axes(x.ndim))
        x = x.astype(np.float64)
        self.buffers["mean"][...] = x.mean(axis=reduce, keepdims=True)[0]
        self.buffers["variance"][...] = x.var(axis=reduce, keepdims=True)[0]
        self.adapted = True
        return self

    def _check_shape(self, x):
        expected = self.input_shape
        kept = self.feature_axes(len(expected) + 1)
        if x.ndim != len(expected) + 1 or any(x.shape[a] != expected[a - 1] for a in kept):
            raise ValueError(f"{self.label}: inputs must have {len(expected) + 1} axes with "
                             f"features {tuple(expected[a - 1] for a in kept)} on axes {kept} "
                             f"(as when built); received shape {tuple(x.shape)}")

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)  # the shape is kept: no statistics needed
        return tuple(input_shape)

    def extra_state(self):
        return {**super().extra_state(), "adapted": self.adapted}

    def load_extra_state(self, state):
        super().load_extra_state(state)
        self.adapted = bool(state.get("adapted", self.adapted))

    def forward(self, x, training=True, grad=None):
        return super().forward(float_or_int_input(self.label, x, self.dtype), training, grad)

    def _forward(self, x, training):
        if not self.adapted:
            raise RuntimeError(f"{self.label}: no statistics yet: call adapt(data) first, or "
                               f"make the layer with 'mean' and 'variance'")
        self.check_dtype(x, "statistics")
        self._check_shape(x)
        mean = self.buffers["mean"]
        std = np.maximum(np.sqrt(self.buffers["variance"]), self.dtype.type(KERAS_EPSILON))
        y = mean + x * std if self.invert else (x - mean) / std
        return y, (std, x.shape)

    def _backward(self, dy, cache):
        std, shape = cache
        dy = upstream_grad(self.label, dy, shape, std.dtype)
        return (dy * std if self.invert else dy / std), {}


@register
class CategoryEncoding(Layer):
    """Keras's CategoryEncoding: integer ids in [0, num_tokens) -> floats (layer dtype).

    - ``"multi_hot"``: (N, k) -> (N, num_tokens), 1 where a token occurs in the example;
    - ``"count"``: the same with the number of occurrences;
    - ``"one_hot"``: (N,) or (N, 1) -> (N, num_tokens); (N, k) with k > 1 -> (N, k,
      num_tokens) (Keras appends the encoding axis when the last axis is not 1).

    A 1-D input (N,) is one token per example. There is no dx (integer input): backward
    returns None, as Embedding's.
    """

    def __init__(self, num_tokens, output_mode="multi_hot", **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.num_tokens = positive_int(owner, "num_tokens", num_tokens)
        self.output_mode = choice(owner, "output_mode", output_mode,
                                  ("multi_hot", "one_hot", "count"))

    def get_config(self):
        return {**super().get_config(), "num_tokens": self.num_tokens,
                "output_mode": self.output_mode}

    def _ids(self, x):
        ids = np.asarray(x) if isinstance(x, (list, tuple)) else x
        if not hasattr(ids, "dtype") or not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"{self.label}: 'x' must be an integer array of token ids; "
                            f"received {describe(x)}")
        if ids.ndim not in (1, 2):
            raise ValueError(f"{self.label}: 'x' must be (N,) or (N, k) ids; received shape "
                             f"{tuple(ids.shape)}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_tokens):
            bad = ids.min() if ids.min() < 0 else ids.max()
            raise ValueError(f"{self.label}: ids must be in [0, {self.num_tokens}) "
                             f"(num_tokens); received {int(bad)}")
        return ids

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        one_hot_axis = self.output_mode == "one_hot" and tuple(input_shape) not in ((), (1,))
        return (*input_shape, self.num_tokens) if one_hot_axis else (self.num_tokens,)

    def forward(self, x, training=True, grad=None):
        """The encoding of ids ``x``; keeps an (empty) cache when ``grad``."""
        grad = keeps_cache(self.label, training, grad)
        ids = self._ids(x)
        self.ensure_built(ids.shape[1:])
        n = ids.shape[0]
        if self.output_mode == "one_hot" and ids.ndim == 2 and ids.shape[1] != 1:
            y = np.zeros((*ids.shape, self.num_tokens), dtype=self.dtype)
            np.put_along_axis(y, ids[..., None], 1, axis=-1)
        else:
            rows = ids.reshape(n, -1)
            y = np.zeros((n, self.num_tokens), dtype=self.dtype)
            np.add.at(y, (np.repeat(np.arange(n), rows.shape[1]), rows.ravel()), 1)
            if self.output_mode != "count":
                y = np.minimum(y, 1)
        if grad:
            self._caches.append(None)
        return y

    def _backward(self, dy, cache):
        return None, {}
