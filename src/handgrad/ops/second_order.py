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

The second derivatives (PyTorch's semantics at kinks and thresholds)::

    relu, leaky_relu, hard_sigmoid, identity   f'' = 0
    elu, selu      f'' = scale alpha e^x for x < 0 (0 for x >= 0, as PyTorch)
    gelu           f'' = phi(x) (2 - x^2)
    gelu tanh      f'' = (1 - t^2) (u' (1 - x t u') + 3 c k x^2), u' = c (1 + 3 k x^2)
    tanh           f'' = -2 y (1 - y^2)
    sigmoid        f'' = y (1 - y) (1 - 2 y)
    softplus       f'' = beta s (1 - s), s = sigmoid(beta x), where beta x < threshold, else 0

``cache`` is the one the forward returned (and the first backward consumed);
``dy`` the upstream gradient that backward was given. The parameter gradients of the
first backward are not differentiated: ``q`` is the cotangent of ``dx`` only.
"""

from __future__ import annotations

from .._checks import array_module
from . import special
from ._args.gradgrad import open_conv, open_elementwise, open_linear
from .activations import _GELU_C, _GELU_CLIP, _GELU_K, _INV_SQRT_2PI, _gelu_tanh_parts
from .conv import _kernels
from .linear import _rows


def _result(d_dy, q, dy, second=None):
    """(d_dy, q dy f''), with f'' = None meaning zero."""
    return d_dy, (array_module(q).zeros_like(q) if second is None else q * dy * second)


def identity_gradgrad(q, dy, cache):
    """Second order of :func:`identity`: (d_dy, d_x) = (q, 0)."""
    q, dy, _ = open_elementwise("identity_gradgrad", "identity", q, dy, cache)
    return _result(q, q, dy)


def relu_gradgrad(q, dy, cache):
    """Second order of :func:`relu`: (q [y > 0], 0)."""
    q, dy, cache = open_elementwise("relu_gradgrad", "relu", q, dy, cache)
    return _result(array_module(q).where(cache.saved <= 0, 0.0, q), q, dy)


def leaky_relu_gradgrad(q, dy, cache):
    """Second order of :func:`leaky_relu`: (q where x > 0 else slope q, 0)."""
    q, dy, cache = open_elementwise("leaky_relu_gradgrad", "leaky_relu", q, dy, cache)
    (slope,) = cache.params
    return _result(array_module(q).where(cache.saved > 0, q, q * slope), q, dy)


def _elu_gradgrad(op, forward, q, dy, cache):
    q, dy, cache = open_elementwise(op, forward, q, dy, cache)
    xp, x, (alpha, scale) = array_module(q), cache.saved, cache.params
    negative = (scale * alpha) * xp.exp(xp.minimum(x, 0.0))
    return _result(q * xp.where(x > 0, scale, negative), q, dy, xp.where(x < 0, negative, 0.0))


def elu_gradgrad(q, dy, cache):
    """Second order of :func:`elu`: f' = 1 (x > 0) or alpha e^x; f'' = alpha e^x for
    x < 0, else 0."""
    return _elu_gradgrad("elu_gradgrad", "elu", q, dy, cache)


def selu_gradgrad(q, dy, cache):
    """Second order of :func:`selu`: :func:`elu_gradgrad` times SELU's scale."""
    return _elu_gradgrad("selu_gradgrad", "selu", q, dy, cache)


def gelu_gradgrad(q, dy, cache):
    """Second order of :func:`gelu`: f'' = phi(x) (2 - x^2), or for the tanh form
    f'' = (1 - t^2) (u' (1 - x t u') + 3 c k x^2)."""
    q, dy, cache = open_elementwise("gelu_gradgrad", "gelu", q, dy, cache)
    xp, (approximate,) = array_module(q), cache.params
    x = xp.clip(cache.saved, -_GELU_CLIP, _GELU_CLIP)
    if approximate == "none":
        pdf = _INV_SQRT_2PI * xp.exp(-0.5 * x * x)
        return _result(q * (special.normal_cdf(xp, x) + x * pdf), q, dy, pdf * (2.0 - x * x))
    t, du = _gelu_tanh_parts(xp, x)
    sech2 = 1.0 - t * t
    first = 0.5 * (1.0 + t) + (0.5 * x) * sech2 * du
    second = sech2 * (du * (1.0 - x * t * du) + (3.0 * _GELU_C * _GELU_K) * x * x)
    return _result(q * first, q, dy, second)


def tanh_gradgrad(q, dy, cache):
    """Second order of :func:`tanh`: f' = 1 - y^2, f'' = -2 y (1 - y^2)."""
    q, dy, cache = open_elementwise("tanh_gradgrad", "tanh", q, dy, cache)
    y = cache.saved
    first = 1.0 - y * y
    return _result(q * first, q, dy, -2.0 * y * first)


def sigmoid_gradgrad(q, dy, cache):
    """Second order of :func:`sigmoid`: f' = y (1 - y), f'' = y (1 - y) (1 - 2 y)."""
    q, dy, cache = open_elementwise("sigmoid_gradgrad", "sigmoid", q, dy, cache)
    y = cache.saved
    first = y * (1.0 - y)
    return _result(q * first, q, dy, first * (1.0 - 2.0 * y))


def softplus_gradgrad(q, dy, cache):
    """Second order of :func:`softplus`: f' = s = sigmoid(beta x) (1 above the
    threshold), f'' = beta s (1 - s) where beta x < threshold, else 0."""
    q, dy, cache = open_elementwise("softplus_gradgrad", "softplus", q, dy, cache)
    xp, (beta, threshold) = array_module(q), cache.params
    bx = cache.saved * beta
    s = special.sigmoid(xp, bx)
    second = xp.where(bx < threshold, (beta * s) * (1.0 - s), 0.0)
    return _result(q * xp.where(bx > threshold, 1.0, s), q, dy, second)


def hard_sigmoid_gradgrad(q, dy, cache):
    """Second order of :func:`hard_sigmoid`: (q / 6 inside (-3, 3), else 0; 0)."""
    q, dy, cache = open_elementwise("hard_sigmoid_gradgrad", "hard_sigmoid", q, dy, cache)
    x = cache.saved
    inside = (x > -3.0) & (x < 3.0)
    return _result(array_module(q).where(inside, q * (1.0 / 6.0), 0.0), q, dy)


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


def conv1d_gradgrad(q, dy, cache):
    """Second order of :func:`conv1d`: q (N, L, C_in), dy (N, L_out, C_out) -> (d_dy, dw),
    d_dy = conv1d(q, w) without bias, dw = conv1d_backward's dw for input q and dy."""
    return _conv_gradgrad("conv1d_gradgrad", "conv1d", q, dy, cache)


def conv2d_gradgrad(q, dy, cache):
    """Second order of :func:`conv2d`: q (N, H, W, C_in), dy (N, H_out, W_out, C_out) ->
    (d_dy, dw), d_dy = conv2d(q, w) without bias, dw = conv2d_backward's dw for input q."""
    return _conv_gradgrad("conv2d_gradgrad", "conv2d", q, dy, cache)


def conv_transpose1d_gradgrad(q, dy, cache):
    """Second order of :func:`conv_transpose1d`: (conv_transpose1d(q, w) without bias,
    conv_transpose1d_backward's dw for input q and upstream dy)."""
    return _conv_gradgrad("conv_transpose1d_gradgrad", "conv_transpose1d", q, dy, cache)


def conv_transpose2d_gradgrad(q, dy, cache):
    """Second order of :func:`conv_transpose2d`: (conv_transpose2d(q, w) without bias,
    conv_transpose2d_backward's dw for input q and upstream dy)."""
    return _conv_gradgrad("conv_transpose2d_gradgrad", "conv_transpose2d", q, dy, cache)

