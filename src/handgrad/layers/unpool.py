"""Max unpooling layers: a max pooling's values put back at its indices (PyTorch's
MaxUnpool1d/2d/3d on channels-last maps). They take two inputs, ``[x, indices]``, so they
live in a graph ``Model`` after a ``MaxPool`` made with ``return_indices=True``."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._checks import describe, float_array
from . import declarations as twins
from .base import Layer
from .caching import keeps_cache
from .registry import register


class MaxUnpool(Layer):
    """y (N, *S_out, C): x (N, *S, C) at ``indices`` (int, x's shape; flat positions in
    each (n, c) output plane), zeros elsewhere. S_out = (S - 1) * stride - 2 * padding +
    kernel_size, or ``output_size`` (within one stride of it)."""

    torch_twin = twins.TorchTwin("MaxUnpool1d/2d/3d", layout=twins.MAPS)
    onnx_form = None  # ONNX's MaxUnpool indexes the whole tensor, not each (n, c) plane
    receptive_field = "n/a"
    forward_op = staticmethod(ops.max_unpool2d)
    backward_op = staticmethod(ops.max_unpool2d_backward)
    rank = 2

    def __init__(self, kernel_size, stride=None, padding=0, output_size=None, *, name=None):
        super().__init__(name=name)
        self.kwargs = {"kernel_size": kernel_size, "stride": stride, "padding": padding,
                       "output_size": output_size}
        ops.unpool_output_shape(self.label, (2,) * self.rank, kernel_size, stride, padding,
                            None)  # validates the geometry; output_size: at the first call

    def get_config(self):
        return {"name": self.name, **self.kwargs}

    @classmethod
    def from_config(cls, config):
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()})

    def _pair(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise TypeError(f"{self.label}: takes the list [x, indices] (a MaxPool's outputs "
                            f"with return_indices=True); received {describe(inputs)}")
        return inputs

    def build(self, input_shape, rng=None, dtype=None):
        """``input_shape``: the per-example shapes of [x, indices]."""
        if not all(isinstance(s, (tuple, list)) for s in self._pair(input_shape)):
            raise self._not_sequential()
        x_shape, i_shape = (tuple(int(d) for d in s) for s in input_shape)
        if x_shape != i_shape:
            raise ValueError(f"{self.label}: 'indices' must have x's shape {x_shape}; "
                             f"received {i_shape}")
        self.output_shape([x_shape, i_shape])
        self.input_shape, self.built = [x_shape, i_shape], True
        return self

    def output_shape(self, input_shape):
        x_shape = tuple(self._pair(input_shape)[0])
        if len(x_shape) != self.rank + 1:
            raise ValueError(f"{self.label}: x must have {self.rank} spatial axes and "
                             f"channels per example; received shape {x_shape}")
        kw = self.kwargs
        sizes = ops.unpool_output_shape(self.label, x_shape[:-1], kw["kernel_size"], kw["stride"],
                                    kw["padding"], kw["output_size"])
        return (*sizes, x_shape[-1])

    def forward(self, inputs, training=True, grad=None):
        """y from ``inputs = [x, indices]``; ``grad`` (default: ``training``) keeps the
        cache for :meth:`backward`."""
        grad = keeps_cache(self.label, training, grad)
        x, indices = self._pair(inputs)
        x = float_array(self.label, "x", x)
        self.ensure_built([x.shape[1:], np.shape(indices)[1:]])
        y, cache = self.forward_op(x, indices, **self.kwargs)
        if grad:
            self._caches.append(cache)
        return y

    def _backward(self, dy, cache):
        return [self.backward_op(dy, cache), None], {}

    def _not_sequential(self):
        return TypeError(f"{self.label}: takes the list [x, indices], so it cannot be a step "
                         f"of Sequential; call it in a graph Model")

    def _forward(self, x, training):
        raise self._not_sequential()

    def graph_build(self, input_shapes, rng, dtype):
        self.build(input_shapes, rng=rng, dtype=dtype)

    def graph_forward(self, inputs, training):
        return self.forward(list(inputs), training=training)

    def graph_backward(self, dy, input_grad=True):
        return self.backward(dy)


@register
class MaxUnpool1D(MaxUnpool):
    """Max unpooling on (N, L, C) with indices from ``MaxPool1D(return_indices=True)``."""

    forward_op = staticmethod(ops.max_unpool1d)
    backward_op = staticmethod(ops.max_unpool1d_backward)
    rank = 1


@register
class MaxUnpool2D(MaxUnpool):
    """Max unpooling on (N, H, W, C) with indices from ``MaxPool2D(return_indices=True)``."""

    forward_op = staticmethod(ops.max_unpool2d)
    backward_op = staticmethod(ops.max_unpool2d_backward)
    rank = 2


@register
class MaxUnpool3D(MaxUnpool):
    """Max unpooling on (N, D, H, W, C) with indices from
    ``MaxPool3D(return_indices=True)``."""

    forward_op = staticmethod(ops.max_unpool3d)
    backward_op = staticmethod(ops.max_unpool3d_backward)
    rank = 3
