"""Weight and activity penalties: Keras's ``L1``, ``L2`` and ``L1L2`` regularizers.

For an array w (a layer's kernel ``W`` or bias ``b``, or its output)::

    penalty(w)  = l1 * sum |w| + l2 * sum w^2        (Keras's formula: no 1/2 on l2)
    gradient(w) = l1 * sign(w) + 2 * l2 * w          (sign(0) = 0)

A layer given ``kernel_regularizer``/``bias_regularizer`` adds its penalty to the loss of
every step (logged in ``loss``, as Keras), and the training step adds its gradient to the
parameter's gradient after the backward pass, just before the optimizer step (once per
step, after the data-parallel gradient sum). ``activity_regularizer`` penalizes the
layer's output y of each batch as Keras: penalty(y) / batch size, whose gradient enters
the layer's ``dy``. Strings: ``"l1"``, ``"l2"`` (0.01, Keras's default) and ``"l1_l2"``
(0.01 and 0.01).
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import array_module, describe

#: Keras's default factor for ``L1(l1=0.01)``, ``L2(l2=0.01)`` and the string names.
DEFAULT = 0.01


def _factor(owner, name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{owner}: '{name}' must be a number >= 0; received {describe(value)}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{owner}: '{name}' must be a finite number >= 0; received {value!r}")
    return float(value)


class Regularizer:
    """``penalty(w) = l1 sum|w| + l2 sum w^2`` and its gradient (see the module
    docstring); the subclasses are Keras's spellings of one formula."""

    def __init__(self, l1=0.0, l2=0.0):
        owner = type(self).__name__
        self.l1 = _factor(owner, "l1", l1)
        self.l2 = _factor(owner, "l2", l2)

    def __call__(self, w) -> float:
        """The penalty of array ``w`` (a float)."""
        xp = array_module(w)
        total = 0.0
        if self.l1:
            total += self.l1 * float(xp.sum(xp.abs(w)))
        if self.l2:
            total += self.l2 * float(xp.sum(w * w))
        return total

    def gradient(self, w):
        """d penalty / dw, in ``w``'s dtype: l1 sign(w) + 2 l2 w."""
        xp = array_module(w)
        dtype = w.dtype.type
        return dtype(self.l1) * xp.sign(w) + dtype(2.0 * self.l2) * w

    def get_config(self) -> dict:
        return {"l1": self.l1, "l2": self.l2}

    def __eq__(self, other):
        return type(other) is type(self) and other.get_config() == self.get_config()

    def __hash__(self):
        return hash((type(self).__name__, self.l1, self.l2))

    def __repr__(self):
        options = ", ".join(f"{key}={value!r}" for key, value in self.get_config().items())
        return f"{type(self).__name__}({options})"


class L1(Regularizer):
    """Keras's ``L1(l1=0.01)``: l1 * sum |w|."""

    def __init__(self, l1=DEFAULT):
        super().__init__(l1=l1)

    def get_config(self) -> dict:
        return {"l1": self.l1}


class L2(Regularizer):
    """Keras's ``L2(l2=0.01)``: l2 * sum w^2."""

    def __init__(self, l2=DEFAULT):
        super().__init__(l2=l2)

    def get_config(self) -> dict:
        return {"l2": self.l2}


class L1L2(Regularizer):
    """Keras's ``L1L2(l1=0.0, l2=0.0)``: l1 * sum |w| + l2 * sum w^2."""


def l1_l2(l1=DEFAULT, l2=DEFAULT):
    """Keras's ``regularizers.l1_l2``: an :class:`L1L2` with both factors 0.01 by default."""
    return L1L2(l1, l2)


l1, l2 = L1, L2  # Keras's lower-case spellings of the classes

CLASSES = {"L1": L1, "L2": L2, "L1L2": L1L2}
NAMES = {"l1": L1, "l2": L2, "l1_l2": l1_l2}


def get(owner, name, value):
    """None, a :class:`Regularizer`, a name of :data:`NAMES` or a saved config
    ``{"class_name": "L2", "config": {"l2": 0.01}}``, as a Regularizer or None; ``owner``
    and ``name`` (the layer and the argument) start the message of a bad value."""
    if value is None or isinstance(value, Regularizer):
        return value
    if isinstance(value, str):
        make = NAMES.get(value.lower())
        if make is None:
            raise ValueError(f"{owner}: '{name}' must be None, a regularizer or one of "
                             f"{sorted(NAMES)}; received {value!r}")
        return make()
    if isinstance(value, dict) and set(value) == {"class_name", "config"} \
            and value["class_name"] in CLASSES and isinstance(value["config"], dict):
        return CLASSES[value["class_name"]](**value["config"])
    raise TypeError(f"{owner}: '{name}' must be None, a regularizer (regularizers.L1, L2, "
                    f"L1L2) or one of {sorted(NAMES)}; received {describe(value)}")


def serialize(value):
    """None, or ``{"class_name": ..., "config": ...}`` of a Regularizer (for a layer's
    config)."""
    if value is None:
        return None
    return {"class_name": type(value).__name__, "config": value.get_config()}
