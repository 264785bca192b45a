"""Per-example weights: ``fit(sample_weight=..., class_weight=...)`` and
``evaluate(sample_weight=...)``, as Keras weighs them.

Keras's default reduction, ``"sum_over_batch_size"``, divides the weighted sum of the
per-example losses by the batch size, not by the sum of the weights::

    loss = sum_i w_i l_i / n,     dpred_i = w_i dl_i / n

with ``l_i`` a loss with ``reduction="none"`` (per element: ``n`` is the number of loss
elements, N * ... ; a loss of C columns per example, such as ``mse`` on (N, C), counts
N * C, which is Keras's mean over the last axis per example, then over the batch) and
``dl_i`` the gradient of their sum. This is one mechanism for every loss
(:func:`weighted_loss`, used by the objective). The epoch's loss is the batches' losses
weighted by batch size, so sum_i w_i l_i / N over the data set. Metrics are not weighted
(Keras's ``metrics``; it weighs only ``weighted_metrics``).

``class_weight`` ``{class id: weight}`` gives each example the weight of its class (a
class not in the dict: 1.0, as Keras); the class of an example is its integer label, the
arg-max of a one-hot row, or a (N, 1) binary target rounded. With ``sample_weight`` too,
the two multiply (as Keras). Models with several outputs take one ``sample_weight`` for
every output and no ``class_weight`` (as Keras).
"""

from __future__ import annotations

import inspect
import math

import numpy as np

from .._checks import array_module, describe, is_int


def check_sample_weight(op, sample_weight, n, arg="sample_weight"):
    """``sample_weight`` as a float64 array of shape (n,), finite and >= 0 (None stays)."""
    if sample_weight is None:
        return None
    if not hasattr(sample_weight, "shape"):
        if not isinstance(sample_weight, (list, tuple)):
            raise TypeError(f"{op}: '{arg}' must be an array of shape ({n},), one weight per "
                            f"example; received {describe(sample_weight)}")
        sample_weight = np.asarray(sample_weight)
    if sample_weight.dtype.kind not in "biuf":
        raise TypeError(f"{op}: '{arg}' must be a numeric array; received "
                        f"{describe(sample_weight)}")
    if tuple(sample_weight.shape) != (n,):
        raise ValueError(f"{op}: '{arg}' must have shape ({n},), one weight per example; "
                         f"received shape {tuple(sample_weight.shape)}")
    xp = array_module(sample_weight)
    sample_weight = sample_weight.astype(xp.float64)
    bad = ~(xp.isfinite(sample_weight) & (sample_weight >= 0))
    if bool(xp.any(bad)):
        index = int(xp.argwhere(bad)[0][0])
        raise ValueError(f"{op}: '{arg}' must be finite and >= 0; received "
                         f"{float(sample_weight[index])!r} at index {index}")
    return sample_weight


def class_weight_to_sample_weight(op, class_weight, y, multi):
    """The (N,) weights of ``class_weight`` (see the module docstring) for targets ``y``."""
    if multi:
        raise ValueError(f"{op}: 'class_weight' is for a model with one output (as Keras); "
                         f"give 'sample_weight' instead")
    if not isinstance(class_weight, dict):
        raise TypeError(f"{op}: 'class_weight' must be a dict {{class id: weight}}; received "
                        f"{describe(class_weight)}")
    for key, value in class_weight.items():
        if not is_int(key) or key < 0:
            raise TypeError(f"{op}: 'class_weight' keys must be class ids (ints >= 0); "
                            f"received {key!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or \
                not math.isfinite(value) or value < 0:
            raise ValueError(f"{op}: 'class_weight' values must be finite numbers >= 0; "
                             f"received {value!r} for class {key}")
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:
        ids = np.argmax(y, axis=-1)
    else:
        ids = np.rint(y.reshape(len(y), -1)[:, 0]) if y.ndim <= 2 else None
    if ids is None:
        raise ValueError(f"{op}: 'class_weight' needs targets of shape (N,), (N, 1) or one-hot "
                         f"(N, C); received shape {tuple(y.shape)}")
    table = {int(key): float(value) for key, value in class_weight.items()}
    return np.array([table.get(int(i), 1.0) for i in ids], dtype=np.float64)


def example_weights(op, model, y, sample_weight, class_weight, n):
    """The (N,) weights of ``fit``/``evaluate`` (None when neither is given)."""
    weights = check_sample_weight(op, sample_weight, n)
    if class_weight is None:
        return weights
    multi = not getattr(model, "single_output", True)
    from_classes = class_weight_to_sample_weight(op, class_weight, y, multi)
    return from_classes if weights is None else weights * from_classes


def _takes_reduction(fn) -> bool:
    try:
        inspect.signature(fn).bind_partial(reduction="none")
    except (TypeError, ValueError):
        return False
    return True


def weighted_loss(fn, pred, y, weights, name):
    """``(sum_i w_i l_i / n, w_i dl_i / n)`` of loss ``fn`` with ``reduction="none"``
    (see the module docstring); ``weights`` (B,) scale the examples (first axis)."""
    if not _takes_reduction(fn):
        raise TypeError(f"sample weights need per-example losses: the loss of output {name!r} "
                        f"({getattr(fn, '__name__', fn)!r}) must take reduction='none'")
    values, grad = fn(pred, y, reduction="none")
    xp = array_module(values)
    n = values.size
    w = xp.asarray(weights).astype(values.dtype)
    total = float(xp.sum(values * w.reshape((-1,) + (1,) * (values.ndim - 1)))) / n \
        if n else 0.0
    scale = (w / values.dtype.type(max(n, 1))).reshape((-1,) + (1,) * (grad.ndim - 1))
    return total, grad * scale

