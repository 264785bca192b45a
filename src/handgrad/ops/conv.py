"""Convolutions and transposed convolutions, channels-last, as GEMMs.

Notation (one spatial axis shown; 2-D and 3-D are the same per axis)::

    y[n, o, g*Og + j] = b[g*Og + j]
        + sum_{k, c} x_pad[n, o*s + k*d, g*Cg + c] * w[k, c, g*Og + j]

The forward gathers the windows of ``x`` (im2col) into ``cols`` of shape (groups, N*O,
K*Cg) and does one batched matmul with ``w`` reshaped to (groups, K*Cg, Og); on the
CPU a few images at a time (:mod:`._gemm_chunks`). The backward pass is::

    db   = sum_{n, o} dy                              (sum over all but channels)
    dw   = cols^T @ dy                                (cols rebuilt from x)
    dx   = col2im(dy @ w^T)                           (scatter-add, one tap at a time)

A transposed convolution is the adjoint of the convolution with the same
weight: its forward is the convolution's ``dx`` and its backward uses the
convolution's forward (for its input gradient) and ``dw`` (swapping roles).
Convolutions of narrow groups (2 to 16 input channels, a multiple of 8 outputs per
group; or one group of 1 to 16 inputs and at most 32 outputs), 1-D to 3-D (a unit depth
stride), skip im2col on the compiled path: y, dx (unit strides) and dw sum in registers
(:mod:`._engine.grouped_taps`, called by :mod:`._engine.grouped_conv`), where the
GEMMs of 8 to 32 output channels ran thin and the gathers and scatters cost as much again;
float32 3x3 ones of unit strides and 8 to 32 channels take y and dx by Winograd's F(2x2,
3x3) instead (:mod:`._engine.winograd_taps`: 16 multiply-adds per 2x2 outputs and channel
pair where the taps take 36; dx of 32 inputs no longer falls back to im2col + GEMM).
The cache holds only the inputs and the geometry, never ``cols``. Every backward takes
``input_grad`` (default True): False skips ``dx`` (returned as None) for an input that
nobody differentiates (a model's data, as torch's tensors without ``requires_grad``).

As in PyTorch, only the batch may be empty (N = 0 gives an empty output and zero
weight and bias gradients); an empty spatial or channel axis, or an empty weight, is
refused with a ValueError.
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import array_module
from . import _gemm_chunks as gemm_chunks
from ._args.conv import ConvCall, open_conv_cache, prepare_conv, prepare_conv_transpose
from ._bias import add_bias
from ._depthwise import (
    depthwise_forward,
    depthwise_gradients,
    depthwise_input_grad,
    depthwise_weight_grad,
    flipped_axes,
)
from ._engine import dispatch as engine
from ._engine import gemm_conv, grouped_conv, grouped_taps
from ._gather import SlicedWindows, TakeWindows, col2im_matmul, im2col
from .declare import declare, exports


def _grouped_weight(w, groups):
    """``w`` (*K, Cg, C_out) as (groups, prod(K)*Cg, C_out // groups)."""
    per_group_in, out_channels = w.shape[-2], w.shape[-1]
    n_taps = math.prod(w.shape[:-2])
    grouped = w.reshape(n_taps, per_group_in, groups, out_channels // groups)
    return grouped.transpose(2, 0, 1, 3).reshape(groups, n_taps * per_group_in, -1)


def _ungrouped_weight(dw, w_shape):
    """The inverse of :func:`_grouped_weight`: (groups, prod(K)*Cg, Og) -> ``w_shape``."""
    n_taps, per_group_in = math.prod(w_shape[:-2]), w_shape[-2]
    dw = dw.reshape(dw.shape[0], n_taps, per_group_in, -1).transpose(1, 2, 0, 3)
    return dw.reshape(w_shape)


def _cpu_windows(xp, axes, groups, w_shape, *arrays):
    """How :mod:`._gemm_chunks` gathers and scatters windows on the CPU: NumPy's ``take``
    both ways, or with the compiled scatter where it is faster (NumPy arrays, 1-D/2-D,
    :func:`~._engine.gemm_conv.scatters_compiled`), or by strided slices (one input
    channel at a stride: :class:`~._gather.SlicedWindows`); None on a GPU."""
    if xp is not np:
        return None
    if gemm_conv.scatters_compiled(w_shape[-2], groups, axes) and engine.covers(axes, *arrays):
        return gemm_conv.CompiledWindows(axes, groups)
    if SlicedWindows.applies(w_shape[-2], axes):
        return SlicedWindows(axes, groups)
    return TakeWindows(axes, groups)


def _conv_forward(xp, x, w, axes, groups, b=None):
    """y = conv(x, w) (+ b when given): (N, *S, C_x) -> (N, *O, C_y); narrow ones that
    the register loop or Winograd's takes (:func:`._engine.grouped_conv.takes`) on the
    compiled path, which gives None where Winograd's sums meet an inf that the register
    loop cannot redo: then im2col + GEMM."""
    if grouped_conv.takes(w.shape, groups, axes, x.dtype) and grouped_conv.covers(axes, x, w):
        y = grouped_conv.forward(x, w, axes, b)
        if y is not None:
            return y
    out = tuple(a.size_out for a in axes)
    weight = _grouped_weight(w, groups)
    windows = _cpu_windows(xp, axes, groups, w.shape, x)
    if windows is not None:
        y = gemm_chunks.conv_forward(x, np.ascontiguousarray(weight), out, windows)
    else:
        y = xp.matmul(im2col(xp, x, axes, groups), weight)
        y = y.transpose(1, 0, 2).reshape(x.shape[0], *out, w.shape[-1])
    return y if b is None else add_bias(xp, y, b)


def _registers_input_grad(dy, w, axes, groups):
    """dx of a narrow convolution with unit strides as the correlation of dy with the
    flipped kernel (:func:`._engine.grouped_taps.transposed_weight`) by the register loop
    or Winograd's (:func:`._engine.grouped_conv.forward`), where the compiled path takes
    it; else None."""
    if not grouped_conv.takes(grouped_taps.transposed_shape(w.shape, groups), groups, axes,
                              dy.dtype):
        return None  # before any work: every dense convolution's backward passes here
    flipped = flipped_axes(axes)
    if flipped is None or not grouped_conv.covers(axes, dy, w):
        return None
    return grouped_conv.forward(dy, grouped_taps.transposed_weight(w, groups), flipped)


def _conv_input_grad(xp, dy, w, axes, groups, x_shape):
    """dx = col2im(dy @ w^T): the adjoint of :func:`_conv_forward` in ``x`` (narrow ones
    with unit strides: :func:`_registers_input_grad`)."""
    if (dx := _registers_input_grad(dy, w, axes, groups)) is not None:
        return dx
    weight = _grouped_weight(w, groups)
    windows = _cpu_windows(xp, axes, groups, w.shape, dy)
    if windows is not None:
        return gemm_chunks.conv_input_grad(dy, np.ascontiguousarray(weight), tuple(x_shape),
                                           windows)
    return col2im_matmul(xp, gemm_chunks.grouped_rows(dy, groups), weight.transpose(0, 2, 1),
                         x_shape, axes, groups)


def _conv_weight_grad(xp, x, dy, axes, groups, w_shape):
    """dw = cols(x)^T @ dy, reshaped to ``w_shape`` (*K, Cg, C_y); narrow ones that the
    register loop takes on the compiled path (:mod:`._engine.grouped_taps`)."""
    if grouped_taps.takes_weight_grad(w_shape, groups) and grouped_conv.covers(axes, x, dy):
        return grouped_conv.weight_grad(x, dy, axes, w_shape)
    windows = _cpu_windows(xp, axes, groups, w_shape, x, dy)
    if windows is not None:
        grouped_shape = (groups, math.prod(w_shape[:-1]), w_shape[-1] // groups)
        dw = gemm_chunks.conv_weight_grad(x, dy, grouped_shape, windows)
    else:
        dw = xp.matmul(im2col(xp, x, axes, groups).transpose(0, 2, 1),
                       gemm_chunks.grouped_rows(dy, groups))
    return _ungrouped_weight(dw, w_shape)


def _conv_gradients(xp, x, w, dy, axes, groups):
    """(dx, dw); on the CPU both from one gather per chunk of images (on a GPU dw first,
    so only one im2col-sized matrix is alive at a time)."""
    if (dx := _registers_input_grad(dy, w, axes, groups)) is not None:
        return dx, _conv_weight_grad(xp, x, dy, axes, groups, w.shape)
    windows = _cpu_windows(xp, axes, groups, w.shape, x, dy)
    if windows is not None:
        weight = np.ascontiguousarray(_grouped_weight(w, groups))
        dx, dw = gemm_chunks.conv_gradients(x, weight, dy, windows)
        return dx, _ungrouped_weight(dw, w.shape)
    dw = _conv_weight_grad(xp, x, dy, axes, groups, w.shape)
    return _conv_input_grad(xp, dy, w, axes, groups, x.shape), dw


def _kernels(w, groups):
    """(forward, input_grad, weight_grad, gradients) for this weight: taps-only
    multiply-adds for depthwise convolutions (one input channel per group), else
    im2col + GEMM (batched over the groups). ``gradients`` gives (dx, dw) together."""
    if groups > 1 and w.shape[-2] == 1:
        return (depthwise_forward, depthwise_input_grad, depthwise_weight_grad,
                depthwise_gradients)
    return _conv_forward, _conv_input_grad, _conv_weight_grad, _conv_gradients


def _bias_grad(dy):
    """db = sum of dy over all but the channels: the leading axes first (an inner loop over
    W * C values), then the positions of the last spatial axis (4 MB of float32: 0.08-0.12
    against 0.53-0.59 ms; two short sums, closer to exact than one over N*prod(S) rows)."""
    return dy.sum(axis=tuple(range(dy.ndim - 2))).sum(axis=0)


def _forward(call: ConvCall):
    xp = array_module(call.x, call.w)
    forward, input_grad, _, _ = _kernels(call.w, call.groups)
    if not call.transposed:
        return forward(xp, call.x, call.w, call.axes, call.groups, call.b), call
    y = input_grad(xp, call.x, call.w, call.axes, call.groups, call.conv_input_shape)
    return (y if call.b is None else add_bias(xp, y, call.b)), call


def _backward(op, forward_op, dy, cache, input_grad):
    """(dx, dw, db); dx is None (not computed) when ``input_grad`` is false."""
    call, dy = open_conv_cache(op, forward_op, dy, cache)
    x, w, axes, groups = call.x, call.w, call.axes, call.groups
    forward, _, weight_grad, gradients = _kernels(w, groups)
    xp = array_module(dy, w)
    dx = None
    if call.transposed:
        if input_grad:
            dx = forward(xp, dy, w, axes, groups)
        dw = weight_grad(xp, dy, x, axes, groups, w.shape)
    elif input_grad:
        dx, dw = gradients(xp, x, w, dy, axes, groups)
    else:
        dw = weight_grad(xp, x, dy, axes, groups, w.shape)
    db = None if call.b is None else _bias_grad(dy)
    return dx, dw, db


def conv1d(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution (cross-correlation, as PyTorch), channels-last.

    x (N, L, C_in), w (K, C_in // groups, C_out), b (C_out,) or None
    -> y (N, L_out, C_out), L_out = floor((L + pads - dilation*(K-1) - 1) / stride) + 1.
    ``padding``: int, (p,), ((before, after),), "valid", "same" or "causal".
    Returns ``(y, cache)`` for :func:`conv1d_backward`.
    """
    return _forward(prepare_conv("conv1d", 1, x, w, b, stride, padding, dilation, groups))


def conv1d_backward(dy, cache, *, input_grad=True):
    """Gradients of :func:`conv1d`: dy (N, L_out, C_out) -> (dx, dw, db).

    dx[n, o*s + k*d - p, c] += sum_j w[k, c, j] dy[n, o, j];
    dw[k, c, j] = sum_{n, o} x_pad[n, o*s + k*d, c] dy[n, o, j]; db = sum_{n, o} dy.
    ``db`` is None when the forward had no bias.
    """
    return _backward("conv1d_backward", "conv1d", dy, cache, input_grad)


def conv2d(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation, as PyTorch), channels-last.

    x (N, H, W, C_in), w (KH, KW, C_in // groups, C_out), b (C_out,) or None
    -> y (N, H_out, W_out, C_out), per axis out = floor((in + pads - d*(k-1) - 1) / s) + 1.
    ``padding``: int, (ph, pw), ((top, bottom), (left, right)), "valid" or "same".
    Returns ``(y, cache)`` for :func:`conv2d_backward`.
    """
    return _forward(prepare_conv("conv2d", 2, x, w, b, stride, padding, dilation, groups))


def conv2d_backward(dy, cache, *, input_grad=True):
    """Gradients of :func:`conv2d`: dy (N, H_out, W_out, C_out) -> (dx, dw, db).

    dx = col2im(dy @ w^T) (scatter-add over taps); dw = im2col(x)^T @ dy;
    db = sum of dy over (N, H_out, W_out). ``db`` is None when the forward had no bias.
    """
    return _backward("conv2d_backward", "conv2d", dy, cache, input_grad)


def conv_transpose1d(x, w, b=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1):
    """1-D transposed convolution: the adjoint of :func:`conv1d` with the same ``w``.

    x (N, L, C_in), w (K, C_out // groups, C_in), b (C_out,) or None -> y (N, L_out, C_out),
    L_out = (L - 1)*stride - pads + dilation*(K - 1) + 1 + output_padding.
    Equals ``conv1d_backward``'s dx for dy = x.
    """
    return _forward(prepare_conv_transpose("conv_transpose1d", 1, x, w, b, stride, padding,
                                           output_padding, dilation, groups))


def conv_transpose1d_backward(dy, cache, *, input_grad=True):
    """Gradients of :func:`conv_transpose1d`: dy (N, L_out, C_out) -> (dx, dw, db).

    dx = conv1d(dy, w) (same stride/padding/dilation/groups); dw = the conv1d weight
    gradient with input dy and upstream x; db = sum of dy over (N, L_out).
    """
    return _backward("conv_transpose1d_backward", "conv_transpose1d", dy, cache, input_grad)


def conv_transpose2d(x, w, b=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1):
    """2-D transposed convolution: the adjoint of :func:`conv2d` with the same ``w``.

    x (N, H, W, C_in), w (KH, KW, C_out // groups, C_in), b (C_out,) or None
    -> y (N, H_out, W_out, C_out), per axis
    out = (in - 1)*stride - pads + dilation*(k - 1) + 1 + output_padding.
    Equals ``conv2d_backward``'s dx for dy = x.
    """
    return _forward(prepare_conv_transpose("conv_transpose2d", 2, x, w, b, stride, padding,
                                           output_padding, dilation, groups))


def conv_transpose2d_backward(dy, cache, *, input_grad=True):
    """Gradients of :func:`conv_transpose2d`: dy (N, H_out, W_out, C_out) -> (dx, dw, db).

    dx = conv2d(dy, w); dw = im2col(dy)^T @ x (conv2d's weight gradient with the roles
    of input and upstream gradient swapped); db = sum of dy over (N, H_out, W_out).
    """
    return _backward("conv_transpose2d_backward", "conv_transpose2d", dy, cache, input_grad)


def conv3d(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution (cross-correlation, as PyTorch), channels-last.

    x (N, D, H, W, C_in), w (KD, KH, KW, C_in // groups, C_out), b (C_out,) or None
    -> y (N, D_out, H_out, W_out, C_out), per axis out = floor((in + pads - d*(k-1) - 1) / s) + 1.
    ``padding``: int, (pd, ph, pw), three (before, after) pairs, "valid" or "same".
    Returns ``(y, cache)`` for :func:`conv3d_backward`.
    """
    return _forward(prepare_conv("conv3d", 3, x, w, b, stride, padding, dilation, groups))


def conv3d_backward(dy, cache, *, input_grad=True):
    """Gradients of :func:`conv3d`: dy (N, D_out, H_out, W_out, C_out) -> (dx, dw, db).

    dx = col2im(dy @ w^T) (scatter-add over taps); dw = im2col(x)^T @ dy;
    db = sum of dy over (N, D_out, H_out, W_out). ``db`` is None without a bias.
    """
    return _backward("conv3d_backward", "conv3d", dy, cache, input_grad)


def conv_transpose3d(x, w, b=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1):
    """3-D transposed convolution: the adjoint of :func:`conv3d` with the same ``w``.

    x (N, D, H, W, C_in), w (KD, KH, KW, C_out // groups, C_in), b (C_out,) or None
    -> y (N, D_out, H_out, W_out, C_out), per axis
    out = (in - 1)*stride - pads + dilation*(k - 1) + 1 + output_padding.
    Equals ``conv3d_backward``'s dx for dy = x.
    """
    return _forward(prepare_conv_transpose("conv_transpose3d", 3, x, w, b, stride, padding,
                                           output_padding, dilation, groups))


def conv_transpose3d_backward(dy, cache, *, input_grad=True):
    """Gradients of :func:`conv_transpose3d`: dy (N, D_out, H_out, W_out, C_out) ->
    (dx, dw, db): dx = conv3d(dy, w); dw = conv3d's weight gradient with the roles of
    input and upstream gradient swapped; db = sum of dy over all but channels.
    """
    return _backward("conv_transpose3d_backward", "conv_transpose3d", dy, cache, input_grad)


# The declarations: kernels, torch counterpart, sample inputs (in ops/samples/conv.py).
from .samples import conv as _s  # noqa: E402

declare(conv1d, conv1d_backward, torch=_s.torch_conv, samples=_s.CONV1D)
declare(conv2d, conv2d_backward, torch=_s.torch_conv, samples=_s.CONV2D)
declare(conv3d, conv3d_backward, torch=_s.torch_conv, samples=_s.CONV3D)
declare(conv_transpose1d, conv_transpose1d_backward, torch=_s.torch_conv_transpose,
        samples=_s.CONV_TRANSPOSE1D)
declare(conv_transpose2d, conv_transpose2d_backward, torch=_s.torch_conv_transpose,
        samples=_s.CONV_TRANSPOSE2D)
declare(conv_transpose3d, conv_transpose3d_backward, torch=_s.torch_conv_transpose,
        samples=_s.CONV_TRANSPOSE3D)
__all__ = exports(__name__, globals())
