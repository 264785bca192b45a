"""Block repetition of channels-last maps and its transpose: each spatial position
repeated k_a times along axis a (nearest upsampling at integer factors, the backward of
average pooling over whole blocks), and the sum over each k_1 x k_2 .. block."""

from __future__ import annotations

import itertools


def blocked(a, factors):
    """(N, *(S*k), C) viewed as (N, S_1, k_1, S_2, k_2, .., C)."""
    shape = [a.shape[0]]
    for size, k in zip(a.shape[1:-1], factors):
        shape += [size // k, k]
    return a.reshape(*shape, a.shape[-1])


def repeat(xp, x, factors):
    """Each position of x repeated k times per axis: one broadcast copy."""
    y = xp.empty((x.shape[0], *(s * k for s, k in zip(x.shape[1:-1], factors)), x.shape[-1]),
                 dtype=x.dtype)
    spread = (slice(None),) + (slice(None), None) * len(factors)
    blocked(y, factors)[...] = x[spread]
    return y


def repeat_sum(xp, dy, factors):
    """The backward of :func:`repeat`: the sum of each k_1 x k_2 .. block, as adds of
    strided views (one per block position)."""
    blocks = blocked(dy, factors)
    views = [blocks[(slice(None),) + sum(((slice(None), r) for r in at), ())]
             for at in itertools.product(*(range(k) for k in factors))]
    if len(views) == 1:
        return views[0].copy()
    g = xp.add(views[0], views[1])
    for view in views[2:]:
        xp.add(g, view, out=g)
    return g
