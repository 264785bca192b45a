"""Rearranging layers (no parameters): PixelShuffle, PixelUnshuffle, ChannelShuffle, thin
wrappers of the :mod:`handgrad.ops` permutations (torch's channel orders)."""

from __future__ import annotations

import numpy as np

from .. import ops
from . import declarations as twins
from . import onnx_rearrange
from .base import Layer
from .registry import register


class Rearrange(Layer):
    """A permutation of the input's entries, set by one int ``factor`` (a forward op
    ``forward_op(x, factor)``)."""

    receptive_field = "n/a"  # the resolution changes by a factor r
    config_key = "upscale_factor"

    def __init__(self, factor, *, name=None, **common):
        super().__init__(name=name, **common)
        self.factor = factor
        self.forward_op(self._example_input(), factor)  # validates the config

    def _example_input(self):
        return np.zeros((1, 1, 1, self.factor ** 2 if isinstance(self.factor, int) else 1))

    def get_config(self):
        return {**super().get_config(), self.config_key: self.factor}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(config.pop(cls.config_key), **config)

    def _forward(self, x, training):
        return self.forward_op(x, self.factor)

    def _backward(self, dy, cache):
        return self.backward_op(dy, cache), {}


@register
class PixelShuffle(Rearrange):
    """(N, H, W, C*r*r) -> (N, H*r, W*r, C), torch's (C, r, r) channel order."""

    torch_twin = twins.TorchTwin("PixelShuffle")
    onnx_form = onnx_rearrange.pixel_shuffle
    forward_op = staticmethod(ops.pixel_shuffle)
    backward_op = staticmethod(ops.pixel_shuffle_backward)

    def __init__(self, upscale_factor, *, name=None, **common):
        super().__init__(upscale_factor, name=name, **common)


@register
class PixelUnshuffle(Rearrange):
    """(N, H*r, W*r, C) -> (N, H, W, C*r*r), the inverse of :class:`PixelShuffle`."""

    torch_twin = twins.TorchTwin("PixelUnshuffle")
    onnx_form = onnx_rearrange.pixel_unshuffle
    forward_op = staticmethod(ops.pixel_unshuffle)
    backward_op = staticmethod(ops.pixel_unshuffle_backward)
    config_key = "downscale_factor"

    def __init__(self, downscale_factor, *, name=None, **common):
        super().__init__(downscale_factor, name=name, **common)

    def _example_input(self):
        r = self.factor if isinstance(self.factor, int) else 1
        return np.zeros((1, r, r, 1))


@register
class ChannelShuffle(Rearrange):
    """Channels of (N, *S, C), C = groups*k, seen as a (groups, k) matrix and transposed
    (torch's ``nn.ChannelShuffle``)."""

    torch_twin = twins.TorchTwin("ChannelShuffle")
    onnx_form = onnx_rearrange.channel_shuffle
    receptive_field = "pointwise"
    forward_op = staticmethod(ops.channel_shuffle)
    backward_op = staticmethod(ops.channel_shuffle_backward)
    config_key = "groups"

    def __init__(self, groups, *, name=None, **common):
        super().__init__(groups, name=name, **common)

    @property
    def groups(self):
        return self.factor

    def _example_input(self):
        return np.zeros((1, self.factor if isinstance(self.factor, int) else 1))


class Columns(Layer):
    """Unfold / Fold: a window (``kernel_size``, ``dilation``, ``padding``, ``stride``, an
    int or (h, w) each, torch's arguments) between maps and columns."""

    receptive_field = "n/a"  # a map becomes columns (or back)

    def __init__(self, name=None, common=None, **kwargs):
        super().__init__(name=name, **(common or {}))
        self.kwargs = kwargs
        self.forward_op(self._example_input(), **kwargs)  # validates the config

    def get_config(self):
        return {**super().get_config(), **self.kwargs}

    @classmethod
    def from_config(cls, config):
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()})

    def geometry(self, spatial):
        kw = self.kwargs
        return ops.conv_geometry(spatial, kw["kernel_size"], stride=kw["stride"],
                                 padding=kw["padding"], dilation=kw["dilation"], op=self.label)

    def _forward(self, x, training):
        return self.forward_op(x, **self.kwargs)

    def _backward(self, dy, cache):
        return self.backward_op(dy, cache), {}


def _example_map(kwargs):
    """The smallest map on which every valid window has an output position."""
    kernel = np.broadcast_to(kwargs["kernel_size"], 2) if isinstance(
        kwargs["kernel_size"], int) else kwargs["kernel_size"]
    dilation = np.broadcast_to(kwargs["dilation"], 2) if isinstance(
        kwargs["dilation"], int) else kwargs["dilation"]
    try:
        return tuple(max((int(k) - 1) * int(d) + 1, 1) for k, d in zip(kernel, dilation))
    except (TypeError, ValueError):  # a bad value: the op names it
        return (1, 1)


@register
class Unfold(Columns):
    """im2col, as ``nn.Unfold``: (N, H, W, C) -> (N, L, C*kh*kw), columns ordered
    (C, kh, kw) (:func:`handgrad.ops.unfold`)."""

    torch_twin = twins.TorchTwin("Unfold", layout=twins.RESET)
    onnx_form = onnx_rearrange.unfold
    forward_op = staticmethod(ops.unfold)
    backward_op = staticmethod(ops.unfold_backward)

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1, *, name=None, **common):
        super().__init__(name, common, kernel_size=kernel_size, dilation=dilation,
                         padding=padding, stride=stride)

    def _example_input(self):
        return np.zeros((1, *_example_map(self.kwargs), 1))


@register
class Fold(Columns):
    """col2im, as ``nn.Fold``: (N, L, C*kh*kw) -> (N, H, W, C), (H, W) = ``output_size``,
    overlapping columns summed (:func:`handgrad.ops.fold`)."""

    torch_twin = twins.TorchTwin("Fold", layout=twins.MAPS)
    onnx_form = onnx_rearrange.fold
    forward_op = staticmethod(ops.fold)
    backward_op = staticmethod(ops.fold_backward)

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1, *,
                 name=None, **common):
        super().__init__(name, common, output_size=output_size, kernel_size=kernel_size,
                         dilation=dilation, padding=padding, stride=stride)

    def _example_input(self):
        try:
            axes = self.geometry(self.kwargs["output_size"]).axes
        except (TypeError, ValueError):  # a bad value: the op names it
            return np.zeros((1, 1, 1))
        positions = int(np.prod([a.size_out for a in axes]))
        return np.zeros((1, positions, int(np.prod([a.kernel for a in axes]))))
