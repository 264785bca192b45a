"""Inverted dropout: zero each element with probability ``rate``, scale the rest.

With ``u`` uniform on [0, 1) drawn from an explicit Generator in ``x``'s dtype::

    m  = [u >= rate] / (1 - rate)        (the mask, in x's dtype)
    y  = m * x                           E[y] = x
    dx = m * dy

The mask is drawn directly in ``x``'s dtype and scaled in place (no float64
temporary); the cache holds only the mask. ``training=False`` or ``rate=0``
is the identity and draws nothing.

``rows=(start, total)`` says that ``x`` holds examples ``start .. start + N - 1`` of a
batch of ``total`` (one process's share in data-parallel training): ``u`` is drawn for
the whole ``(total, ...)`` batch and rows ``start:start + N`` are kept, so each example
gets the mask it would get in one process, however the batch is split.
"""

from __future__ import annotations

from .._checks import array_module, as_generator, describe, float_array, is_int
from .._hyper import flag, number
from ._args.elementwise import make_cache, open_cache
from .declare import declare, exports


def _rows(op, rows, x):
    """``(start, total)`` checked against ``x``'s N rows: ``0 <= start``, ``start + N <=
    total``."""
    if rows is None:
        return None
    if x.ndim == 0 or not (isinstance(rows, (tuple, list)) and len(rows) == 2
                           and all(is_int(v) for v in rows)):
        raise TypeError(f"{op}: 'rows' must be None or a pair of ints (start, total) for an "
                        f"input with a batch axis; received {describe(rows)} for 'x' of "
                        f"shape {tuple(x.shape)}")
    start, total = (int(v) for v in rows)
    if start < 0 or start + x.shape[0] > total:
        raise ValueError(f"{op}: 'rows' (start, total) must satisfy 0 <= start and start + N "
                         f"<= total for 'x' with N = {x.shape[0]} rows; received {rows!r}")
    return start, total


def dropout(x, rate, rng, *, training=True, rows=None):
    """y = x * mask, mask = [u >= rate] / (1 - rate), u ~ U[0, 1) from ``rng``.

    x any shape (float32/float64); rate in [0, 1); rng a Generator or int seed
    (required: there is no global random state); rows None or ``(start, total)``: ``x``
    holds rows ``start:start + N`` of a batch of ``total`` (see the module docstring).
    Returns ``(y, cache)`` for :func:`dropout_backward`; with ``training=False`` or
    ``rate == 0``, ``y`` is ``x``.
    """
    op = "dropout"
    x = float_array(op, "x", x)
    rate = number(op, "rate", rate, low=0.0, high=1.0, high_open=True)
    generator = as_generator(op, "rng", rng, allow_none=False)
    rows = _rows(op, rows, x)
    if not flag(op, "training", training) or rate == 0.0:
        return x, make_cache(op, x)
    xp = array_module(x)
    if rows is None:
        mask = generator.random(x.shape, dtype=x.dtype)
    else:
        start, total = rows
        mask = generator.random((total, *x.shape[1:]), dtype=x.dtype)[start:start + x.shape[0]]
    mask = xp.asarray(mask)  # one host-to-device copy; the threshold runs where x lives
    xp.multiply(mask >= rate, x.dtype.type(1.0 / (1.0 - rate)), out=mask)
    return x * mask, make_cache(op, x, mask)


def dropout_backward(dy, cache):
    """dx = mask * dy (dx = dy when the forward was the identity)."""
    dy, cache = open_cache("dropout_backward", "dropout", dy, cache)
    return dy if cache.saved is None else dy * cache.saved


from .declare import Fixed, Sample  # noqa: E402  (the declaration's samples)


def _torch_dropout(F, x, rate, rng, *, training=True, rows=None):
    """torch draws its own mask: only the identity has a torch counterpart."""
    if training and rate:
        raise NotImplementedError("torch's dropout draws its own mask")
    return F.dropout(x, rate, training=False)


declare(dropout, dropout_backward, torch=_torch_dropout,
        samples=(Sample(((4, 5), Fixed(0.3), Fixed(7))),
                 Sample(((4, 5), Fixed(0.3), Fixed(7)), {"training": False}),
                 Sample(((2, 3, 2), Fixed(0.0), Fixed(1)))))
__all__ = exports(__name__, globals())
