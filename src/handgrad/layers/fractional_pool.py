"""Fractional max pooling layers (PyTorch's FractionalMaxPool2d/3d on channels-last maps):
random pooling regions drawn from the layer's seeded Generator (``Layer.draws_random``)
at every forward, training or not (as PyTorch). ONNX has no such operator."""

from __future__ import annotations

from .. import ops
from .._checks import describe
from . import declarations as twins
from .base import Layer
from .pooling import Pool
from .registry import register


class FractionalMaxPool(Pool):
    """The first maximum of k-tap windows at PyTorch's fractional starts, one sample per
    (example, channel, axis) from ``rng``. ``output_size`` (int or tuple) or
    ``output_ratio`` (in (0, 1)); ``return_indices``: ``forward`` returns ``(y, indices)``
    and a graph call two outputs (int64 flat positions in each (n, c) plane, for
    ``MaxUnpool``). ``forward(x, samples=...)`` uses given samples (N, C, rank) instead
    (torch's ``_random_samples``, to compare with torch)."""

    torch_twin = twins.TorchTwin("FractionalMaxPool2d/3d", layout=twins.MAPS)
    onnx_form = None  # ONNX has no fractional max pooling
    receptive_field = "n/a"  # the regions are random
    draws_random = True
    #: torch's FractionalMaxPool draws its regions in evaluation too (so does this layer)
    random_in_evaluation = True

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 *, name=None, **common):
        Layer.__init__(self, name=name, **common)
        ops.fractional_pool_config(self.label, self.rank, kernel_size, output_size,
                                   output_ratio)
        if not isinstance(return_indices, bool):
            raise TypeError(f"{self.label}: 'return_indices' must be a bool; received "
                            f"{describe(return_indices)}")
        self.kwargs = {"kernel_size": kernel_size, "output_size": output_size,
                       "output_ratio": output_ratio, "return_indices": return_indices}
        self._samples = None

    def output_shape(self, input_shape):
        """(*S_out, C) without drawing any sample."""
        kw = self.kwargs
        if len(input_shape) != self.rank + 1:
            raise ValueError(f"{self.label}: expects {self.rank} spatial axes and channels "
                             f"per example; received shape {tuple(input_shape)}")
        _, sizes = ops.fractional_output_sizes(self.label, input_shape[:-1], kw["kernel_size"],
                                               kw["output_size"], kw["output_ratio"])
        return (*sizes, input_shape[-1])

    def forward(self, x, training=True, grad=None, samples=None):
        """y, or ``(y, indices)`` with ``return_indices``; ``samples`` (N, C, rank) in
        [0, 1): fixed regions instead of drawn ones (torch's ``_random_samples``)."""
        self._samples = samples
        try:
            return super().forward(x, training, grad)
        finally:
            self._samples = None

    def _forward(self, x, training):
        samples = self._samples
        rng = self.rng if samples is None else None
        out = self.forward_op(x, **self.kwargs, samples=samples, rng=rng)
        if len(out) == 3:  # (y, indices, cache)
            self._indices = out[1]
        return out[0], out[-1]


@register
class FractionalMaxPool2D(FractionalMaxPool):
    """Fractional max pooling on (N, H, W, C) -> (N, H_out, W_out, C); samples [..., 0]
    place the width's windows and [..., 1] the height's (torch's order)."""

    forward_op = staticmethod(ops.fractional_max_pool2d)
    backward_op = staticmethod(ops.fractional_max_pool2d_backward)
    rank = 2


@register
class FractionalMaxPool3D(FractionalMaxPool):
    """Fractional max pooling on (N, D, H, W, C) -> (N, D_out, H_out, W_out, C); samples
    in (D, H, W) order."""

    forward_op = staticmethod(ops.fractional_max_pool3d)
    backward_op = staticmethod(ops.fractional_max_pool3d_backward)
    rank = 3
