"""Minibatch iteration driven by an explicit ``numpy.random.Generator``.

One epoch visits every example exactly once: the ``N`` indices are permuted
(``shuffle=True``) or kept in order, then cut into ``ceil(N / batch_size)``
consecutive batches (``floor`` with ``drop_last=True``, which discards the
final short batch).

``x`` and ``y`` may each be one array or several: a list (or tuple) of arrays, or a
dict of arrays (the inputs and targets of a model with several inputs or outputs).
Every array is sliced with the same indices, and a batch has the structure that was
given: a list of arrays, or a dict with the same keys. ``None`` in a list or a dict
stays ``None`` in every batch (e.g. no target for one output). A list counts as several
arrays when each of its entries is an array or ``None``; any other list (of numbers, of
lists) is one array, as before.
"""

from __future__ import annotations

import numpy as np

from .._checks import array_module, as_generator, describe, is_int, positive_int


def _non_negative_int(op: str, name: str, value) -> int:
    if not is_int(value):
        raise TypeError(f"{op}: '{name}' must be an int >= 0; received {describe(value)}")
    if value < 0:
        raise ValueError(f"{op}: '{name}' must be an int >= 0; received {value!r}")
    return int(value)


def _flag(op: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: '{name}' must be a bool; received {describe(value)}")
    return bool(value)


def num_batches(n: int, batch_size: int, drop_last: bool = False) -> int:
    """Number of batches per epoch over ``n`` examples:
    ``floor(n / batch_size)`` if ``drop_last`` else ``ceil(n / batch_size)``."""
    op = "num_batches"
    n = _non_negative_int(op, "n", n)
    batch_size = positive_int(op, "batch_size", batch_size)
    drop_last = _flag(op, "drop_last", drop_last)
    return n // batch_size if drop_last else -(-n // batch_size)


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def is_structure(value) -> bool:
    """True for several arrays: a dict, or a non-empty list/tuple of arrays (or None)."""
    if isinstance(value, dict):
        return True
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and any(_is_array(v) for v in value)
            and all(v is None or _is_array(v) for v in value))


def leaves(name: str, value) -> list:
    """``[(label, array), ...]`` for one array (labelled ``'name'``) or a structure
    (labels like ``'x[1]'`` or ``'x['meta']'``); ``None`` entries are left out."""
    if isinstance(value, dict):
        return [(f"'{name}[{key!r}]'", v) for key, v in value.items() if v is not None]
    if is_structure(value):
        return [(f"'{name}[{i}]'", v) for i, v in enumerate(value) if v is not None]
    return [(f"'{name}'", value)]


def take(value, index):
    """``value[index]`` for one array, or for every array of a list/dict structure
    (None stays None)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {key: None if v is None else v[index] for key, v in value.items()}
    if is_structure(value):
        return [None if v is None else v[index] for v in value]
    return value[index]


def _as_batchable(op: str, name: str, value):
    if not _is_array(value):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{op}: '{name}' must be an array; received {describe(value)}")
        value = np.asarray(value)
    if value.ndim < 1:
        raise ValueError(
            f"{op}: '{name}' must have a leading example axis (ndim >= 1); "
            f"received {describe(value)}"
        )
    return value


def as_data(op: str, name: str, value):
    """One array, or a list/dict of arrays (None entries allowed), each checked."""
    if isinstance(value, dict):
        if not any(v is not None for v in value.values()):
            raise ValueError(f"{op}: '{name}' must hold at least one array; received "
                             f"{describe(value)}")
        return {key: None if v is None else _as_batchable(op, f"{name}[{key!r}]", v)
                for key, v in value.items()}
    if is_structure(value):
        return [None if v is None else _as_batchable(op, f"{name}[{i}]", v)
                for i, v in enumerate(value)]
    return _as_batchable(op, name, value)


def example_count(op: str, arrays) -> int:
    """The common number of examples of ``[(label, array), ...]`` (the first axis); the
    labels are quoted names, e.g. ``"'x'"`` or ``"input 'meta'"``."""
    (first, head), *rest = arrays
    for label, array in rest:
        if array.shape[0] != head.shape[0]:
            what = "'x' and 'y'" if (first, label) == ("'x'", "'y'") else "all the arrays"
            raise ValueError(
                f"{op}: {what} must have the same number of examples; received "
                f"{head.shape[0]} in {first} and {array.shape[0]} in {label}"
            )
    return int(head.shape[0])


def batches(
    x, y=None, batch_size: int = 32, *, shuffle: bool = True, rng=None, drop_last: bool = False
):
    """Iterate over one epoch of minibatches.

    ``x``: ``(N, ...)``; ``y``: ``(N, ...)`` or ``None``. Yields ``(xb, yb)``
    with ``xb``: ``(B, ...)``, ``yb``: ``(B, ...)`` (or just ``xb`` when ``y`` is
    ``None``), ``B = batch_size`` except possibly for the last batch. Either may be a
    list or a dict of ``(N, ...)`` arrays (see the module docstring): its batches are
    lists or dicts of ``(B, ...)`` arrays.
    ``rng`` (a Generator or an int seed) drives the shuffle; with
    ``shuffle=True`` and ``rng=None`` a fresh ``default_rng()`` is used. Without
    shuffling the batches are views in the original order.
    Arguments are validated when ``batches`` is called, not at the first ``next``.
    """
    op = "batches"
    x = as_data(op, "x", x)
    y = None if y is None else as_data(op, "y", y)
    arrays = leaves("x", x) + ([] if y is None else leaves("y", y))
    n = example_count(op, arrays)
    batch_size = positive_int(op, "batch_size", batch_size)
    shuffle = _flag(op, "shuffle", shuffle)
    drop_last = _flag(op, "drop_last", drop_last)
    generator = as_generator(op, "rng", rng) if shuffle else None
    count = num_batches(n, batch_size, drop_last)
    order = generator.permutation(n) if shuffle else None
    if order is not None:
        order = array_module(*(array for _, array in arrays)).asarray(order)
    return _iterate(x, y, batch_size, count, order)


def _iterate(x, y, batch_size, count, order):
    for i in range(count):
        start, stop = i * batch_size, (i + 1) * batch_size
        index = slice(start, stop) if order is None else order[start:stop]
        xb = take(x, index)
        yield xb if y is None else (xb, take(y, index))
