"""Fully connected (dense) layer: one matmul over all leading axes.

With ``x`` flattened to rows ``X`` (M, F_in), M the product of the leading axes::

    y  = X w + b                  (M, F_out), reshaped back to (..., F_out)
    dx = dY w^T                   (..., F_in)
    dw = X^T dY                   (F_in, F_out)
    db = sum over rows of dY      (F_out,)

The weight is stored (F_in, F_out), so ``F.linear(x, w.T, b)`` is PyTorch's twin.
Any size may be 0, as in PyTorch: with F_in = 0 the sums are empty, so y = b (zeros
without a bias), dw is (0, F_out) and db = sum dY. The cache holds ``x`` and ``w``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._checks import array_module, float_array, same_dtype, upstream_grad
from ._args.cache import Cache, check_cache
from .declare import declare, exports


@dataclass(frozen=True)
class LinearCache(Cache):
    """The inputs of a :func:`linear` call."""

    x: object
    w: object
    has_bias: bool


def _rows(a):
    """(..., F) as (M, F), M the product of the leading axes (also when M or F is 0)."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


def linear(x, w, b=None):
    """y = x @ w + b: x (..., F_in), w (F_in, F_out), b (F_out,) or None -> y (..., F_out).

    Returns ``(y, cache)`` for :func:`linear_backward`.
    """
    op = "linear"
    x = float_array(op, "x", x)
    if x.ndim == 0:
        raise ValueError(f"{op}: 'x' must have at least 1 dimension (..., F_in); received a scalar")
    w = float_array(op, "w", w, 2, "(F_in, F_out)")
    if b is not None:
        b = float_array(op, "b", b, 1, "(F_out,)")
    same_dtype(op, x=x, w=w, b=b)
    if x.shape[-1] != w.shape[0]:
        raise ValueError(
            f"{op}: 'x' has {x.shape[-1]} features (last axis of shape {tuple(x.shape)}) but "
            f"'w' of shape {tuple(w.shape)} expects F_in = {w.shape[0]}"
        )
    if b is not None and b.shape != (w.shape[1],):
        raise ValueError(
            f"{op}: 'b' must have shape ({w.shape[1]},) to match F_out of 'w'; "
            f"received shape {tuple(b.shape)}"
        )
    xp = array_module(x, w)
    # One GEMM over all leading axes (a 3-D matmul would loop over the first one).
    y = xp.matmul(_rows(x), w).reshape(*x.shape[:-1], w.shape[1])
    if b is not None:
        y += b
    return y, LinearCache("linear", x, w, b is not None)



def linear_backward(dy, cache, *, input_grad=True):
    """Gradients of :func:`linear`: dy (..., F_out) -> (dx, dw, db).

    dx = dy @ w^T; dw = sum over rows of x^T dy; db = sum of dy over the leading axes
    (None when the forward had no bias). ``input_grad=False``: dx is None, not computed
    (an input nobody differentiates, such as a model's data).
    """
    op = "linear_backward"
    cache = check_cache(op, cache, "linear", LinearCache)
    x, w = cache.x, cache.w
    dy = upstream_grad(op, dy, (*x.shape[:-1], w.shape[1]), x.dtype)
    xp = array_module(dy, w)
    rows_dy = _rows(dy)
    dx = xp.matmul(rows_dy, w.T).reshape(x.shape) if input_grad else None
    dw = xp.matmul(_rows(x).T, rows_dy)
    db = xp.sum(rows_dy, axis=0) if cache.has_bias else None
    return dx, dw, db


from .declare import Sample  # noqa: E402  (the declaration's samples)

declare(linear, linear_backward, torch=lambda F, x, w, b=None: F.linear(x, w.T, b),
        samples=(Sample(((3, 4), (4, 5), (5,))), Sample(((2, 3, 4), (4, 2), None))))
__all__ = exports(__name__, globals())
