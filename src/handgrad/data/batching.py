"""Minibatch iteration driven by an explicit ``numpy.random.Generator``.

One epoch visits every example exactly once: the ``N`` indices are permuted
(``shuffle=True``) or kept in order, then cut into ``ceil(N / batch_size)``
consecutive batches (``floor`` with ``drop_last=True``, which discards the
final short batch).
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


def _as_batchable(op: str, name: str, value):
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{op}: '{name}' must be an array; received {describe(value)}")
        value = np.asarray(value)
    if value.ndim < 1:
        raise ValueError(
            f"{op}: '{name}' must have a leading example axis (ndim >= 1); "
            f"received {describe(value)}"
        )
    return value


def batches(
    x, y=None, batch_size: int = 32, *, shuffle: bool = True, rng=None, drop_last: bool = False
):
    """Iterate over one epoch of minibatches.

    ``x``: ``(N, ...)``; ``y``: ``(N, ...)`` or ``None``. Yields ``(xb, yb)``
    with ``xb``: ``(B, ...)``, ``yb``: ``(B, ...)`` (or just ``xb`` when ``y`` is
    ``None``), ``B = batch_size`` except possibly for the last batch.
    ``rng`` (a Generator or an int seed) drives the shuffle; with
    ``shuffle=True`` and ``rng=None`` a fresh ``default_rng()`` is used. Without
    shuffling the batches are views in the original order.
    Arguments are validated when ``batches`` is called, not at the first ``next``.
    """
    op = "batches"
    x = _as_batchable(op, "x", x)
    if y is not None:
        y = _as_batchable(op, "y", y)
        if y.shape[0] != x.shape[0]:
            raise ValueError(
                f"{op}: 'x' and 'y' must have the same number of examples; received "
                f"{x.shape[0]} in 'x' and {y.shape[0]} in 'y'"
            )
    batch_size = positive_int(op, "batch_size", batch_size)
    shuffle = _flag(op, "shuffle", shuffle)
    drop_last = _flag(op, "drop_last", drop_last)
    generator = as_generator(op, "rng", rng) if shuffle else None
    n = x.shape[0]
    count = num_batches(n, batch_size, drop_last)
    order = generator.permutation(n) if shuffle else None
    if order is not None:
        order = array_module(x).asarray(order)
    return _iterate(x, y, batch_size, count, order)


def _iterate(x, y, batch_size, count, order):
    for i in range(count):
        start, stop = i * batch_size, (i + 1) * batch_size
        index = slice(start, stop) if order is None else order[start:stop]
        xb = x[index]
        yield xb if y is None else (xb, y[index])
