"""Second-order kernels: the backward of a backward ("double backward"), hand-derived.

A first backward ``dx = B(dy; x, theta)`` is linear in ``dy``. For a scalar ``P(dx)``
(a gradient penalty) with ``q = dP/d dx``, ``<op>_gradgrad(q, dy, cache)`` returns
the gradients of ``P`` with respect to the inputs of that backward::

    elementwise f:   dx = dy * f'(x)
                     d_dy = q * f'(x)              (the forward JVP of f along q)
                     d_x  = q * dy * f''(x)        (x's shape)
    linear:          dx = dy w^T
                     d_dy = q w                    (..., F_out); x does not enter dx
                     dw   = q^T dy                 (F_in, F_out), summed over rows
    convolution:     dx = conv_x^T(dy; w)
                     d_dy = conv(q; w), no bias    (the forward applied to q)
                     dw   = the forward's weight gradient at input q, upstream dy

The elementwise kernels live beside their activations (:mod:`.activations`,
:mod:`.smooth_activations`), which give their second derivatives; this module holds the
linear ops', each declared with ``@second_order(forward)``.

``cache`` is the one the forward returned (and the first backward consumed);
``dy`` the upstream gradient that backward was given. The parameter gradients of the
first backward are not differentiated: ``q`` is the cotangent of ``dx`` only.
"""

from __future__ import annotations

from .._checks import array_module
from ._args.gradgrad import open_conv, open_linear
from .conv import (
    _kernels,
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
)
from .declare import exports, second_order
from .linear import _rows, linear


@second_order(linear)
def linear_gradgrad(q, dy, cache):
    """Second order of :func:`linear`: q (..., F_in), dy (..., F_out) -> (d_dy, dw) with
    d_dy = q w (..., F_out) and dw = sum over rows of q^T dy (F_in, F_out)."""
    q, dy, cache = open_linear("linear_gradgrad", q, dy, cache)
    xp = array_module(q, cache.w)
    rows_q = _rows(q)
    d_dy = xp.matmul(rows_q, cache.w).reshape(dy.shape)
    return d_dy, xp.matmul(rows_q.T, _rows(dy))


def _conv_gradgrad(op, forward, q, dy, cache):
    """(conv(q; w) without bias, the weight gradient at input q and upstream dy)."""
    q, dy, call = open_conv(op, forward, q, dy, cache)
    conv, input_grad, weight_grad, _ = _kernels(call.w, call.groups)
    xp, w, axes, groups = array_module(q, call.w), call.w, call.axes, call.groups
    if call.transposed:  # the op is the adjoint of a convolution: roles of in and out swap
        d_dy = input_grad(xp, q, w, axes, groups, call.conv_input_shape)
        return d_dy, weight_grad(xp, dy, q, axes, groups, w.shape)
    return conv(xp, q, w, axes, groups), weight_grad(xp, q, dy, axes, groups, w.shape)


@second_order(conv1d)
def conv1d_gradgrad(q, dy, cache):
    """Second order of :func:`conv1d`: q (N, L, C_in), dy (N, L_out, C_out) -> (d_dy, dw),
    d_dy = conv1d(q, w) without bias, dw = conv1d_backward's dw for input q and dy."""
    return _conv_gradgrad("conv1d_gradgrad", "conv1d", q, dy, cache)


@second_order(conv2d)
def conv2d_gradgrad(q, dy, cache):
    """Second order of :func:`conv2d`: q (N, H, W, C_in), dy (N, H_out, W_out, C_out) ->
    (d_dy, dw), d_dy = conv2d(q, w) without bias, dw = conv2d_backward's dw for input q."""
    return _conv_gradgrad("conv2d_gradgrad", "conv2d", q, dy, cache)


@second_order(conv_transpose1d)
def conv_transpose1d_gradgrad(q, dy, cache):
    """Second order of :func:`conv_transpose1d`: (conv_transpose1d(q, w) without bias,
    conv_transpose1d_backward's dw for input q and upstream dy)."""
    return _conv_gradgrad("conv_transpose1d_gradgrad", "conv_transpose1d", q, dy, cache)


@second_order(conv_transpose2d)
def conv_transpose2d_gradgrad(q, dy, cache):
    """Second order of :func:`conv_transpose2d`: (conv_transpose2d(q, w) without bias,
    conv_transpose2d_backward's dw for input q and upstream dy)."""
    return _conv_gradgrad("conv_transpose2d_gradgrad", "conv_transpose2d", q, dy, cache)



@second_order(conv3d)
def conv3d_gradgrad(q, dy, cache):
    """Second order of :func:`conv3d`: q (N, D, H, W, C_in), dy (N, D_out, H_out, W_out,
    C_out) -> (d_dy, dw), d_dy = conv3d(q, w) without bias, dw = conv3d_backward's dw for
    input q."""
    return _conv_gradgrad("conv3d_gradgrad", "conv3d", q, dy, cache)


@second_order(conv_transpose3d)
def conv_transpose3d_gradgrad(q, dy, cache):
    """Second order of :func:`conv_transpose3d`: (conv_transpose3d(q, w) without bias,
    conv_transpose3d_backward's dw for input q and upstream dy)."""
    return _conv_gradgrad("conv_transpose3d_gradgrad", "conv_transpose3d", q, dy, cache)

__all__ = exports(__name__, globals())
