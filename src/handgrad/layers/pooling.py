"""Pooling layers (no parameters): thin wrappers of the pooling ops."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._checks import is_int
from . import declarations as twins
from . import onnx_forms
from .base import Layer
from .masking import MaskedPool, masked_forward
from .registry import register


class Pool(Layer):
    """The pooling family: ``forward_op`` applied with the layer's keyword arguments.
    ``common`` holds the arguments of every layer (``trainable``, ``dtype``, ``seed``)."""

    keras_data_format = True  # channels-last maps (see Layer)

    torch_twin = twins.TorchTwin("MaxPool1d/2d/3d, AvgPool1d/2d/3d", layout=twins.MAPS)
    onnx_form = onnx_forms.pool
    receptive_field = "pool"

    forward_op = staticmethod(ops.max_pool2d)
    backward_op = staticmethod(ops.max_pool2d_backward)
    rank = 2

    def __init__(self, name=None, common=None, **kwargs):
        super().__init__(name=name, **(common or {}))
        self.kwargs = kwargs
        self.forward_op(self._example_input(), **kwargs)  # validates the config

    def _example_input(self):
        """A small input that every valid configuration accepts."""

        def per_axis(key):
            value = self.kwargs.get(key, 1)
            value = value if isinstance(value, (tuple, list)) else (value,) * self.rank
            value = [v if is_int(v) and v > 0 else 1 for v in value][: self.rank]
            return value + [1] * (self.rank - len(value))

        sizes = [(k - 1) * d + 4 for k, d in zip(per_axis("kernel_size"), per_axis("dilation"))]
        return np.zeros((1, *sizes, 1))

    def get_config(self):
        return {**super().get_config(), **self.kwargs}

    @classmethod
    def from_config(cls, config):
        config = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
        return cls(**config)

    def forward(self, x, training=True, grad=None):
        """y, or ``(y, indices)`` for a max pooling made with ``return_indices=True``."""
        y = super().forward(x, training, grad)
        return (y, self._indices) if self.kwargs.get("return_indices") else y

    def graph_forward(self, inputs, training):
        out = super().graph_forward(inputs, training)
        return list(out) if isinstance(out, tuple) else out  # (y, indices): two outputs

    def graph_backward(self, dy, input_grad=True):
        dy = dy[0] if isinstance(dy, list) else dy  # none to the indices
        return [self.backward(dy, input_grad=input_grad)]

    def _forward(self, x, training):
        out = self.forward_op(x, **self.kwargs)
        if len(out) == 3:  # (y, indices, cache)
            self._indices = out[1]
        return out[0], out[-1]

    def _backward(self, dy, cache):
        return self.backward_op(dy, cache), {}


class MaxPoolND(Pool):
    """Max pooling, rank-generic; PyTorch semantics (ties to the first maximum).
    ``return_indices``: ``forward`` returns ``(y, indices)`` and a graph call two outputs
    (PyTorch's int64 flat input positions, for ``MaxUnpool``)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                 return_indices=False, *, name=None, **common):
        super().__init__(name, common, kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation, ceil_mode=ceil_mode, return_indices=return_indices)


@register
class MaxPool1D(MaxPoolND):
    """Max pooling on (N, L, C); PyTorch semantics (ties to the first maximum)."""

    forward_op = staticmethod(ops.max_pool1d)
    backward_op = staticmethod(ops.max_pool1d_backward)
    rank = 1


@register
class MaxPool2D(MaxPoolND):
    """Max pooling on (N, H, W, C); PyTorch semantics (ties to the first maximum)."""

    forward_op = staticmethod(ops.max_pool2d)
    backward_op = staticmethod(ops.max_pool2d_backward)
    rank = 2


@register
class MaxPool3D(MaxPoolND):
    """Max pooling on (N, D, H, W, C); PyTorch semantics (ties to the first maximum)."""

    forward_op = staticmethod(ops.max_pool3d)
    backward_op = staticmethod(ops.max_pool3d_backward)
    rank = 3


class AvgPoolND(Pool):
    """Average pooling, rank-generic. ``count_include_pad=None``: the padding counts in the
    divisor, except with ``padding="same"`` (TensorFlow's rule: the mean of the input values
    in the window); give a bool to choose."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=None, *, name=None, **common):
        super().__init__(name, common, kernel_size=kernel_size, stride=stride, padding=padding,
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad)


@register
class AvgPool1D(AvgPoolND):
    """Average pooling on (N, L, C). ``count_include_pad`` as :class:`AvgPoolND`."""

    forward_op = staticmethod(ops.avg_pool1d)
    backward_op = staticmethod(ops.avg_pool1d_backward)
    rank = 1


@register
class AvgPool2D(AvgPoolND):
    """Average pooling on (N, H, W, C). ``count_include_pad`` as :class:`AvgPoolND`."""

    forward_op = staticmethod(ops.avg_pool2d)
    backward_op = staticmethod(ops.avg_pool2d_backward)
    rank = 2


@register
class AvgPool3D(AvgPoolND):
    """Average pooling on (N, D, H, W, C). ``count_include_pad`` as :class:`AvgPoolND`."""

    forward_op = staticmethod(ops.avg_pool3d)
    backward_op = staticmethod(ops.avg_pool3d_backward)
    rank = 3


class GlobalPool(Pool):
    torch_twin = twins.TorchTwin("AdaptiveAvgPool/AdaptiveMaxPool", layout=twins.RESET)
    onnx_form = onnx_forms.global_pool
    receptive_field = "whole"

    def __init__(self, keepdims=False, *, name=None, **common):
        super().__init__(name, common, keepdims=keepdims)

    def _forward(self, x, training):
        if x.ndim != self.rank + 2:
            layout = {1: "(N, L, C)", 2: "(N, H, W, C)", 3: "(N, D, H, W, C)"}[self.rank]
            raise ValueError(f"{self.label}: 'x' must be a {self.rank + 2}-D array {layout}; "
                             f"received shape {tuple(x.shape)}")
        return super()._forward(x, training)


class MaskedGlobalPool(GlobalPool):
    """A 1-D global pooling that honors a mask (N, L) of kept steps (:mod:`.masking`)."""

    kind = "avg"

    def forward_masked(self, x, mask, training):
        return masked_forward(self, x, mask, training,
                              lambda x, mask: MaskedPool.run(x, mask, self.kind))

    def _backward(self, dy, cache):
        if isinstance(cache, MaskedPool):
            return cache.backward(self.label, dy), {}
        return super()._backward(dy, cache)


@register
class GlobalAvgPool1D(MaskedGlobalPool):
    """Mean over L: (N, L, C) -> (N, C); with a mask, over the kept steps."""

    forward_op = staticmethod(ops.global_avg_pool)
    backward_op = staticmethod(ops.global_avg_pool_backward)
    rank = 1
    kind = "avg"


@register
class GlobalAvgPool2D(GlobalPool):
    """Mean over H and W: (N, H, W, C) -> (N, C)."""

    forward_op = staticmethod(ops.global_avg_pool)
    backward_op = staticmethod(ops.global_avg_pool_backward)
    rank = 2


@register
class GlobalAvgPool3D(GlobalPool):
    """Mean over D, H and W: (N, D, H, W, C) -> (N, C)."""

    forward_op = staticmethod(ops.global_avg_pool)
    backward_op = staticmethod(ops.global_avg_pool_backward)
    rank = 3


@register
class GlobalMaxPool1D(MaskedGlobalPool):
    """Max over L: (N, L, C) -> (N, C); with a mask, over the kept steps."""

    forward_op = staticmethod(ops.global_max_pool)
    backward_op = staticmethod(ops.global_max_pool_backward)
    rank = 1
    kind = "max"


@register
class GlobalMaxPool2D(GlobalPool):
    """Max over H and W: (N, H, W, C) -> (N, C)."""

    forward_op = staticmethod(ops.global_max_pool)
    backward_op = staticmethod(ops.global_max_pool_backward)
    rank = 2


@register
class GlobalMaxPool3D(GlobalPool):
    """Max over D, H and W: (N, D, H, W, C) -> (N, C)."""

    forward_op = staticmethod(ops.global_max_pool)
    backward_op = staticmethod(ops.global_max_pool_backward)
    rank = 3
