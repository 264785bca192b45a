"""RMS normalization over the trailing axes, as ``F.rms_norm``: layer norm without the
mean and the shift. Per leading index, over the m values of the normalized axes::

    r    = 1 / sqrt(mean(x^2) + eps)
    xhat = x * r,   y = gamma * xhat                    (gamma of normalized_shape)

Backward, with g = gamma * dy (g = dy without gamma) and means over the normalized axes::

    dgamma = sum dy * xhat                              (over the leading axes)
    dx     = (g - xhat * mean(g * xhat)) * r

(layer norm's formula without its ``- mean(g)`` term: the backward is
:mod:`.normalization`'s, given a cache marked not centered). ``eps=None`` is the machine
epsilon of ``x``'s dtype, as in PyTorch. The cache holds ``xhat``, ``r`` and ``gamma``.
"""

from __future__ import annotations

from .._checks import array_module
from ._args.norm import prepare_rms_norm
from .declare import Fixed, Sample, declare, exports
from .normalization import NormCache, _backward, _sum_product


def rms_norm(x, normalized_shape, gamma=None, *, eps=None):
    """RMS normalization, as ``F.rms_norm(x, normalized_shape, gamma, eps)``.

    x (..., *normalized_shape); normalized_shape an int d (= (d,)) or a tuple; gamma of
    shape normalized_shape or None; eps > 0 or None (the dtype's machine epsilon).
    Returns ``(y, cache)`` for :func:`rms_norm_backward`.
    """
    call = prepare_rms_norm("rms_norm", x, normalized_shape, gamma, eps)
    xp, x = array_module(call.x), call.x
    if call.group_size == 0:  # empty groups: nothing to normalize
        inv_rms = xp.ones([1] * x.ndim, dtype=x.dtype)
    else:
        inv_rms = 1.0 / xp.sqrt(_sum_product(xp, x, x, call.axes) / call.group_size + call.eps)
    xhat = x * inv_rms
    y = xhat * call.gamma if call.gamma is not None else xhat.copy()
    cache = NormCache("rms_norm", tuple(x.shape), x.dtype, xhat, inv_rms, call.axes, True,
                      call.gamma, False, len(call.axes), centered=False)
    return y, cache


def rms_norm_backward(dy, cache):
    """Gradients of :func:`rms_norm`: dy (..., *normalized_shape) -> (dx, dgamma);
    dx = (g - xhat * mean(g * xhat)) / rms, g = gamma * dy; dgamma = sum dy * xhat over
    the leading axes (None without gamma)."""
    dx, dgamma, _ = _backward("rms_norm_backward", "rms_norm", dy, cache)
    return dx, dgamma


def torch_rms_norm(F, x, normalized_shape, gamma=None, *, eps=None):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    return F.rms_norm(x, tuple(shape), gamma, eps)


declare(rms_norm, rms_norm_backward, torch=torch_rms_norm, samples=(
    Sample(((3, 5), Fixed(5), (5,))),
    Sample(((2, 3, 4), Fixed((3, 4)), None), {"eps": 1e-3}),
    Sample(((2, 2, 3, 4), Fixed(4), (4,)), {"eps": 1e-6}),
))
__all__ = exports(__name__, globals())
