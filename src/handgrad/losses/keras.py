"""Keras's cross-entropies: ``categorical_crossentropy``, ``sparse_categorical_crossentropy``
and ``binary_crossentropy``, of probabilities (``from_logits=False``, Keras's default) or of
logits (``from_logits=True``: the softmax/sigmoid cross-entropies of this package), and
their loss classes (``CategoricalCrossentropy(from_logits=False)``, ...).

From probabilities, Keras's formula (its NumPy, torch and JAX backends; eps =
``keras.config.epsilon()`` = 1e-7, :data:`EPSILON`, in the input's dtype)::

    categorical  S = sum_c p_c,  r = p / S,  c = clip(r, eps, 1 - eps),
                 loss = -sum_c q_c log c_c
    sparse       the categorical loss of q = onehot(label)
    binary       c = clip(p, eps, 1 - eps),  loss = -(t log c + (1 - t) log(1 - c))

(q: targets, smoothed to (1 - ls) q + ls / C by ``label_smoothing``; binary targets to
(1 - ls) t + ls / 2. Keras's binary loss then means over the last axis per example:
``"mean"`` over every element is the same number.) Gradients, by hand, with m = 1 where the
clip passes its input (eps <= r <= 1 - eps, as torch's ``clamp``) and 0 where it clips::

    categorical  g_c = -q_c m_c / c_c,  dp_j = (g_j - sum_c g_c r_c) / S
    binary       dp = m (c - t) / (c (1 - c))

Through the model's own Softmax (S = 1, no clipping): dp_j = -q_j / p_j + sum_c q_c, and
softmax's backward dz = p (dp - sum_j p_j dp_j) = p sum_c q_c - q, the fused logits
gradient; through a Sigmoid dz = s (1 - s) dp = s - t. Values outside [0, 1] (logits given
as probabilities) are refused with the hint ``from_logits=True``.
"""

from __future__ import annotations

import functools

from .._checks import array_module, choice, describe, float_array
from .._hyper import flag, number
from ._common import REDUCTIONS, first_index, pair, reduce, unit_interval
from .binary import binary_cross_entropy_with_logits
from .classification import _scores, _targets, softmax_cross_entropy

#: Keras's fuzz factor ``keras.config.epsilon()``.
EPSILON = 1e-7


def _check_probabilities(op, xp, p, name, rows=False):
    unit_interval(op, xp, p, name, "pass from_logits=True; Keras's default is False")
    if rows:
        index = first_index(xp, xp.sum(p, axis=-1) <= 0)
        if index is not None:
            raise ValueError(f"{op}: '{name}' must have a positive sum over the class axis "
                             f"(Keras divides by it); received an all-zero row at index "
                             f"{index}")


def _labels(op, pred, labels, sparse, name):
    """Class ids of shape (N, ...) (``sparse``; (N, ..., 1) is squeezed) or one-hot targets
    of ``pred``'s shape (integer and bool ones taken in ``pred``'s dtype)."""
    labels = labels if hasattr(labels, "dtype") else array_module(pred).asarray(labels)
    if sparse:
        if labels.dtype.kind not in "iu":
            raise TypeError(f"{op}: 'labels' must be integer class ids; received "
                            f"{describe(labels)} (for one-hot targets use "
                            f"'categorical_crossentropy')")
        if pred.ndim >= 1 and tuple(labels.shape) == (*pred.shape[:-1], 1):
            labels = labels[..., 0]
        return labels
    if tuple(labels.shape) != tuple(pred.shape):
        raise ValueError(f"{op}: 'labels' must be one-hot targets of the {name}' shape "
                         f"{tuple(pred.shape)}; received {describe(labels)} (for class ids "
                         f"use 'sparse_categorical_crossentropy')")
    return labels.astype(pred.dtype) if labels.dtype.kind in "biu" else labels


def _categorical(op, pred, labels, from_logits, label_smoothing, reduction, sparse):
    name = "logits" if flag(op, "from_logits", from_logits) else "probabilities"
    pred = float_array(op, name, pred)
    labels = _labels(op, pred, labels, sparse, name)
    if from_logits:
        return softmax_cross_entropy(pred, labels, label_smoothing=label_smoothing,
                                     reduction=reduction)
    ls = number(op, "label_smoothing", label_smoothing, low=0.0, high=1.0)
    p = _scores(op, name, pred)
    xp = array_module(p)
    _check_probabilities(op, xp, p, name, rows=True)
    q, divisor = _targets(op, xp, labels, p, None, -100, ls, name)
    eps = p.dtype.type(EPSILON)
    total = xp.sum(p, axis=-1, keepdims=True)
    r = p / total
    c = xp.clip(r, eps, 1 - eps)
    values = -xp.sum(q * xp.log(c), axis=-1)
    g = -q / c * ((r >= eps) & (r <= 1 - eps))
    grad = (g - xp.sum(g * r, axis=-1, keepdims=True)) / total
    return reduce(op, values, grad, reduction, divisor)


def categorical_crossentropy(pred, labels, *, from_logits=False, label_smoothing=0.0,
                             reduction="mean"):
    """Keras's categorical cross-entropy: ``pred`` (N, ..., C) probabilities (see the
    module docstring), or logits with ``from_logits=True`` (:func:`softmax_cross_entropy`);
    ``labels`` one-hot (or probability) targets of ``pred``'s shape. ``"mean"`` divides by
    N * ...; returns ``(loss, dpred)``."""
    return _categorical("categorical_crossentropy", pred, labels, from_logits,
                        label_smoothing, reduction, sparse=False)


def sparse_categorical_crossentropy(pred, labels, *, from_logits=False, label_smoothing=0.0,
                                    reduction="mean"):
    """Keras's sparse categorical cross-entropy: :func:`categorical_crossentropy` of
    integer class ids of shape (N, ...) or (N, ..., 1)."""
    return _categorical("sparse_categorical_crossentropy", pred, labels, from_logits,
                        label_smoothing, reduction, sparse=True)


def binary_crossentropy(pred, targets, *, from_logits=False, label_smoothing=0.0,
                        reduction="mean"):
    """Keras's binary cross-entropy: ``pred`` probabilities clipped to [eps, 1 - eps] (see
    the module docstring), or logits with ``from_logits=True``
    (:func:`binary_cross_entropy_with_logits`); ``targets`` of ``pred``'s shape and dtype.
    Returns ``(loss, dpred)``."""
    op = "binary_crossentropy"
    from_logits = flag(op, "from_logits", from_logits)
    name = "logits" if from_logits else "probabilities"
    xp, p, t = pair(op, pred, targets, name, "targets")
    ls = number(op, "label_smoothing", label_smoothing, low=0.0, high=1.0)
    if ls > 0.0:
        t = t * (1 - ls) + 0.5 * ls
    if from_logits:
        return binary_cross_entropy_with_logits(p, t, reduction=reduction)
    _check_probabilities(op, xp, p, name)
    eps = p.dtype.type(EPSILON)
    c = xp.clip(p, eps, 1 - eps)
    values = -(t * xp.log(c) + (1 - t) * xp.log1p(-c))
    grad = (c - t) / (c * (1 - c)) * ((p >= eps) & (p <= 1 - eps))
    return reduce(op, values, grad, reduction)


#: Keras's ``reduction`` names beside handgrad's.
KERAS_REDUCTIONS = {"sum_over_batch_size": "mean", None: "none"}


class KerasLoss(functools.partial):
    """A Keras loss object: the loss function with its options bound (a
    ``functools.partial``, so ``compile`` reads ``from_logits`` from it); ``get_config()``
    gives the options back and the model file stores them."""

    loss = None  # the function, set by each subclass

    def __new__(cls, from_logits=False, label_smoothing=0.0, reduction="sum_over_batch_size"):
        op = cls.__name__
        flag(op, "from_logits", from_logits)
        number(op, "label_smoothing", label_smoothing, low=0.0, high=1.0)
        if reduction is None or isinstance(reduction, str):
            reduction = KERAS_REDUCTIONS.get(reduction, reduction)
        choice(op, "reduction", reduction, REDUCTIONS)
        return super().__new__(cls, cls.loss, from_logits=from_logits,
                               label_smoothing=float(label_smoothing), reduction=reduction)

    @property
    def __name__(self):
        return self.func.__name__

    def get_config(self) -> dict:
        """The constructor's arguments."""
        return dict(self.keywords)

    def __repr__(self):
        options = ", ".join(f"{key}={value!r}" for key, value in self.keywords.items())
        return f"{type(self).__name__}({options})"


class CategoricalCrossentropy(KerasLoss):
    """Keras's ``CategoricalCrossentropy``: :func:`categorical_crossentropy`."""

    loss = staticmethod(categorical_crossentropy)


class SparseCategoricalCrossentropy(KerasLoss):
    """Keras's ``SparseCategoricalCrossentropy``: :func:`sparse_categorical_crossentropy`."""

    loss = staticmethod(sparse_categorical_crossentropy)


class BinaryCrossentropy(KerasLoss):
    """Keras's ``BinaryCrossentropy``: :func:`binary_crossentropy`."""

    loss = staticmethod(binary_crossentropy)


#: The loss classes by name (a saved model names its loss object's class).
LOSS_CLASSES = {cls.__name__: cls for cls in (CategoricalCrossentropy,
                                              SparseCategoricalCrossentropy,
                                              BinaryCrossentropy)}
