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
