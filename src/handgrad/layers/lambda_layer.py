"""``Lambda``: a layer given its forward function and its hand-written backward, the
handgrad way of Keras's ``Lambda`` (no autograd derives the gradient).

::

    y  = function(x)                      x (N, ...) -> y (N, ...)
    dx = backward(dy, x, y)               dy of y's shape -> dx of x's shape

``backward`` receives the upstream gradient, the input and the cached forward result
(so that ``tanh``'s backward is ``dy * (1 - y**2)``); check it with
:func:`handgrad.testing.gradcheck`. Without ``backward`` the layer runs in inference and
its backward raises a TypeError naming the missing argument. ``output_shape``: the
per-example output shape (a tuple, or a callable of the per-example input shape), else
found by running ``function`` on one all-zero example.

A file never holds code: a saved ``Lambda`` names its callables as custom objects
(register them with ``@handgrad.io.register_custom`` or pass ``custom_objects`` to
save and load; unnamed ones, such as a ``lambda``, are refused when saving).
"""

from __future__ import annotations

from .. import _custom
from .._checks import array_module, describe, is_int, upstream_grad
from .base import Layer
from .registry import register


def _resolved(value, field):
    """A callable, or a stored ``{"custom": name}`` found in the registry."""
    if _custom.is_reference(value):
        return _custom.resolve(value, {}, "Lambda.from_config", field)
    return value


def _stored(value, what):
    return _custom.reference(value, what) if callable(value) else value


@register
class Lambda(Layer):
    """y = function(x), dx = backward(dy, x, y). See the module docstring."""

    receptive_field = "n/a"

    def __init__(self, function, backward=None, output_shape=None, *, name=None, **common):
        super().__init__(name=name, **common)
        function = _resolved(function, "function")
        backward = _resolved(backward, "backward")
        output_shape = _resolved(output_shape, "output_shape")
        if not callable(function):
            raise TypeError(f"Lambda: 'function' must be a callable x -> y; received "
                            f"{describe(function)}")
        if backward is not None and not callable(backward):
            raise TypeError(f"Lambda: 'backward' must be a callable (dy, x, y) -> dx or None; "
                            f"received {describe(backward)}")
        if isinstance(output_shape, list):
            output_shape = tuple(output_shape)
        if output_shape is not None and not callable(output_shape) and not (
                isinstance(output_shape, tuple)
                and all(is_int(d) and d >= 0 for d in output_shape)):
            raise TypeError(f"Lambda: 'output_shape' must be None, a tuple of ints >= 0 (per "
                            f"example) or a callable of the input shape; received "
                            f"{describe(output_shape)}")
        self.function, self.backward_function = function, backward
        self.given_shape = output_shape

    def get_config(self):
        return {**super().get_config(),
                "function": _stored(self.function, f"the 'function' of {self.label}"),
                "backward": _stored(self.backward_function, f"the 'backward' of {self.label}"),
                "output_shape": _stored(self.given_shape, f"the 'output_shape' of {self.label}")
                if not isinstance(self.given_shape, tuple) else list(self.given_shape)}

    def output_shape(self, input_shape):
        if self.given_shape is None:
            return super().output_shape(input_shape)
        self.ensure_built(input_shape)
        if callable(self.given_shape):
            return tuple(int(d) for d in self.given_shape(tuple(input_shape)))
        return self.given_shape

    def _forward(self, x, training):
        y = self.function(x)
        xp = array_module(x)
        if not isinstance(y, xp.ndarray) or y.ndim == 0 or y.shape[0] != x.shape[0]:
            got = f"shape {tuple(y.shape)}" if isinstance(y, xp.ndarray) else describe(y)
            raise ValueError(f"{self.label}: 'function' must return an array with the input's "
                             f"batch axis N = {x.shape[0]}; returned {got}")
        if isinstance(self.given_shape, tuple) and y.shape[1:] != self.given_shape:
            raise ValueError(f"{self.label}: 'function' returned per-example shape "
                             f"{tuple(y.shape[1:])} but 'output_shape' is {self.given_shape}")
        return y, (x, y)

    def _backward(self, dy, cache):
        x, y = cache
        if self.backward_function is None:
            raise TypeError(f"{self.label}: backward needs the hand-written gradient: pass "
                            f"Lambda(function, backward=lambda dy, x, y: dx) (handgrad has no "
                            f"autograd); without 'backward' a Lambda runs in inference only")
        dy = upstream_grad(self.label, dy, y.shape, y.dtype)
        dx = self.backward_function(dy, x, y)
        if not isinstance(dx, array_module(x).ndarray) or dx.shape != x.shape \
                or dx.dtype != x.dtype:
            got = f"{dx.dtype} shape {tuple(dx.shape)}" if hasattr(dx, "shape") \
                else describe(dx)
            raise ValueError(f"{self.label}: 'backward' must return dx of the input's dtype "
                             f"and shape, {x.dtype} {tuple(x.shape)}; returned {got}")
        return dx, {}
