"""Convolution and transposed-convolution layers: one rank-generic base, thin subclasses.

Weights follow docs/ARCHITECTURE.md: a convolution's ``W`` is ``(*kernel, C_in // groups,
C_out)``, a transposed convolution's ``(*kernel, C_out // groups, C_in)``; ``b``
is ``(C_out,)``. Parameters default to PyTorch's initialization. The input channels come
from the data (Keras's order): PyTorch's ``Conv2d(3, 16, 3)`` is ``Conv2D(16, 3)``, and
a build whose arguments read like PyTorch's order warns.
"""

from __future__ import annotations

import warnings

from .. import ops
from .._checks import int_tuple, positive_int
from ..ops import parse_padding
from . import declarations as twins
from . import onnx_forms
from ._padding_mode import check_padding_mode, fold_by_mode, pad_by_mode
from .registry import register
from .spelling import torch_spelling
from .weighted import WeightedLayer


class ConvND(WeightedLayer):
    """The convolution family: one rank-generic layer; subclasses set ``rank``,
    ``transposed`` and name their kernels (``forward_op``, ``backward_op``)."""

    keras_data_format = True  # channels-last maps (see Layer)

    onnx_form = onnx_forms.conv

    @property
    def receptive_field(self):
        """A window (from ``kernel_size``, ``stride``, ``dilation``); a transposed
        convolution has no single one."""
        return "n/a" if self.transposed else "window"

    rank = 2
    transposed = False
    forward_op = staticmethod(ops.conv2d)
    backward_op = staticmethod(ops.conv2d_backward)
    gradgrad_op = staticmethod(ops.conv2d_gradgrad)

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, *, output_padding=0, padding_mode="zeros", **kwargs):
        super().__init__(bias=bias, **kwargs)
        owner, n = type(self).__name__, self.rank
        self.out_channels = positive_int(owner, "out_channels", out_channels)
        self.kernel_size = int_tuple(owner, "kernel_size", kernel_size, n)
        self.stride = int_tuple(owner, "stride", stride, n)
        self.dilation = int_tuple(owner, "dilation", dilation, n)
        self.groups = positive_int(owner, "groups", groups)
        strings = ("valid", "same", "causal") if n == 1 and not self.transposed else (
            "valid", "same")
        parse_padding(owner, padding, n, self.kernel_size, self.stride, self.dilation,
                      (1,) * n, strings)  # validates the form only
        self.padding = padding
        self.output_padding = int_tuple(owner, "output_padding", output_padding, n, minimum=0)
        self.padding_mode = check_padding_mode(owner, padding_mode, self.transposed)
        if self.out_channels % self.groups:
            raise ValueError(f"{owner}: 'out_channels' ({self.out_channels}) must be divisible "
                             f"by groups ({self.groups})")

    def get_config(self):
        config = super().get_config()
        padding = self.padding
        config.update(out_channels=self.out_channels, kernel_size=list(self.kernel_size),
                      stride=list(self.stride), dilation=list(self.dilation),
                      groups=self.groups,
                      padding=padding if isinstance(padding, (str, int)) else _lists(padding))
        if self.transposed:
            config["output_padding"] = list(self.output_padding)
        else:
            config["padding_mode"] = self.padding_mode
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("padding"), list):
            config["padding"] = _tuples(config["padding"])
        return cls(**config)

    def _build(self, input_shape, rng):
        if len(input_shape) != self.rank + 1:
            layout = {1: "(L, C)", 2: "(H, W, C)", 3: "(D, H, W, C)"}[self.rank]
            raise ValueError(f"{self.label}: expects per-example inputs {layout}; received "
                             f"shape {tuple(input_shape)}")
        in_channels = input_shape[-1]
        self._check_torch_order(in_channels)
        if in_channels % self.groups:
            raise ValueError(f"{self.label}: input channels ({in_channels}) must be divisible "
                             f"by groups ({self.groups})")
        if self.transposed:
            w_shape = (*self.kernel_size, self.out_channels // self.groups, in_channels)
        else:
            w_shape = (*self.kernel_size, in_channels // self.groups, self.out_channels)
        self.build_weights(w_shape, self.out_channels, rng)

    def _check_torch_order(self, in_channels):
        """Warn when the arguments read like PyTorch's (in_channels, out_channels,
        kernel_size): the first equals the data's channels and the "kernel" is a channel
        count (8 or more on every axis)."""
        kernel, stride = self.kernel_size, self.stride
        if in_channels != self.out_channels or min(kernel) < 8:
            return
        owner = type(self).__name__
        k = kernel[0] if len(set(kernel)) == 1 else kernel
        s = stride[0] if len(set(stride)) == 1 else stride
        warnings.warn(torch_spelling(
            self.label, f"out_channels={self.out_channels}, kernel_size={k}, stride={s} on "
            f"inputs with {in_channels} channels", f"{owner[:-1]}d({in_channels}, {k}, {s}) "
            f"(in_channels, out_channels, kernel_size)", f"{owner}({k}, {s}) (out_channels, "
            f"kernel_size) if that is what you meant"), UserWarning, stacklevel=4)

    def _op_kwargs(self):
        kwargs = dict(stride=self.stride, padding=self.padding, dilation=self.dilation,
                      groups=self.groups)
        if self.transposed:
            kwargs["output_padding"] = self.output_padding
        return kwargs

    def _forward(self, x, training):
        return self._activate(*self._conv_forward(x))

    def _conv_forward(self, x):
        """(z, cache) of the convolution (before the activation)."""
        w, kwargs = self.parameters["W"], self._op_kwargs()
        if self.padding_mode == "zeros":
            return self.forward_op(x, w, self.bias_array, **kwargs)
        # pad explicitly in the mode, then convolve unpadded; the cache keeps the pads
        pads = ops.conv_geometry(x.shape[1:-1], w.shape[:self.rank], stride=self.stride,
                                 padding=self.padding, dilation=self.dilation,
                                 op=self.label).padding
        kwargs["padding"] = 0
        y, cache = self.forward_op(pad_by_mode(self.label, x, pads, self.padding_mode), w,
                                   self.bias_array, **kwargs)
        return y, (cache, pads, tuple(x.shape))

    def _backward(self, dy, cache, input_grad=True):
        dy, cache = self._deactivate(dy, cache)
        if self.padding_mode == "zeros":
            dx, dw, db = self.backward_op(dy, cache, input_grad=input_grad)
        else:
            cache, pads, x_shape = cache
            dx, dw, db = self.backward_op(dy, cache, input_grad=input_grad)
            if dx is not None:
                dx = fold_by_mode(dx, x_shape, pads, self.padding_mode)
        return dx, self.weight_grads(dw, db)

    def _double_backward(self, q, dy, cache):
        """dx is linear in dy and W: dP/d dy = the op on q (no bias), dP/dW its weight
        gradient at input q; no x or b term. With a padding mode, q is padded the same
        way first (the pad is linear)."""
        cache = self._affine_cache(cache)
        if self.padding_mode != "zeros":
            cache, pads, _ = cache
            q = pad_by_mode(self.label, q, pads, self.padding_mode)
        d_dy, dw = self.gradgrad_op(q, dy, cache)
        return d_dy, None, {"W": dw}


class Conv(ConvND):
    """The convolutions (torch's argument order); ``padding_mode`` as torch's Conv."""

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", **kwargs):
        super().__init__(out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode=padding_mode, **kwargs)


class ConvTranspose(ConvND):
    """The transposed convolutions (``output_padding`` after ``padding``)."""

    transposed = True

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 dilation=1, groups=1, bias=True, **kwargs):
        super().__init__(out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         output_padding=output_padding, **kwargs)


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


@register
class Conv1D(Conv):
    """1-D convolution on (N, L, C_in) -> (N, L_out, out_channels); W (K, C_in // groups,
    out_channels). ``padding`` may be "valid", "same", "causal", an int or pairs;
    ``padding_mode`` (torch's) "zeros", "reflect", "replicate" or "circular"."""

    torch_twin = twins.TorchTwin("Conv1d", twins.conv_params, twins.MAPS)

    forward_op = staticmethod(ops.conv1d)
    backward_op = staticmethod(ops.conv1d_backward)
    gradgrad_op = staticmethod(ops.conv1d_gradgrad)
    rank = 1


@register
class Conv2D(Conv):
    """2-D convolution on (N, H, W, C_in) -> (N, H_out, W_out, out_channels);
    W (KH, KW, C_in // groups, out_channels)."""

    torch_twin = twins.TorchTwin("Conv2d", twins.conv_params, twins.MAPS)

    forward_op = staticmethod(ops.conv2d)
    backward_op = staticmethod(ops.conv2d_backward)
    gradgrad_op = staticmethod(ops.conv2d_gradgrad)
    rank = 2


@register
class Conv3D(Conv):
    """3-D convolution on (N, D, H, W, C_in) -> (N, D_out, H_out, W_out, out_channels);
    W (KD, KH, KW, C_in // groups, out_channels)."""

    torch_twin = twins.TorchTwin("Conv3d", twins.conv_params, twins.MAPS)

    forward_op = staticmethod(ops.conv3d)
    backward_op = staticmethod(ops.conv3d_backward)
    gradgrad_op = staticmethod(ops.conv3d_gradgrad)
    rank = 3


@register
class ConvTranspose1D(ConvTranspose):
    """1-D transposed convolution (N, L, C_in) -> (N, L_out, out_channels);
    W (K, out_channels // groups, C_in)."""

    torch_twin = twins.TorchTwin("ConvTranspose1d", twins.conv_params, twins.MAPS)

    forward_op = staticmethod(ops.conv_transpose1d)
    backward_op = staticmethod(ops.conv_transpose1d_backward)
    gradgrad_op = staticmethod(ops.conv_transpose1d_gradgrad)
    rank = 1


@register
class ConvTranspose2D(ConvTranspose):
    """2-D transposed convolution (N, H, W, C_in) -> (N, H_out, W_out, out_channels);
    W (KH, KW, out_channels // groups, C_in)."""

    torch_twin = twins.TorchTwin("ConvTranspose2d", twins.conv_params, twins.MAPS)

    forward_op = staticmethod(ops.conv_transpose2d)
    backward_op = staticmethod(ops.conv_transpose2d_backward)
    gradgrad_op = staticmethod(ops.conv_transpose2d_gradgrad)
    rank = 2


@register
class ConvTranspose3D(ConvTranspose):
    """3-D transposed convolution (N, D, H, W, C_in) -> (N, D_out, H_out, W_out,
    out_channels); W (KD, KH, KW, out_channels // groups, C_in)."""

    torch_twin = twins.TorchTwin("ConvTranspose3d", twins.conv_params, twins.MAPS)

    forward_op = staticmethod(ops.conv_transpose3d)
    backward_op = staticmethod(ops.conv_transpose3d_backward)
    gradgrad_op = staticmethod(ops.conv_transpose3d_gradgrad)
    rank = 3


Deconv2D = ConvTranspose2D
