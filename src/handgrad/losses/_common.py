"""Shared checks and the reduction of the loss functions (see :mod:`handgrad.losses`)."""

from __future__ import annotations

from .._checks import array_module, choice, float_array, same_dtype

REDUCTIONS = ("mean", "sum", "none")


def reduce(op, values, grad, reduction, divisor=None):
    """Apply ``reduction`` to per-element ``values``; ``grad`` is the gradient of their sum
    (an array, or a tuple of arrays for several inputs). ``"mean"`` divides by ``divisor``
    (default: the number of values; a weighted mean passes its total weight)."""
    reduction = choice(op, "reduction", reduction, REDUCTIONS)
    if reduction == "none":
        return values, grad
    total = array_module(values).sum(values)
    if reduction == "sum":
        return float(total), grad
    count = float(values.size if divisor is None else divisor)
    if count == 0.0:  # a mean over nothing (every label ignored): NaN, zero gradient (torch)
        return float("nan"), grad
    count_ = values.dtype.type(count)
    if isinstance(grad, tuple):
        return float(total) / count, tuple(g / count_ for g in grad)
    return float(total) / count, grad / count_


def first_index(xp, mask):
    """The index (a tuple of ints) of the first True entry of ``mask``, or None."""
    if not bool(xp.any(mask)):
        return None
    return tuple(int(i) for i in xp.argwhere(mask)[0])


def unit_interval(op, xp, p, name, fix):
    """Refuse a value of ``p`` outside [0, 1] (logits given as probabilities), naming the
    first one and ``fix`` (how to pass logits)."""
    index = first_index(xp, ~((p >= 0) & (p <= 1)))
    if index is not None:
        raise ValueError(f"{op}: '{name}' must lie in [0, 1]; received {float(p[index])!r} "
                         f"at index {index} (for logits, the model's raw outputs, {fix})")


def nonempty(op, name, array):
    if array.size == 0:
        raise ValueError(f"{op}: '{name}' must not be empty; received shape {tuple(array.shape)}")


def pair(op, first, second, first_name, second_name):
    """Two float arrays of one shape and one dtype."""
    first = float_array(op, first_name, first)
    second = float_array(op, second_name, second)
    same_dtype(op, **{first_name: first, second_name: second})
    if first.shape != second.shape:
        raise ValueError(
            f"{op}: '{second_name}' must have the shape of '{first_name}' "
            f"{tuple(first.shape)}; received shape {tuple(second.shape)}"
        )
    nonempty(op, first_name, first)
    return array_module(first, second), first, second


def weights(op, name, value, like):
    """None, or a float array of ``like``'s dtype that broadcasts to ``like``'s shape."""
    if value is None:
        return None
    value = float_array(op, name, value)
    same_dtype(op, **{"input": like, name: value})
    try:
        shape = array_module(like).broadcast_shapes(value.shape, like.shape)
    except ValueError:
        shape = None
    if shape != like.shape:
        raise ValueError(f"{op}: '{name}' must broadcast to the input's shape "
                         f"{tuple(like.shape)}; received shape {tuple(value.shape)}")
    return value


def class_weight(op, weight, like):
    """None, or a float array of shape (C,) in ``like``'s dtype (C = like's last axis)."""
    if weight is None:
        return None
    weight = float_array(op, "weight", weight)
    same_dtype(op, input=like, weight=weight)
    if weight.shape != like.shape[-1:]:
        raise ValueError(f"{op}: 'weight' must hold one value per class, shape "
                         f"{tuple(like.shape[-1:])}; received shape {tuple(weight.shape)}")
    return weight


def weighted(op, values, grad, weight, reduction):
    """``reduce`` of ``weight * values`` (gradient ``weight * grad``); no weight: as is."""
    if weight is not None:
        values, grad = values * weight, grad * weight
    return reduce(op, values, grad, reduction)


def labels_array(like, labels):
    """``labels`` as an array of ``like``'s array module (arrays are kept as they are)."""
    xp = array_module(like)
    return labels if hasattr(labels, "dtype") and hasattr(labels, "shape") else xp.asarray(labels)
