"""The WaveNet residual block (van den Oord et al., 2016), channels-last (N, T, C).

::

    h    = conv1d(x, W_conv, b_conv, dilation, padding="causal")     (N, T, 2C)
    z    = tanh(h[..., :C]) * sigmoid(h[..., C:])                    gated activation
    y    = x + z W_res + b_res                                       residual output
    skip = z W_skip + b_skip                                         (N, T, skip_channels)

Backward, with dz = dy W_res^T + dskip W_skip^T::

    dh[..., :C] = dz * sigmoid(b) * (1 - tanh(a)^2)
    dh[..., C:] = dz * tanh(a) * sigmoid(b) * (1 - sigmoid(b))
    dx = dy + conv1d_backward(dh)

The 1x1 convolutions are stored as dense weights: ``W_res`` (C, C) and ``W_skip``
(C, skip_channels) (a ``Conv1D`` kernel of size 1 without its leading axis).
"""

from __future__ import annotations

from .. import initializers, ops
from .._checks import array_module, describe, float_array, int_tuple, positive_int, upstream_grad
from .base import Layer
from .registry import register


@register
class WaveNetBlock(Layer):
    """Gated, dilated, causal residual block on (N, T, channels) -> (N, T, channels).

    ``forward(x)`` returns the residual output (so the block chains in ``Sequential``)
    and stores the skip output in ``last_skip``; ``forward_with_skip(x)`` returns
    ``(y, skip)``. ``backward(dy, dskip=None)`` takes the skip output's gradient too
    (None: the skip output did not reach the loss; the skip weights then get no
    gradient). ``skip_channels=0`` drops the skip branch (inside ``Sequential`` nothing
    reads it); None means ``channels``.
    Parameters: ``W_conv`` (kernel_size, C, 2C), ``b_conv`` (2C,), ``W_res`` (C, C),
    ``b_res`` (C,), ``W_skip`` (C, skip_channels), ``b_skip`` (skip_channels,).
    """

    def __init__(self, channels, kernel_size=2, dilation=1, skip_channels=None, *, name=None,
                 trainable=True, dtype=None, seed=None):
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        owner = type(self).__name__
        self.channels = positive_int(owner, "channels", channels)
        self.kernel_size = positive_int(owner, "kernel_size", kernel_size)
        self.dilation = positive_int(owner, "dilation", dilation)
        self.skip_channels = self.channels if skip_channels is None else int_tuple(
            owner, "skip_channels", skip_channels, 1, minimum=0)[0]
        self.last_skip = None

    def get_config(self):
        return {**super().get_config(), "channels": self.channels,
                "kernel_size": self.kernel_size, "dilation": self.dilation,
                "skip_channels": self.skip_channels}

    def _build(self, input_shape, rng):
        if len(input_shape) != 2 or input_shape[-1] != self.channels:
            raise ValueError(f"{self.label}: expects inputs (N, T, {self.channels}) (the "
                             f"residual adds the input); received per-example shape "
                             f"{tuple(input_shape)}")
        c, k = self.channels, self.kernel_size
        self.add_parameter("W_conv", (k, c, 2 * c), "torch_default", rng)
        self.add_parameter("b_conv", (2 * c,), initializers.torch_default_bias(k * c), rng)
        outputs = [("res", c)] + ([("skip", self.skip_channels)] if self.skip_channels else [])
        for role, width in outputs:
            self.add_parameter(f"W_{role}", (c, width), "torch_default", rng)
            self.add_parameter(f"b_{role}", (width,), initializers.torch_default_bias(c), rng)

    def _forward(self, x, training):
        p, c = self.parameters, self.channels
        h, conv = ops.conv1d(x, p["W_conv"], p["b_conv"], padding="causal",
                             dilation=self.dilation)
        filt, filt_cache = ops.tanh(h[..., :c])
        gate, gate_cache = ops.sigmoid(h[..., c:])
        z = filt * gate
        r, res = ops.linear(z, p["W_res"], p["b_res"])
        r += x
        skip = None
        if self.skip_channels:
            self.last_skip, skip = ops.linear(z, p["W_skip"], p["b_skip"])
        return r, (conv, filt, filt_cache, gate, gate_cache, res, skip, r.shape, r.dtype)

    def forward_with_skip(self, x, training=True, grad=None):
        """(residual output, skip output) of one forward."""
        y = self.forward(x, training=training, grad=grad)
        return y, self.last_skip

    def backward(self, dy, dskip=None, *, input_grad=True):
        """dL/dx from the residual output's gradient ``dy`` and (optionally) the skip
        output's ``dskip``; parameter gradients are added into ``gradients``."""
        return super().backward((dy, dskip), input_grad=input_grad)

    def _backward(self, grads, cache):
        dy, dskip = grads if isinstance(grads, tuple) else (grads, None)
        conv, filt, filt_cache, gate, gate_cache, res, skip, shape, dtype = cache
        dy = upstream_grad(self.label, dy, shape, dtype)
        dz, dw_res, db_res = ops.linear_backward(dy, res)
        param_grads = {"W_res": dw_res, "b_res": db_res}
        if dskip is not None:
            if not self.skip_channels:
                raise ValueError(f"{self.label}: 'dskip' was given but the block has no skip "
                                 f"output (skip_channels=0)")
            dskip = _skip_grad(self.label, dskip, (*shape[:-1], self.skip_channels), dtype)
            dz_skip, param_grads["W_skip"], param_grads["b_skip"] = ops.linear_backward(
                dskip, skip)
            dz += dz_skip
        d_filter = ops.tanh_backward(dz * gate, filt_cache)
        d_gate = ops.sigmoid_backward(dz * filt, gate_cache)
        dh = array_module(dy).concatenate([d_filter, d_gate], axis=-1)
        dx, param_grads["W_conv"], param_grads["b_conv"] = ops.conv1d_backward(dh, conv)
        dx += dy
        return dx, param_grads


def _skip_grad(owner, dskip, shape, dtype):
    """``dskip`` checked against the skip output's shape and dtype."""
    dskip = float_array(owner, "dskip", dskip)
    if dskip.dtype != dtype or tuple(dskip.shape) != tuple(shape):
        raise ValueError(f"{owner}: 'dskip' must have the skip output's shape {tuple(shape)} "
                         f"and dtype {dtype}; received {describe(dskip)}")
    return dskip
