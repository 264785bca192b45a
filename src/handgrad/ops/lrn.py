"""Local response normalization across channels, as ``F.local_response_norm``.

Channels-last: x (N, ..., C), the window runs over the last axis. With n = size, the
window of channel c is [c - n // 2, c + (n - 1) // 2], zero outside [0, C)::

    d_c = k + (alpha / n) * sum over j in window(c) of x_j^2
    y_c = x_c * d_c^(-beta)

Backward: channel i lies in window(c) for c in [i - (n - 1) // 2, i + n // 2], so with
t_c = dy_c * x_c * d_c^(-beta - 1)::

    dx_i = dy_i * d_i^(-beta) - (2 beta alpha / n) * x_i * sum over those c of t_c

Window sums loop over the n taps (slices of the channel axis). The cache holds x and d.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import array_module, float_array, positive_int, upstream_grad
from .._hyper import number
from ._args.cache import Cache, check_cache
from .declare import Fixed, Sample, declare, exports


@dataclass(frozen=True)
class LrnCall:
    """The validated arguments of a :func:`local_response_norm` call."""

    x: object
    size: int
    alpha: float
    beta: float
    k: float


@dataclass(frozen=True)
class LrnCache(Cache):
    """The call and the denominators' base ``d`` (x's shape)."""

    call: LrnCall
    d: object


def prepare_lrn(op, x, size, alpha, beta, k):
    """Validated :class:`LrnCall`, shared with the loop twin."""
    x = float_array(op, "x", x, None)
    if x.ndim < 3:
        raise ValueError(f"{op}: 'x' must have 3 or more axes (N, ..., C), as PyTorch; "
                         f"received shape {tuple(x.shape)}")
    return LrnCall(x, positive_int(op, "size", size), number(op, "alpha", alpha),
                   number(op, "beta", beta), number(op, "k", k))


def _window_sum(xp, a, before, after):
    """out[..., c] = sum of a[..., j] over j in [c - before, c + after] inside [0, C)."""
    out = xp.zeros_like(a)
    channels = a.shape[-1]
    for offset in range(-before, after + 1):
        lo, hi = max(0, -offset), min(channels, channels - offset)
        if lo < hi:
            out[..., lo:hi] += a[..., lo + offset:hi + offset]
    return out


def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0):
    """y = x / (k + alpha / size * window sum of x^2)^beta over the channel (last) axis:
    x (N, ..., C) -> y (N, ..., C). Returns ``(y, cache)`` for
    :func:`local_response_norm_backward`."""
    call = prepare_lrn("local_response_norm", x, size, alpha, beta, k)
    xp, x = array_module(call.x), call.x
    d = call.k + (call.alpha / call.size) * _window_sum(xp, x * x, call.size // 2,
                                                        (call.size - 1) // 2)
    y = x * d ** -call.beta
    return y, LrnCache("local_response_norm", call, d)


def local_response_norm_backward(dy, cache):
    """dx of :func:`local_response_norm`: dy (N, ..., C) -> dx;
    dx = dy d^-beta - (2 beta alpha / n) x * transposed window sum of dy x d^(-beta - 1)."""
    op = "local_response_norm_backward"
    cache = check_cache(op, cache, "local_response_norm", LrnCache)
    call, d = cache.call, cache.d
    dy = upstream_grad(op, dy, call.x.shape, call.x.dtype)
    xp = array_module(dy)
    scaled = d ** -call.beta
    t = dy * call.x * scaled / d
    spread = _window_sum(xp, t, (call.size - 1) // 2, call.size // 2)
    return dy * scaled - (2.0 * call.beta * call.alpha / call.size) * call.x * spread


def torch_local_response_norm(F, x, size, alpha=1e-4, beta=0.75, k=1.0):
    """``F.local_response_norm`` on channels-last tensors (channels moved to axis 1)."""
    y = F.local_response_norm(x.movedim(-1, 1), size, alpha, beta, k)
    return y.movedim(1, -1)


declare(local_response_norm, local_response_norm_backward, torch=torch_local_response_norm,
        samples=(
            Sample(((2, 4, 6), Fixed(3)), {"alpha": 0.5, "beta": 0.75, "k": 1.0}),
            Sample(((2, 3, 2, 5), Fixed(4)), {"alpha": 0.8, "beta": 1.3, "k": 2.0}),
            Sample(((1, 2, 2, 1, 7), Fixed(2)), {"alpha": 1.5, "beta": 0.5, "k": 0.5}),
            Sample(((2, 3, 3), Fixed(5))),  # the window covers all channels
        ))
__all__ = exports(__name__, globals())
