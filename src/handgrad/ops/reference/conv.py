"""Naive convolutions: plain loops over output (or input) positions.

The readable specification of :mod:`handgrad.ops.conv`, with the same
signatures. Each output pixel is a dot product between one window of the
zero-padded input and the kernel of its group; the backward pass walks the
same windows and distributes ``dy`` back. A transposed convolution is written
in its scatter form: every input pixel stamps ``w @ x[n, i]`` onto the output.
These are slow on purpose: they exist to be read and to test against.
"""

from __future__ import annotations

import numpy as np

from .._args.conv import open_conv_cache, prepare_conv, prepare_conv_transpose
from ..declare import exports


def _zero_pad(x, axes):
    """Pad the spatial axes with zeros so that every window fits."""
    widths = [(0, 0)]
    for a in axes:
        widths.append((a.pad_before, max(a.pad_after, 0) + a.stride + a.kernel * a.dilation))
    widths.append((0, 0))
    return np.pad(x, widths)


def _unpad(x_pad, axes):
    index = (slice(None),) + tuple(slice(a.pad_before, a.pad_before + a.size_in) for a in axes)
    return x_pad[index].copy()


def _window(axes, out_index):
    """Slices of the padded input that output position ``out_index`` reads."""
    return tuple(
        slice(o * a.stride, o * a.stride + (a.kernel - 1) * a.dilation + 1, a.dilation)
        for a, o in zip(axes, out_index)
    )


def _conv_loops(x, w, axes, groups):
    """y[n, o, g-block] = <window of x_pad at o in group g, w[..., g-block]>."""
    per_group_in, out_channels = w.shape[-2], w.shape[-1]
    per_group_out = out_channels // groups
    out_shape = tuple(a.size_out for a in axes)
    y = np.zeros((x.shape[0], *out_shape, out_channels), dtype=x.dtype)
    x_pad = _zero_pad(x, axes)
    kernel_axes = len(axes) + 1
    for n in range(x.shape[0]):
        for out_index in np.ndindex(*out_shape):
            window = _window(axes, out_index)
            for g in range(groups):
                cin = slice(g * per_group_in, (g + 1) * per_group_in)
                cout = slice(g * per_group_out, (g + 1) * per_group_out)
                patch = x_pad[(n, *window, cin)]
                y[(n, *out_index, cout)] = np.tensordot(patch, w[..., cout], kernel_axes)
    return y


def _conv_loops_backward(x, w, dy, axes, groups):
    """Walk the same windows: dx_pad[window] += w @ dy[o]; dw += patch (x) dy[o]."""
    per_group_in, out_channels = w.shape[-2], w.shape[-1]
    per_group_out = out_channels // groups
    x_pad = _zero_pad(x, axes)
    dx_pad = np.zeros_like(x_pad)
    dw = np.zeros_like(w)
    for n in range(x.shape[0]):
        for out_index in np.ndindex(*dy.shape[1:-1]):
            window = _window(axes, out_index)
            for g in range(groups):
                cin = slice(g * per_group_in, (g + 1) * per_group_in)
                cout = slice(g * per_group_out, (g + 1) * per_group_out)
                grad = dy[(n, *out_index, cout)]
                dx_pad[(n, *window, cin)] += w[..., cout] @ grad
                dw[..., cout] += np.multiply.outer(x_pad[(n, *window, cin)], grad)
    return _unpad(dx_pad, axes), dw


def _scatter_loops(x, w, axes, groups):
    """Transposed conv: out_pad[window of i] += w[..., g-block] @ x[n, i, g-block]."""
    per_group_out, in_channels = w.shape[-2], w.shape[-1]
    per_group_in = in_channels // groups
    out_shape = (x.shape[0], *(a.size_in for a in axes), per_group_out * groups)
    out_pad = _zero_pad(np.zeros(out_shape, dtype=x.dtype), axes)
    for n in range(x.shape[0]):
        for in_index in np.ndindex(*x.shape[1:-1]):
            window = _window(axes, in_index)
            for g in range(groups):
                cin = slice(g * per_group_in, (g + 1) * per_group_in)
                cout = slice(g * per_group_out, (g + 1) * per_group_out)
                out_pad[(n, *window, cout)] += w[..., cin] @ x[(n, *in_index, cin)]
    return _unpad(out_pad, axes)


def _bias_grad(dy):
    db = np.zeros(dy.shape[-1], dtype=dy.dtype)
    for index in np.ndindex(*dy.shape[:-1]):
        db += dy[index]
    return db


def _forward(call):
    x, w = np.asarray(call.x), np.asarray(call.w)
    if call.transposed:
        y = _scatter_loops(x, w, call.axes, call.groups)
    else:
        y = _conv_loops(x, w, call.axes, call.groups)
    if call.b is not None:
        y = y + call.b
    return y, call


def _backward(op, forward, dy, cache):
    call, dy = open_conv_cache(op, forward, dy, cache)
    x, w, axes, groups = call.x, call.w, call.axes, call.groups
    if call.transposed:
        # out = scatter(x, w): dx[i] = <dout window at i, w>, dw += dout window (x) x[i].
        dout_pad = _zero_pad(dy, axes)
        dx = np.zeros_like(x)
        dw = np.zeros_like(w)
        per_group_out = w.shape[-2]
        per_group_in = w.shape[-1] // groups
        for n in range(x.shape[0]):
            for in_index in np.ndindex(*x.shape[1:-1]):
                window = _window(axes, in_index)
                for g in range(groups):
                    cin = slice(g * per_group_in, (g + 1) * per_group_in)
                    cout = slice(g * per_group_out, (g + 1) * per_group_out)
                    patch = dout_pad[(n, *window, cout)]
                    dx[(n, *in_index, cin)] = np.tensordot(patch, w[..., cin], len(axes) + 1)
                    dw[..., cin] += np.multiply.outer(patch, x[(n, *in_index, cin)])
    else:
        dx, dw = _conv_loops_backward(x, w, dy, axes, groups)
    db = None if call.b is None else _bias_grad(dy)
    return dx, dw, db


def conv1d(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """Loop twin of :func:`handgrad.ops.conv1d`."""
    return _forward(prepare_conv("conv1d", 1, x, w, b, stride, padding, dilation, groups))


def conv1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.conv1d_backward`."""
    return _backward("conv1d_backward", "conv1d", dy, cache)


def conv2d(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """Loop twin of :func:`handgrad.ops.conv2d`."""
    return _forward(prepare_conv("conv2d", 2, x, w, b, stride, padding, dilation, groups))


def conv2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.conv2d_backward`."""
    return _backward("conv2d_backward", "conv2d", dy, cache)


def conv_transpose1d(x, w, b=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1):
    """Loop twin of :func:`handgrad.ops.conv_transpose1d` (scatter form)."""
    return _forward(prepare_conv_transpose(
        "conv_transpose1d", 1, x, w, b, stride, padding, output_padding, dilation, groups))


def conv_transpose1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.conv_transpose1d_backward`."""
    return _backward("conv_transpose1d_backward", "conv_transpose1d", dy, cache)


def conv_transpose2d(x, w, b=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1):
    """Loop twin of :func:`handgrad.ops.conv_transpose2d` (scatter form)."""
    return _forward(prepare_conv_transpose(
        "conv_transpose2d", 2, x, w, b, stride, padding, output_padding, dilation, groups))


def conv_transpose2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.conv_transpose2d_backward`."""
    return _backward("conv_transpose2d_backward", "conv_transpose2d", dy, cache)



def conv3d(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """Loop twin of :func:`handgrad.ops.conv3d`."""
    return _forward(prepare_conv("conv3d", 3, x, w, b, stride, padding, dilation, groups))


def conv3d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.conv3d_backward`."""
    return _backward("conv3d_backward", "conv3d", dy, cache)


def conv_transpose3d(x, w, b=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1):
    """Loop twin of :func:`handgrad.ops.conv_transpose3d` (scatter form)."""
    return _forward(prepare_conv_transpose(
        "conv_transpose3d", 3, x, w, b, stride, padding, output_padding, dilation, groups))


def conv_transpose3d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.conv_transpose3d_backward`."""
    return _backward("conv_transpose3d_backward", "conv_transpose3d", dy, cache)

__all__ = exports(__name__, globals())
