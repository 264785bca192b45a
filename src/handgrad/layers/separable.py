"""Keras's depthwise and separable convolutions, built on the grouped convolution kernels.

``DepthwiseConv1D/2D(kernel_size, stride=1, padding=0, depth_multiplier=1, ...)`` is the
convolution with ``groups = C`` (the input's channels) and ``C * depth_multiplier``
outputs: output channel ``c * m + j`` reads only input channel ``c``. Its ``W`` is
``(*K, 1, C * m)`` (Keras's ``depthwise_kernel`` ``(*K, C, m)`` in the same memory
order); forward and backward are the convolution's (the depthwise kernels of
``ops.conv*`` with ``groups = C``).

``SeparableConv1D/2D(out_channels, kernel_size, ..., depth_multiplier=1, activation=None,
bias=True)`` is a container of two children, run one after the other::

    h = depthwise(x)        DepthwiseConv, no bias
    y = f(pointwise(h))     1x1 convolution with the bias and the fused activation
    dh = pointwise.backward(dy);  dx = depthwise.backward(dh)

Its weights by Keras's names: ``depthwise_kernel`` is ``"depthwise.W"``,
``pointwise_kernel`` is ``"pointwise.W"`` ``(1, C * m, filters)``, ``bias`` is
``"pointwise.b"``. Keras's names ``filters``, ``strides``, ``use_bias`` are accepted
(:mod:`.keras_args`); the bias starts at zero as Keras's, the kernels at torch's default.
"""

from __future__ import annotations

from .._checks import positive_int
from .base import Layer
from .conv import Conv, Conv1D, Conv2D, ConvND
from .keras_args import accepted_names
from .registry import register

#: the arguments of Conv that a depthwise convolution sets itself
_SET_HERE = ("out_channels", "groups", "kernel_size", "stride", "padding", "dilation", "bias",
             "padding_mode")
_CONV_NAMES = ("kernel_size", "stride", "padding", "dilation")


def _kernels(conv):
    """The convolution class ``conv``'s kernels and rank (its staticmethods as declared)."""
    return (*(vars(conv)[key] for key in ("forward_op", "backward_op", "gradgrad_op")),
            conv.rank)


class DepthwiseConv(Conv):
    """A convolution with one group per input channel and ``depth_multiplier`` outputs per
    group (see the module docstring); ``groups`` and ``out_channels`` follow the data."""

    def __init__(self, kernel_size, stride=1, padding=0, depth_multiplier=1, *, dilation=1,
                 bias=True, padding_mode="zeros", bias_initializer="zeros", **kwargs):
        multiplier = positive_int(type(self).__name__, "depth_multiplier", depth_multiplier)
        super().__init__(multiplier, kernel_size, stride, padding, dilation, 1, bias,
                         padding_mode, bias_initializer=bias_initializer, **kwargs)
        self.depth_multiplier = multiplier

    @classmethod
    def accepted_keywords(cls):
        """Conv's keywords less ``out_channels`` and ``groups``, plus ``depth_multiplier``."""
        inherited = [n for n in accepted_names(Conv) if n not in (*_SET_HERE, "output_padding")]
        return (*_SET_HERE[2:], "depth_multiplier", *inherited)

    def get_config(self):
        config = super().get_config()
        del config["out_channels"], config["groups"]
        return {**config, "depth_multiplier": self.depth_multiplier}

    def _build(self, input_shape, rng):
        channels = input_shape[-1] if len(input_shape) == self.rank + 1 else 1
        self.groups, self.out_channels = channels, channels * self.depth_multiplier
        super()._build(input_shape, rng)

    def _check_torch_order(self, in_channels):
        """Nothing to warn about: the output channels follow the input's."""


@register
class DepthwiseConv1D(DepthwiseConv):
    """Keras's DepthwiseConv1D: (N, L, C) -> (N, L_out, C * depth_multiplier);
    W (K, 1, C * depth_multiplier)."""

    forward_op, backward_op, gradgrad_op, rank = _kernels(Conv1D)


@register
class DepthwiseConv2D(DepthwiseConv):
    """Keras's DepthwiseConv2D: (N, H, W, C) -> (N, H_out, W_out, C * depth_multiplier);
    W (KH, KW, 1, C * depth_multiplier)."""

    forward_op, backward_op, gradgrad_op, rank = _kernels(Conv2D)


class SeparableConv(Layer):
    """Depthwise then pointwise convolution (a chain of the children ``depthwise`` and
    ``pointwise``; see the module docstring)."""

    chain = True  # summaries and the ONNX export follow the two children
    keras_data_format = True
    receptive_field = "window"
    depthwise_class = DepthwiseConv2D
    pointwise_class = None  # Conv1D or Conv2D, set by the subclasses

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, *, dilation=1,
                 depth_multiplier=1, activation=None, bias=True,
                 depthwise_initializer="torch_default", pointwise_initializer="torch_default",
                 bias_initializer="zeros", name=None, trainable=True, dtype=None, seed=None):
        self.out_channels = positive_int(type(self).__name__, "out_channels", out_channels)
        self.depthwise = self.depthwise_class(
            kernel_size, stride, padding, depth_multiplier, dilation=dilation, bias=False,
            kernel_initializer=depthwise_initializer, dtype=dtype)
        self.pointwise = self.pointwise_class(
            out_channels, 1, bias=bias, activation=activation,
            kernel_initializer=pointwise_initializer, bias_initializer=bias_initializer,
            dtype=dtype)
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)

    def children(self):
        yield "depthwise", self.depthwise
        yield "pointwise", self.pointwise

    @property
    def activation(self):
        return self.pointwise.activation

    @property
    def type_label(self):
        name = type(self).__name__
        return name if self.activation is None else f"{name}, {self.activation}"

    def get_config(self):
        depthwise, pointwise = self.depthwise.get_config(), self.pointwise.get_config()
        config = {**super().get_config(), "out_channels": self.out_channels,
                  **{key: depthwise[key] for key in _CONV_NAMES},
                  "depth_multiplier": self.depthwise.depth_multiplier,
                  "activation": self.activation, "bias": pointwise["bias"],
                  "depthwise_initializer": depthwise["kernel_initializer"],
                  "pointwise_initializer": pointwise["kernel_initializer"],
                  "bias_initializer": pointwise["bias_initializer"]}
        return config

    from_config = ConvND.__dict__["from_config"]  # pairs of padding back to tuples

    def _build(self, input_shape, rng):
        self.depthwise.build(input_shape, rng=rng, dtype=self.dtype)
        self.pointwise.build(self.depthwise.output_shape(input_shape), rng=rng,
                             dtype=self.dtype)

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        return self.pointwise.output_shape(self.depthwise.output_shape(input_shape))

    def _forward(self, x, training):
        h = self.depthwise.forward(x, training=training)
        return self.pointwise.forward(h, training=training), None

    def _backward(self, dy, cache):
        return self.depthwise.backward(self.pointwise.backward(dy)), {}


@register
class SeparableConv1D(SeparableConv):
    """Keras's SeparableConv1D: (N, L, C) -> (N, L_out, out_channels)."""

    depthwise_class = DepthwiseConv1D
    pointwise_class = Conv1D


@register
class SeparableConv2D(SeparableConv):
    """Keras's SeparableConv2D: (N, H, W, C) -> (N, H_out, W_out, out_channels)."""

    depthwise_class = DepthwiseConv2D
    pointwise_class = Conv2D
