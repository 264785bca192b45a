"""Keras's reshaping layers (no parameters): Permute, RepeatVector, Cropping1D/2D/3D.

::

    Permute(dims):    y = x transposed by dims (Keras's 1-based axes, batch excluded)
                      dx = dy transposed by the inverse permutation
    RepeatVector(n):  (N, F) -> (N, n, F), y[:, t] = x          dx = sum_t dy[:, t]
    CroppingND:       (N, *S, C) -> (N, *S', C), S' = S - before - after on each axis
                      dx = dy zero-padded back by (before, after)

Cropping takes Keras's spellings: an int (every side of every axis), a tuple of
``rank`` ints (symmetric per axis) or a tuple of ``rank`` pairs ``(before, after)``;
``Cropping1D`` also takes one pair ``(before, after)``.
"""

from __future__ import annotations

from .._checks import array_module, describe, is_int, positive_int, upstream_grad
from .base import Layer
from .onnx_forms import _out
from .registry import register


def _permute_onnx(layer, g, v):
    """Transpose (channels last), the batch axis kept first."""
    v = g.channels_last(v)
    return _out(layer, g, v, g.op("Transpose", [v.name], "permute",
                                  perm=[0, *layer.dims]))


def _repeat_onnx(layer, g, v):
    """Unsqueeze to (N, 1, F), then Tile by (1, n, 1)."""
    v = g.channels_last(v)
    y = g.op("Unsqueeze", [v.name, g.ints([1])], "repeat")
    y = g.op("Tile", [y, g.ints([1, layer.n, 1])], "repeat")
    return _out(layer, g, v, y)


def _crop_onnx(layer, g, v):
    """Slice on the spatial axes (channels last)."""
    v = g.channels_last(v)
    axes = list(range(1, layer.rank + 1))
    starts = [before for before, _ in layer.pairs]
    ends = [size - after for size, (_, after) in zip(v.shape, layer.pairs)]
    y = g.op("Slice", [v.name, g.ints(starts), g.ints(ends), g.ints(axes)], "crop")
    return _out(layer, g, v, y)


@register
class Permute(Layer):
    """Keras's ``Permute(dims)``: ``dims`` permutes the per-example axes, numbered from
    1 (``Permute((2, 1))`` turns (N, T, F) into (N, F, T)). See the module docstring."""

    onnx_form = _permute_onnx
    receptive_field = "n/a"

    def __init__(self, dims, *, name=None, **common):
        super().__init__(name=name, **common)
        if (not isinstance(dims, (tuple, list)) or not dims
                or not all(is_int(d) for d in dims)
                or sorted(int(d) for d in dims) != list(range(1, len(dims) + 1))):
            raise ValueError(f"Permute: 'dims' must be a permutation of 1..k (Keras's 1-based "
                             f"axes, the batch axis excluded), e.g. (2, 1); received "
                             f"{describe(dims)}")
        self.dims = tuple(int(d) for d in dims)

    def get_config(self):
        return {**super().get_config(), "dims": list(self.dims)}

    def compute_mask(self, x, y, mask):
        """A mask of padded steps (:mod:`.masking`) goes on only while T stays axis 1."""
        return mask if self.dims[0] == 1 else None

    def _build(self, input_shape, rng):
        if len(input_shape) != len(self.dims):
            raise ValueError(f"{self.label}: 'dims' {self.dims} permutes {len(self.dims)} "
                             f"axes but the per-example input shape {tuple(input_shape)} has "
                             f"{len(input_shape)}")

    def _forward(self, x, training):
        if x.ndim != len(self.dims) + 1:
            raise ValueError(f"{self.label}: 'x' must have {len(self.dims) + 1} axes (N and "
                             f"the {len(self.dims)} that 'dims' permutes); received shape "
                             f"{tuple(x.shape)}")
        y = x.transpose(0, *self.dims).copy()
        return y, (y.shape, y.dtype)

    def _backward(self, dy, cache):
        dy = upstream_grad(self.label, dy, *cache)
        inverse = [0] * (len(self.dims) + 1)
        for i, d in enumerate(self.dims, 1):
            inverse[d] = i
        return dy.transpose(inverse).copy(), {}


@register
class RepeatVector(Layer):
    """Keras's ``RepeatVector(n)``: (N, F) -> (N, n, F). See the module docstring."""

    onnx_form = _repeat_onnx
    receptive_field = "n/a"

    def __init__(self, n, *, name=None, **common):
        super().__init__(name=name, **common)
        self.n = positive_int("RepeatVector", "n", n)

    def get_config(self):
        return {**super().get_config(), "n": self.n}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(config.pop("n"), **config)

    def _forward(self, x, training):
        if x.ndim != 2:
            raise ValueError(f"{self.label}: 'x' must be (N, F); received shape "
                             f"{tuple(x.shape)}")
        xp = array_module(x)
        y = xp.repeat(x[:, None, :], self.n, axis=1)
        return y, (y.shape, y.dtype)

    def _backward(self, dy, cache):
        dy = upstream_grad(self.label, dy, *cache)
        return dy.sum(axis=1), {}


def crop_pairs(owner, cropping, rank):
    """Keras's cropping spellings -> ``rank`` pairs ``(before, after)`` of ints >= 0."""
    def bad():
        one_pair = " or one pair (before, after)" if rank == 1 else ""
        return ValueError(f"{owner}: 'cropping' must be an int >= 0, a tuple of {rank} ints "
                          f">= 0 or a tuple of {rank} pairs (before, after){one_pair}; "
                          f"received {describe(cropping)}")

    def natural(value):
        return is_int(value) and value >= 0

    if natural(cropping):
        return ((int(cropping),) * 2,) * rank
    if not isinstance(cropping, (tuple, list)):
        raise bad()
    if rank == 1 and len(cropping) == 2 and all(map(natural, cropping)):
        return ((int(cropping[0]), int(cropping[1])),)
    if len(cropping) != rank:
        raise bad()
    pairs = []
    for item in cropping:
        if natural(item):
            pairs.append((int(item), int(item)))
        elif (isinstance(item, (tuple, list)) and len(item) == 2
              and all(map(natural, item))):
            pairs.append((int(item[0]), int(item[1])))
        else:
            raise bad()
    return tuple(pairs)


class Cropping(Layer):
    """Crop ``rank`` spatial axes of channels-last maps (N, *S, C): see the module
    docstring for ``cropping``."""

    onnx_form = _crop_onnx
    receptive_field = "pointwise"
    rank = 2

    def __init__(self, cropping, *, name=None, **common):
        super().__init__(name=name, **common)
        self.pairs = crop_pairs(type(self).__name__, cropping, self.rank)

    def get_config(self):
        return {**super().get_config(), "cropping": [list(p) for p in self.pairs]}

    def _forward(self, x, training):
        if x.ndim != self.rank + 2:
            raise ValueError(f"{self.label}: 'x' must be channels-last maps (N, "
                             f"{'*S' if self.rank > 1 else 'T'}, C) with {self.rank} spatial "
                             f"axes; received shape {tuple(x.shape)}")
        index = [slice(None)]
        for axis, (size, (before, after)) in enumerate(zip(x.shape[1:], self.pairs), 1):
            if before + after >= size:
                raise ValueError(f"{self.label}: cropping {(before, after)} leaves nothing "
                                 f"of spatial axis {axis} of size {size} (input shape "
                                 f"{tuple(x.shape)})")
            index.append(slice(before, size - after))
        y = x[tuple(index)].copy()
        return y, (x.shape, tuple(index), y.shape, y.dtype)

    def _backward(self, dy, cache):
        shape, index, out_shape, dtype = cache
        dy = upstream_grad(self.label, dy, out_shape, dtype)
        dx = array_module(dy).zeros(shape, dtype)
        dx[index] = dy
        return dx, {}


@register
class Cropping1D(Cropping):
    """Keras's ``Cropping1D(cropping=(1, 1))`` on (N, T, C)."""

    rank = 1

    def __init__(self, cropping=(1, 1), *, name=None, **common):
        super().__init__(cropping, name=name, **common)


@register
class Cropping2D(Cropping):
    """Keras's ``Cropping2D(cropping=((0, 0), (0, 0)))`` on (N, H, W, C)."""

    rank = 2

    def __init__(self, cropping=((0, 0), (0, 0)), *, name=None, **common):
        super().__init__(cropping, name=name, **common)


@register
class Cropping3D(Cropping):
    """Keras's ``Cropping3D(cropping=((1, 1), (1, 1), (1, 1)))`` on (N, D, H, W, C)."""

    rank = 3

    def __init__(self, cropping=((1, 1), (1, 1), (1, 1)), *, name=None, **common):
        super().__init__(cropping, name=name, **common)
