"""Softmax and log-softmax along one axis, stable for any finite logits.

With ``z = x - max(x)`` along the axis (so ``exp`` never overflows)::

    softmax:      y = exp(z) / sum(exp(z))        dx = y * (dy - sum(dy * y))
    log_softmax:  y = z - log(sum(exp(z)))        dx = dy - exp(y) * sum(dy)
    softmin:      y = softmax(-x)                 dx = -y * (dy - sum(dy * y))

Sums run along ``axis`` with the axis kept. Both caches hold only ``y``. An empty
``x`` (also empty along ``axis``) gives an empty ``y``, as in PyTorch.
"""

from __future__ import annotations

from .._checks import array_module, float_array
from . import special
from ._args.elementwise import axis_index, make_cache, open_cache
from .declare import declare, exports


def _softmax(xp, x, axis):
    """softmax(x) along ``axis`` (an empty copy where the axis is empty)."""
    if x.shape[axis] == 0:
        return x.copy()
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _prepare(op, x, axis):
    x = float_array(op, "x", x)
    axis = axis_index(op, axis, x.ndim)
    return array_module(x), x, axis


def softmax(x, axis=-1):
    """y = exp(x) / sum(exp(x)) along ``axis``; any shape, output of ``x``'s shape and dtype.

    Returns ``(y, cache)`` for :func:`softmax_backward`.
    """
    xp, x, axis = _prepare("softmax", x, axis)
    y = _softmax(xp, x, axis)
    return y, make_cache("softmax", x, y, (axis,))


def softmax_backward(dy, cache):
    """dx = y * (dy - sum(dy * y, axis)): the softmax Jacobian diag(y) - y y^T applied to dy."""
    dy, cache = open_cache("softmax_backward", "softmax", dy, cache)
    xp, y, (axis,) = array_module(dy), cache.saved, cache.params
    return y * (dy - xp.sum(dy * y, axis=axis, keepdims=True))


def log_softmax(x, axis=-1):
    """y = x - logsumexp(x) along ``axis``, finite for logits of any finite size.

    Returns ``(y, cache)`` for :func:`log_softmax_backward`.
    """
    xp, x, axis = _prepare("log_softmax", x, axis)
    y = special.log_softmax(xp, x, axis)
    return y, make_cache("log_softmax", x, y, (axis,))


def log_softmax_backward(dy, cache):
    """dx = dy - softmax(x) * sum(dy, axis), with softmax(x) = exp(y)."""
    dy, cache = open_cache("log_softmax_backward", "log_softmax", dy, cache)
    xp, y, (axis,) = array_module(dy), cache.saved, cache.params
    return dy - xp.exp(y) * xp.sum(dy, axis=axis, keepdims=True)


def softmin(x, axis=-1):
    """y = softmax(-x) along ``axis``; any shape, output of ``x``'s shape and dtype.

    Returns ``(y, cache)`` for :func:`softmin_backward`.
    """
    xp, x, axis = _prepare("softmin", x, axis)
    y = _softmax(xp, -x, axis)
    return y, make_cache("softmin", x, y, (axis,))


def softmin_backward(dy, cache):
    """dx = -y * (dy - sum(dy * y, axis)): the softmax Jacobian, times -1 from -x."""
    dy, cache = open_cache("softmin_backward", "softmin", dy, cache)
    xp, y, (axis,) = array_module(dy), cache.saved, cache.params
    return y * (xp.sum(dy * y, axis=axis, keepdims=True) - dy)


declare(softmax, softmax_backward, layer="Softmax", samples=({}, {"axis": -2}),
        torch=lambda F, t, axis=-1: F.softmax(t, axis),
        onnx=lambda g, x, axis: g.op("Softmax", [x], "softmax", axis=axis))
declare(log_softmax, log_softmax_backward, layer="LogSoftmax", samples=({}, {"axis": -2}),
        torch=lambda F, t, axis=-1: F.log_softmax(t, axis),
        onnx=lambda g, x, axis: g.op("LogSoftmax", [x], "log_softmax", axis=axis))
declare(softmin, softmin_backward, layer="Softmin", samples=({}, {"axis": -2}),
        torch=lambda F, t, axis=-1: F.softmin(t, axis),
        onnx=lambda g, x, axis: g.op("Softmax", [g.op("Neg", [x], "neg_x")], "softmin",
                                     axis=axis))
__all__ = exports(__name__, globals())
