"""Keras's image augmentation layers on (N, H, W, C): random in training (a draw per image
from the layer's seeded ``rng``, see ``Layer.draws_random``), the identity in inference.

Keras's factor semantics (written down in tests/test_augmentation_layers.py): a factor is
a number f, meaning (-f, f), or a pair (lower, upper); each image draws uniformly in it.

- ``RandomFlip(mode)``: each image flipped with probability 1/2 (left-right for
  "horizontal", up-down for "vertical", each independently for both);
- ``RandomRotation(factor)``: the angle is the draw times 2 pi, counter-clockwise as shown
  (row 0 on top); the output pixel p reads the input at ``R(angle) (p - c) + c``, c the
  image centre ((W - 1) / 2, (H - 1) / 2), in (column, row) pixel coordinates;
- ``RandomTranslation(height_factor, width_factor)``: shifts of draw * H rows (down for
  positive) and draw * W columns (right for positive): p reads ``p - shift``;
- ``RandomZoom(height_factor, width_factor=None)``: zoom z = 1 + draw per axis (positive:
  zoom out), the height's for both axes when width_factor is None; p reads ``z (p - c) + c``;
- ``RandomContrast(factor)``: f drawn in [1 - lower, 1 + upper] (factor in [0, 1]), then
  ``y = (x - mean) f + mean``, the mean per image and channel over H and W (Keras also
  clips to a value range; handgrad does not).

The geometric layers read the input with :func:`handgrad.ops.grid_sample` (bilinear or
nearest; ``fill_mode`` "reflect" (d c b a | a b c d), "nearest" (the edge), "constant"
(``fill_value``) or "wrap" (a b c d | a b c d)). Backward: the grid is fixed, so dx is
grid_sample's scatter of dy (a flip's dx is dy flipped back; contrast's dx is
``f dy + (1 - f) mean_HW(dy)``).
"""

from __future__ import annotations

import numpy as np

from .. import ops
from .._checks import array_module, choice, describe, upstream_grad
from .._device import like
from .._hyper import number
from .base import Layer
from .registry import register

_PADDING = {"reflect": "reflection", "nearest": "border", "constant": "zeros", "wrap": "zeros"}


def factor_range(owner, name, factor, low=None, high=None, symmetric=True):
    """``(lower, upper)`` of a Keras factor: a number f (``(-f, f)``, or ``(f, f)`` when
    not ``symmetric``) or a pair; each bound in [low, high] and lower <= upper."""
    pair = factor if isinstance(factor, (tuple, list)) else None
    if pair is not None and len(pair) != 2:
        raise ValueError(f"{owner}: '{name}' must be a number or a pair (lower, upper); "
                         f"received {describe(factor)}")
    if pair is None:
        f = number(owner, name, factor)
        pair = (-abs(f), abs(f)) if symmetric else (f, f)
    lower, upper = (number(owner, name, v, low=low, high=high) for v in pair)
    if lower > upper:
        raise ValueError(f"{owner}: '{name}' must have lower <= upper; received {factor!r}")
    return lower, upper


class RandomAugmentation(Layer):
    """Shared frame: (N, H, W, C) input, the identity when not ``training``; subclasses
    implement ``_augment(x) -> (y, cache)`` and ``_unaugment(dy, cache) -> dx``."""

    draws_random = True
    keras_data_format = True
    receptive_field = "whole"  # in training: a flip, a warp, the image mean

    def _forward(self, x, training):
        if x.ndim != 4:
            raise ValueError(f"{self.label}: expects images (N, H, W, C); received shape "
                             f"{tuple(x.shape)}")
        if not training:
            return x, (x.shape, x.dtype, None)
        y, cache = self._augment(x)
        return y, (x.shape, x.dtype, cache)

    def _backward(self, dy, cache):
        shape, dtype, augmented = cache
        dy = upstream_grad(self.label, dy, shape, dtype)
        return (dy if augmented is None else self._unaugment(dy, augmented)), {}

    def _uniform(self, bounds, n):
        return self.rng.uniform(bounds[0], bounds[1], n)  # float64 for every layer dtype


@register
class RandomFlip(RandomAugmentation):
    """Flip each image with probability 1/2 along the axes of ``mode`` (module docstring)."""

    def __init__(self, mode="horizontal_and_vertical", **kwargs):
        super().__init__(**kwargs)
        self.mode = choice(type(self).__name__, "mode", mode,
                           ("horizontal", "vertical", "horizontal_and_vertical"))

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}

    def _augment(self, x):
        axes = {"horizontal": (2,), "vertical": (1,), "horizontal_and_vertical": (2, 1)}
        flips = [(axis, like(self.rng.random(len(x)) < 0.5, x)) for axis in axes[self.mode]]
        return self._unaugment(x, flips), flips

    def _unaugment(self, dy, flips):
        xp = array_module(dy)
        for axis, flipped in flips:  # flips are involutions and commute
            dy = xp.where(flipped[:, None, None, None], xp.flip(dy, axis), dy)
        return dy


class AffineAugmentation(RandomAugmentation):
    """A random affine map per image, read with grid_sample (module docstring);
    subclasses give ``_matrices(n, h, w)``: (n, 2, 3), output (column, row, 1) -> input."""

    def __init__(self, fill_mode="reflect", interpolation="bilinear", fill_value=0.0,
                 **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.fill_mode = choice(owner, "fill_mode", fill_mode, tuple(_PADDING))
        self.interpolation = choice(owner, "interpolation", interpolation,
                                    ("bilinear", "nearest"))
        self.fill_value = number(owner, "fill_value", fill_value)

    def get_config(self):
        return {**super().get_config(), "fill_mode": self.fill_mode,
                "interpolation": self.interpolation, "fill_value": self.fill_value}

    def _augment(self, x):
        n, h, w, _ = x.shape
        rows, cols = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64),
                                 indexing="ij")
        points = np.stack([cols, rows, np.ones_like(rows)], axis=-1)  # (h, w, 3)
        source = np.einsum("nij,hwj->nhwi", self._matrices(n, h, w), points)  # (u, v)
        if self.fill_mode == "wrap":  # u mod W, read with one more column (row): x's first
            source = np.mod(source, (w, h))
            x = array_module(x).pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)), mode="wrap")
        size = np.array([x.shape[2], x.shape[1]], dtype=np.float64)
        grid = like(((2 * source + 1) / size - 1).astype(x.dtype), x)  # align_corners=False
        shift = x.dtype.type(self.fill_value if self.fill_mode == "constant" else 0.0)
        y, cache = ops.grid_sample(x - shift if shift else x, grid, mode=self.interpolation,
                                   padding_mode=_PADDING[self.fill_mode])
        return (y + shift if shift else y), cache

    def _unaugment(self, dy, cache):
        dx = ops.grid_sample_backward(dy, cache)[0]
        if self.fill_mode == "wrap":  # fold the extra row and column back onto the first
            dx = dx.copy()
            dx[:, 0] += dx[:, -1]
            dx[:, :, 0] += dx[:, :, -1]
            dx = array_module(dx).ascontiguousarray(dx[:, :-1, :-1])
        return dx

    @staticmethod
    def about_centre(linear, h, w):
        """(n, 2, 3) maps ``p -> linear (p - c) + c`` for (n, 2, 2) ``linear``."""
        centre = np.array([(w - 1) / 2, (h - 1) / 2])
        return np.concatenate([linear, (centre - linear @ centre)[..., None]], axis=-1)


@register
class RandomRotation(AffineAugmentation):
    """Rotate each image by draw * 2 pi (``factor``: fraction of a full turn)."""

    def __init__(self, factor, fill_mode="reflect", interpolation="bilinear", fill_value=0.0,
                 **kwargs):
        super().__init__(fill_mode, interpolation, fill_value, **kwargs)
        self.factor = factor_range(type(self).__name__, "factor", factor)

    def get_config(self):
        return {**super().get_config(), "factor": list(self.factor)}

    def _matrices(self, n, h, w):
        angle = 2 * np.pi * self._uniform(self.factor, n)
        cos, sin = np.cos(angle), np.sin(angle)
        return self.about_centre(np.stack([np.stack([cos, -sin], -1),
                                           np.stack([sin, cos], -1)], 1), h, w)


@register
class RandomTranslation(AffineAugmentation):
    """Shift each image by draw * H rows and draw * W columns (factors in [-1, 1])."""

    def __init__(self, height_factor, width_factor, fill_mode="reflect",
                 interpolation="bilinear", fill_value=0.0, **kwargs):
        super().__init__(fill_mode, interpolation, fill_value, **kwargs)
        owner = type(self).__name__
        self.height_factor = factor_range(owner, "height_factor", height_factor, -1.0, 1.0)
        self.width_factor = factor_range(owner, "width_factor", width_factor, -1.0, 1.0)

    def get_config(self):
        return {**super().get_config(), "height_factor": list(self.height_factor),
                "width_factor": list(self.width_factor)}

    def _matrices(self, n, h, w):
        down = self._uniform(self.height_factor, n) * h
        right = self._uniform(self.width_factor, n) * w
        matrices = np.tile(np.eye(2, 3), (n, 1, 1))
        matrices[:, 0, 2], matrices[:, 1, 2] = -right, -down
        return matrices


@register
class RandomZoom(AffineAugmentation):
    """Zoom each image by 1 + draw per axis (positive: out; factors >= -1)."""

    def __init__(self, height_factor, width_factor=None, fill_mode="reflect",
                 interpolation="bilinear", fill_value=0.0, **kwargs):
        super().__init__(fill_mode, interpolation, fill_value, **kwargs)
        owner = type(self).__name__
        self.height_factor = factor_range(owner, "height_factor", height_factor, low=-1.0)
        self.width_factor = None if width_factor is None else factor_range(
            owner, "width_factor", width_factor, low=-1.0)

    def get_config(self):
        width = None if self.width_factor is None else list(self.width_factor)
        return {**super().get_config(), "height_factor": list(self.height_factor),
                "width_factor": width}

    def _matrices(self, n, h, w):
        zoom_h = 1 + self._uniform(self.height_factor, n)
        zoom_w = zoom_h if self.width_factor is None else 1 + self._uniform(
            self.width_factor, n)
        linear = np.zeros((n, 2, 2))
        linear[:, 0, 0], linear[:, 1, 1] = zoom_w, zoom_h
        return self.about_centre(linear, h, w)


@register
class RandomContrast(RandomAugmentation):
    """``y = (x - mean) f + mean`` per image and channel, f in [1 - lower, 1 + upper]."""

    def __init__(self, factor, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor_range(type(self).__name__, "factor", factor, 0.0, 1.0,
                                   symmetric=False)

    def get_config(self):
        return {**super().get_config(), "factor": list(self.factor)}

    def _augment(self, x):
        lower, upper = self.factor
        f = like(self._uniform((1 - lower, 1 + upper), len(x)).astype(x.dtype), x)
        f = f[:, None, None, None]
        mean = x.mean(axis=(1, 2), keepdims=True)
        return (x - mean) * f + mean, f

    def _unaugment(self, dy, f):
        return dy * f + (1 - f) * dy.mean(axis=(1, 2), keepdims=True)
