"""Depthwise convolution (one input channel per group) as multiply-adds over taps.

With ``groups == C_x`` every output channel ``c = g*m + j`` (channel multiplier
``m``) reads only input channel ``g``, so im2col + GEMM would multiply mostly
zeros. Instead, with ``x_rep`` the input with each channel repeated ``m`` times::

    y  = sum_t  x_rep_pad[window t] * w[t, 0, :]
    dx_rep_pad[window t] += dy * w[t, 0, :]        (dx sums the m copies back)
    dw[t, 0, :] = sum over (n, o) of x_rep_pad[window t] * dy

Each line loops over kernel taps only; every pass is elementwise over the output.
Where the last spatial axis has stride 1 (and there are at least two), its positions
and the channels are one axis of the channels-last arrays (``_merged``): a tap then reads
one contiguous run of ``OW * C`` values per output row, with the weight row tiled ``OW``
times, instead of ``OW`` runs of ``C`` (NumPy's inner loops are ``OW`` times longer).
The passes run block by block (a few images, or a few output rows of one image),
all taps of a block before the next, so a block's data stays in the CPU cache; on a
GPU (CuPy) the whole output is one block: kh*kw launches per pass.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ._args.windows import WindowAxis, pad_input, padded_zeros, taps
from ._bias import add_bias
from ._block_threads import batch_halves, run_blocks
from ._blocks import block_taps, block_view, merged_last, plan_blocks
from ._engine import dispatch as engine


def _repeated(xp, x, multiplier):
    return x if multiplier == 1 else xp.repeat(x, multiplier, axis=-1)


def _merged(axes, channels):
    """The window axes of the arrays with the last spatial axis and the channels merged
    (``merged_last``), or None where that axis has a stride (or is the only one): a tap
    of the merged axis reads ``size_out * channels`` consecutive values."""
    last = axes[-1]
    if len(axes) < 2 or last.stride != 1:
        return None
    return (*axes[:-1], WindowAxis(last.size_in * channels, last.kernel, 1,
                                   last.dilation * channels, last.pad_before * channels,
                                   last.size_out * channels))


def _tap_weights(xp, w, axes, merged):
    """(taps, C_y), or (taps, OW * C_y) with each row tiled ``OW`` times when merged."""
    taps_w = w.reshape(-1, w.shape[-1])
    return taps_w if merged is None else xp.tile(taps_w, (1, axes[-1].size_out))


def depthwise_forward(xp, x, w, axes, groups, b=None):
    """y (N, *O, C_y) of a depthwise conv: x (N, *S, groups), w (*K, 1, C_y), plus b
    (C_y,) when given (on the compiled path the sums start at it: no pass of its own)."""
    if engine.covers(axes, x, w):
        return engine.depthwise(x, w, axes, b)
    if xp is np:
        y = _tap_sums(_repeated(np, x, w.shape[-1] // groups), w, axes)
    else:
        y = _gpu_tap_sums(xp, _repeated(xp, x, w.shape[-1] // groups), w, axes)
    return y if b is None else add_bias(xp, y, b)


def _gpu_tap_sums(xp, x_rep, w, axes):
    """On a GPU: a multiply and an add per tap over the whole output (no cache to block
    for)."""
    merged = _merged(axes, w.shape[-1])
    taps_w = _tap_weights(xp, w, axes, merged)
    x_pad = pad_input(xp, x_rep, axes)
    y_full = xp.empty((x_rep.shape[0], *(a.size_out for a in axes), w.shape[-1]),
                      dtype=x_rep.dtype)
    y = y_full
    if merged is not None:
        axes, x_pad, y = merged, merged_last(x_pad), merged_last(y_full)
    product = xp.empty_like(y)
    for tap, window in taps(axes):
        if tap == 0:
            xp.multiply(x_pad[(slice(None), *window)], taps_w[0], out=y)
        else:
            xp.multiply(x_pad[(slice(None), *window)], taps_w[tap], out=product)
            xp.add(y, product, out=y)
    return y_full


def _gradient_passes(xp, dy, axes, groups, x_shape, w_shape, x=None, w=None):
    """``(dx, dw)`` in one blocked pass over ``dy``: ``dx`` when ``w`` is given,
    ``dw`` when ``x`` is given, None for the other."""
    multiplier = w_shape[-1] // groups
    n_taps = len(list(taps(axes)))
    rep_shape = (*x_shape[:-1], x_shape[-1] * multiplier)
    merged = _merged(axes, w_shape[-1])
    x_pad = None if x is None else pad_input(xp, _repeated(xp, x, multiplier), axes)
    if w is not None:
        taps_w = _tap_weights(xp, w, axes, merged)
        buffer, inner = padded_zeros(xp, rep_shape, axes, dy.dtype)
    tap_axes, x_taps, dx_taps = axes, x_pad, None if w is None else buffer
    if merged is not None:
        tap_axes, dy = merged, merged_last(dy)
        x_taps = None if x is None else merged_last(x_pad)
        dx_taps = None if w is None else merged_last(buffer)
    dw = None if x is None else xp.zeros((n_taps, dy.shape[-1]), dtype=dy.dtype)
    blocks, elements = plan_blocks(dy.shape, dy.dtype.itemsize, whole=xp is not np)
    scratch = xp.empty(elements, dtype=dy.dtype)
    for images, rows in blocks:
        dy_block = dy[images, rows]
        product = block_view(scratch, dy_block.shape)
        flat = product.reshape(-1, dy.shape[-1])
        ones = xp.ones(flat.shape[0], dtype=dy.dtype)
        for tap, window in block_taps(tap_axes, images, rows):
            if w is not None:
                target = dx_taps[window]
                xp.multiply(dy_block, taps_w[tap], out=product)
                xp.add(target, product, out=target)
            if x is not None:
                xp.multiply(x_taps[window], dy_block, out=product)
                dw[tap] += ones @ flat
    if dw is not None:  # merged: the sum of each tap's OW channel rows
        dw = dw.reshape(n_taps, -1, w_shape[-1]).sum(axis=1)
    dx = None
    if w is not None:
        dx = buffer[inner]
        if multiplier > 1:
            dx = dx.reshape(*x_shape, multiplier).sum(axis=-1)
        dx = xp.ascontiguousarray(dx)
    return dx, None if dw is None else dw.reshape(w_shape)


def depthwise_gradients(xp, x, w, dy, axes, groups):
    """(dx, dw) of a depthwise conv: one compiled pass when available; NumPy: dw by an
    einsum per tap, dx by one einsum where the strides are 1 (else the blocked taps); a
    GPU: one blocked pass over ``dy`` for both."""
    if engine.covers(axes, x, w, dy):
        return engine.depthwise_gradients(x.shape, w, dy, axes, x)
    if xp is np:  # dx by the flipped-kernel correlation (or the blocks), dw by einsums
        return (depthwise_input_grad(xp, dy, w, axes, groups, x.shape),
                depthwise_weight_grad(xp, x, dy, axes, groups, w.shape))
    return _gradient_passes(xp, dy, axes, groups, x.shape, w.shape, x=x, w=w)


def depthwise_input_grad(xp, dy, w, axes, groups, x_shape):
    """dx (x_shape) of a depthwise conv: the adjoint of :func:`depthwise_forward`; with
    unit strides (on the CPU) the correlation of dy with the flipped kernel, which the
    compiled path runs through its forward loop."""
    flipped = flipped_axes(axes) if xp is np else None
    compiled = engine.covers(axes, dy, w)
    if compiled and flipped is None:
        return engine.depthwise_gradients(x_shape, w, dy, axes)[0]
    if flipped is None:
        return _gradient_passes(xp, dy, axes, groups, tuple(x_shape), w.shape, w=w)[0]
    kernel = tuple(slice(None, None, -1) for _ in axes)
    dx = (engine.depthwise(dy, w[kernel], flipped) if compiled
          else _tap_sums(dy, w[kernel], flipped))
    multiplier = w.shape[-1] // groups
    return dx if multiplier == 1 else dx.reshape(*x_shape, multiplier).sum(axis=-1)


def depthwise_weight_grad(xp, x, dy, axes, groups, w_shape):
    """dw (*K, 1, C_y): per tap, the sum over batch and positions of window * dy."""
    if engine.covers(axes, x, dy):
        return engine.depthwise_weight_grad(x, dy, axes, tuple(w_shape))
    if xp is np:
        return _tap_weight_grad(_repeated(np, x, w_shape[-1] // groups), dy, axes,
                                tuple(w_shape))
    return _gradient_passes(xp, dy, axes, groups, x.shape, tuple(w_shape), x=x)[1]


# ---------------------------------------------------------------- NumPy: one einsum
def _windows(x_pad, axes):
    """The view (N, *O, [C,] *K) of the padded input (N, *P, [C]) whose [n, o, k] is what
    output ``o``'s tap ``k`` reads (no copy)."""
    view = x_pad
    for axis, a in enumerate(axes, start=1):
        view = sliding_window_view(view, (a.kernel - 1) * a.dilation + 1, axis=axis)
        outputs = slice(0, (a.size_out - 1) * a.stride + 1, a.stride)
        view = view[(slice(None),) * axis + (outputs, Ellipsis, slice(None, None, a.dilation))]
    return view


def _part_windows(x_rep, part, axes, merged, *arrays):
    """The window view of the images ``part`` of x_rep (padded), and each of ``arrays``'
    same images: all on the merged axes (``merged_last``) where ``merged`` is given."""
    x_pad, arrays = pad_input(np, x_rep[part], axes), [a[part] for a in arrays]
    if merged is None:
        return _windows(x_pad, axes), *arrays
    return _windows(merged_last(x_pad), merged), *(merged_last(a) for a in arrays)


def _subscripts(n_axes, merged):
    """einsum letters of the windows (n, outputs, [c,] taps), of the output (n, outputs[,
    c]) and of the weights (taps, c or the merged last output axis)."""
    outputs, kernel = "ijk"[:n_axes], "xyz"[:n_axes]
    out = f"n{outputs}" + ("" if merged else "c")
    return out + kernel, out, kernel + out[-1]


def _tap_sums(x_rep, w, axes):
    """y (N, *O, C_y) = sum over taps of window * weight, as one einsum over a sliding-window
    view of x_rep (N, *S, C_y) (NumPy's fused multiply-add loop: one pass, no temporaries);
    each half of a large batch on its own thread (:func:`._block_threads.batch_halves`)."""
    merged = _merged(axes, w.shape[-1])
    y = np.empty((x_rep.shape[0], *(a.size_out for a in axes), w.shape[-1]), dtype=x_rep.dtype)
    weights = _tap_weights(np, w, axes, merged).reshape(*w.shape[:-2], -1)
    windows, out, weight_letters = _subscripts(len(axes), merged is not None)

    def images(part):
        view, target = _part_windows(x_rep, part, axes, merged, y)
        np.einsum(f"{windows},{weight_letters}->{out}", view, weights, out=target)

    run_blocks(images, batch_halves(x_rep.shape[0], y.nbytes))
    return y


def flipped_axes(axes):
    """Where every stride is 1, the axes of dx as a correlation of dy with the flipped
    kernel (input position ``p`` reads ``dy[p + pad - k*dilation]``); else None."""
    flipped = []
    for a in axes:
        pad = (a.kernel - 1) * a.dilation - a.pad_before
        if a.stride != 1 or pad < 0:
            return None
        flipped.append(WindowAxis(a.size_out, a.kernel, 1, a.dilation, pad, a.size_in))
    return tuple(flipped)


def _tap_weight_grad(x_rep, dy, axes, w_shape):
    """dw (*K, 1, C_y) = sum over (n, o) of window * dy: one einsum per tap (a dot
    product per channel, faster than one einsum reducing over every tap at once); each
    half of a large batch on its own thread, the two sums added."""
    merged = _merged(axes, w_shape[-1])
    kernel = tuple(a.kernel for a in axes)
    out = _subscripts(len(axes), merged is not None)[1]

    def images(part):
        windows, grad = _part_windows(x_rep, part, axes, merged, dy)
        dw = np.empty((*kernel, grad.shape[-1]), dtype=dy.dtype)
        for tap in np.ndindex(*kernel):
            dw[tap] = np.einsum(f"{out},{out}->{out[-1]}", windows[(Ellipsis, *tap)], grad)
        return dw

    parts = run_blocks(images, batch_halves(x_rep.shape[0], dy.nbytes))
    dw = parts[0] if len(parts) == 1 else parts[0] + parts[1]
    return dw.reshape(*w_shape[:-2], -1, w_shape[-1]).sum(axis=-2).reshape(w_shape)
