"""Inverted dropout: zero each element with probability ``rate``, scale the rest.

With ``u`` uniform on [0, 1) drawn from an explicit Generator in ``x``'s dtype::

    m  = [u >= rate] / (1 - rate)        (the mask, in x's dtype)
    y  = m * x                           E[y] = x
    dx = m * dy

The mask is drawn directly in ``x``'s dtype and scaled in place (no float64
temporary); the cache holds only the mask. ``training=False`` or ``rate=0``
is the identity and draws nothing.
"""

from __future__ import annotations

from .._checks import array_module, as_generator, float_array
from .._hyper import flag, number
from ._args.elementwise import make_cache, open_cache


def dropout(x, rate, rng, *, training=True):
    """y = x * mask, mask = [u >= rate] / (1 - rate), u ~ U[0, 1) from ``rng``.

    x any shape (float32/float64); rate in [0, 1); rng a Generator or int seed
    (required: there is no global random state). Returns ``(y, cache)`` for
    :func:`dropout_backward`; with ``training=False`` or ``rate == 0``, ``y`` is ``x``.
    """
    op = "dropout"
    x = float_array(op, "x", x)
    rate = number(op, "rate", rate, low=0.0, high=1.0, high_open=True)
    generator = as_generator(op, "rng", rng, allow_none=False)
    if not flag(op, "training", training) or rate == 0.0:
        return x, make_cache(op, x)
    xp = array_module(x)
    mask = generator.random(x.shape, dtype=x.dtype)
    keep = mask >= rate
    mask = xp.asarray(mask)
    xp.multiply(xp.asarray(keep), x.dtype.type(1.0 / (1.0 - rate)), out=mask)
    return x * mask, make_cache(op, x, mask)


def dropout_backward(dy, cache):
    """dx = mask * dy (dx = dy when the forward was the identity)."""
    dy, cache = open_cache("dropout_backward", "dropout", dy, cache)
    return dy if cache.saved is None else dy * cache.saved
