"""Pooling layers (no parameters): thin wrappers of the pooling ops."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._checks import is_int
from .base import Layer


class _Pool(Layer):
    """``op_name`` applied with the layer's keyword arguments."""

    op_name = ""
    rank = 2

    def __init__(self, name=None, **kwargs):
        super().__init__(name=name)
        self.kwargs = kwargs
        getattr(ops, self.op_name)(self._example_input(), **kwargs)  # validates the config

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
        return {"name": self.name, **self.kwargs}

    @classmethod
    def from_config(cls, config):
        config = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
        return cls(**config)

    def _forward(self, x, training):
        return getattr(ops, self.op_name)(x, **self.kwargs)

    def _backward(self, dy, cache):
        return getattr(ops, self.op_name + "_backward")(dy, cache), {}


class MaxPool1D(_Pool):
    """Max pooling on (N, L, C); PyTorch semantics (ties to the first maximum)."""

    op_name, rank = "max_pool1d", 1

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *,
                 name=None):
        super().__init__(name, kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation, ceil_mode=ceil_mode)


class MaxPool2D(_Pool):
    """Max pooling on (N, H, W, C); PyTorch semantics (ties to the first maximum)."""

    op_name, rank = "max_pool2d", 2

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *,
                 name=None):
        super().__init__(name, kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation, ceil_mode=ceil_mode)


class AvgPool1D(_Pool):
    """Average pooling on (N, L, C)."""

    op_name, rank = "avg_pool1d", 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, *, name=None):
        super().__init__(name, kernel_size=kernel_size, stride=stride, padding=padding,
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad)


class AvgPool2D(_Pool):
    """Average pooling on (N, H, W, C)."""

    op_name, rank = "avg_pool2d", 2

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, *, name=None):
        super().__init__(name, kernel_size=kernel_size, stride=stride, padding=padding,
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad)


class _GlobalPool(_Pool):
    def __init__(self, keepdims=False, *, name=None):
        super().__init__(name, keepdims=keepdims)

    def _forward(self, x, training):
        if x.ndim != self.rank + 2:
            layout = "(N, L, C)" if self.rank == 1 else "(N, H, W, C)"
            raise ValueError(f"{self.label}: 'x' must be a {self.rank + 2}-D array {layout}; "
                             f"received shape {tuple(x.shape)}")
        return super()._forward(x, training)


class GlobalAvgPool1D(_GlobalPool):
    """Mean over L: (N, L, C) -> (N, C)."""

    op_name, rank = "global_avg_pool", 1


class GlobalAvgPool2D(_GlobalPool):
    """Mean over H and W: (N, H, W, C) -> (N, C)."""

    op_name, rank = "global_avg_pool", 2


class GlobalMaxPool1D(_GlobalPool):
    """Max over L: (N, L, C) -> (N, C)."""

    op_name, rank = "global_max_pool", 1


class GlobalMaxPool2D(_GlobalPool):
    """Max over H and W: (N, H, W, C) -> (N, C)."""

    op_name, rank = "global_max_pool", 2
