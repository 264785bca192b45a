"""Keras's other merge layers and its functional merge helpers.

Each takes a list of inputs whose per-example shapes broadcast (one rank, sizes equal
or 1); a broadcast input's gradient is summed over the axes it was broadcast along::

    Subtract:  y = x_1 - x_2                  dx_1 = dy, dx_2 = -dy   (exactly 2 inputs)
    Average:   y = (x_1 + ... + x_K) / K      dx_i = dy / K
    Maximum:   y = max(x_1, ..., x_K)         dx_i = dy where x_i is the first maximum
    Minimum:   y = min(x_1, ..., x_K)         dx_i = dy where x_i is the first minimum

Maximum and Minimum fold the inputs pairwise as Keras does (``y = max(y, x_i)`` with the
gradient of a tie going to ``y``), so a tie sends the whole gradient to the earliest input.

``concatenate([a, b], axis=-1)``, ``add``, ``subtract``, ``multiply``, ``average``,
``maximum`` and ``minimum`` make the layer and call it (Keras's ``keras.layers.add``):
on symbolic tensors they add a node to the graph, on arrays they compute in inference mode.
"""

from __future__ import annotations

from .._checks import describe
from .registry import register
from .structure import Add, BroadcastMerge, Concatenate, Multiply, _fold, _reduced
from .symbolic import SymbolicTensor


@register
class Subtract(BroadcastMerge):
    """y = x_1 - x_2 (two inputs that broadcast); dx_1 = dy, dx_2 = -dy, each summed over
    its broadcast axes."""

    def _merged_shape(self, shapes, per_example):
        if len(shapes) != 2:
            raise ValueError(f"{self.label}: takes exactly 2 inputs; received {len(shapes)}")
        return super()._merged_shape(shapes, per_example)

    def _merge(self, xp, arrays):
        return xp.subtract(*xp.broadcast_arrays(*arrays)), [x.shape for x in arrays]

    def _split(self, xp, dy, shapes):
        return [_reduced(xp, dy, shapes[0]), _reduced(xp, -dy, shapes[1])]


@register
class Average(BroadcastMerge):
    """y = the mean of the K inputs; dx_i = dy / K, summed over x_i's broadcast axes."""

    def _merge(self, xp, arrays):
        y = _fold(xp, xp.add, arrays)
        y /= len(arrays)
        return y, [x.shape for x in arrays]

    def _split(self, xp, dy, shapes):
        share = dy / len(shapes)
        return [_reduced(xp, share, shape) for shape in shapes]


class _Extremum(BroadcastMerge):
    """Maximum and Minimum: ``pick(a, b)`` is ``xp.maximum``/``xp.minimum``; the cache
    holds, per input, the mask of the positions it supplied (the first extreme)."""

    def _merge(self, xp, arrays):
        y = _fold(xp, self.pick(xp), arrays)
        taken = xp.zeros(y.shape, dtype=bool)
        masks = []
        for x in arrays:
            mask = (x == y) & ~taken
            taken |= mask
            masks.append((mask, x.shape))
        return y, masks

    def _split(self, xp, dy, masks):
        return [_reduced(xp, xp.where(mask, dy, 0).astype(dy.dtype), shape)
                for mask, shape in masks]


@register
class Maximum(_Extremum):
    """y = the elementwise maximum; dx_i = dy where x_i is the first maximum, else 0."""

    @staticmethod
    def pick(xp):
        return xp.maximum


@register
class Minimum(_Extremum):
    """y = the elementwise minimum; dx_i = dy where x_i is the first minimum, else 0."""

    @staticmethod
    def pick(xp):
        return xp.minimum


def _call(cls, name, inputs, **kwargs):
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"{name}: 'inputs' must be a list of tensors or arrays; received "
                        f"{describe(inputs)}")
    layer = cls(**kwargs)
    if any(isinstance(t, SymbolicTensor) for t in inputs):
        return layer(list(inputs))
    return layer.forward(list(inputs), training=False)


def concatenate(inputs, axis=-1, **kwargs):
    """``Concatenate(axis, **kwargs)(inputs)``."""
    return _call(Concatenate, "concatenate", inputs, axis=axis, **kwargs)


def _helper(cls):
    """Keras's lower-case helper of a merge layer: ``cls(**kwargs)(inputs)``."""
    def helper(inputs, **kwargs):
        return _call(cls, helper.__name__, inputs, **kwargs)

    helper.__name__ = helper.__qualname__ = cls.__name__.lower()
    helper.__doc__ = f"``{cls.__name__}(**kwargs)(inputs)``."
    return helper


add, subtract, multiply = _helper(Add), _helper(Subtract), _helper(Multiply)
average, maximum, minimum = _helper(Average), _helper(Maximum), _helper(Minimum)
