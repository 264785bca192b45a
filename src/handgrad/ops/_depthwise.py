"""Depthwise convolution (one input channel per group) as multiply-adds over taps.

With ``groups == C_x`` every output channel ``c = g*m + j`` (channel multiplier
``m``) reads only input channel ``g``, so im2col + GEMM would multiply mostly
zeros. Instead, with ``x_rep`` the input with each channel repeated ``m`` times::

    y  = sum_t  x_rep_pad[window t] * w[t, 0, :]
    dx_rep_pad[window t] += dy * w[t, 0, :]        (dx sums the m copies back)
    dw[t, 0, :] = sum over (n, o) of x_rep_pad[window t] * dy

Each line loops over kernel taps only; every pass is elementwise over the output.
"""

from __future__ import annotations

from ._args.windows import pad_input, padded_zeros, taps
from ._engine import dispatch as engine


def _repeated(xp, x, multiplier):
    return x if multiplier == 1 else xp.repeat(x, multiplier, axis=-1)


def depthwise_forward(xp, x, w, axes, groups):
    """y (N, *O, C_y) of a depthwise conv: x (N, *S, groups), w (*K, 1, C_y)."""
    if engine.covers(axes, x, w):
        return engine.depthwise(x, w, axes)
    multiplier = w.shape[-1] // groups
    taps_w = w.reshape(-1, w.shape[-1])
    x_pad = pad_input(xp, _repeated(xp, x, multiplier), axes)
    y = None
    for tap, window in taps(axes):
        term = x_pad[(slice(None), *window)] * taps_w[tap]
        if y is None:
            y = term
        else:
            y += term
    return y


def depthwise_gradients(xp, x, w, dy, axes, groups):
    """(dx, dw) of a depthwise conv: one compiled pass when available."""
    if engine.covers(axes, x, w, dy):
        return engine.depthwise_gradients(x.shape, w, dy, axes, x)
    return (depthwise_input_grad(xp, dy, w, axes, groups, x.shape),
            depthwise_weight_grad(xp, x, dy, axes, groups, w.shape))


def depthwise_input_grad(xp, dy, w, axes, groups, x_shape):
    """dx (x_shape) of a depthwise conv: the adjoint of :func:`depthwise_forward`."""
    if engine.covers(axes, dy, w):
        return engine.depthwise_gradients(x_shape, w, dy, axes)[0]
    multiplier = w.shape[-1] // groups
    rep_shape = (*x_shape[:-1], x_shape[-1] * multiplier)
    buffer, inner = padded_zeros(xp, rep_shape, axes, dy.dtype)
    taps_w = w.reshape(-1, w.shape[-1])
    for tap, window in taps(axes):
        buffer[(slice(None), *window)] += dy * taps_w[tap]
    dx = buffer[inner]
    if multiplier > 1:
        dx = dx.reshape(*x_shape, multiplier).sum(axis=-1)
    return xp.ascontiguousarray(dx)


def depthwise_weight_grad(xp, x, dy, axes, groups, w_shape):
    """dw (*K, 1, C_y): per tap, the sum over batch and positions of window * dy."""
    multiplier = w_shape[-1] // groups
    x_pad = pad_input(xp, _repeated(xp, x, multiplier), axes)
    dw = xp.empty((len(list(taps(axes))), w_shape[-1]), dtype=dy.dtype)
    flat_dy = dy.reshape(-1, dy.shape[-1])
    for tap, window in taps(axes):
        window_values = x_pad[(slice(None), *window)].reshape(-1, dy.shape[-1])
        xp.einsum("mc,mc->c", window_values, flat_dy, out=dw[tap])
    return dw.reshape(w_shape)
