"""Channel dropout, alpha dropout and stochastic depth layers (PyTorch's Dropout1d/2d/3d,
AlphaDropout, FeatureAlphaDropout; torchvision's StochasticDepth), channels-last: random
layers like :class:`.core.Dropout` (the same ``rng``, ``seed`` and global-batch masks in
data-parallel training), the identity in evaluation. The kernels are in
:mod:`handgrad.ops.dropout_variants`."""

from __future__ import annotations

from .. import ops
from .._checks import describe
from .core import Dropout
from .registry import register


class ChannelDropout(Dropout):
    """Zero whole channels of each example: a mask (N, 1, ..., 1, C) broadcast over the
    spatial axes; ``rank`` is the per-example rank the layer takes (None: any >= 1)."""

    keras_data_format = True  # channels-last maps (see Layer)

    forward_op = staticmethod(ops.feature_dropout)
    backward_op = staticmethod(ops.feature_dropout_backward)
    rank = None
    layout = "(N, ..., C)"

    def _forward(self, x, training):
        if self.rank is not None and x.ndim - 1 != self.rank:
            raise ValueError(f"{self.label}: expects inputs {self.layout}; received per-example "
                             f"shape {tuple(x.shape[1:])}")
        return super()._forward(x, training)


@register
class Dropout1D(ChannelDropout):
    """PyTorch's Dropout1d on (N, L, C): each channel of each example is zeroed with
    probability ``rate`` over the whole sequence, the rest scaled by 1 / (1 - rate)."""

    rank, layout = 2, "(N, L, C)"


@register
class Dropout2D(ChannelDropout):
    """PyTorch's Dropout2d on (N, H, W, C): whole feature maps zeroed per example."""

    rank, layout = 3, "(N, H, W, C)"


@register
class Dropout3D(ChannelDropout):
    """PyTorch's Dropout3d on (N, D, H, W, C): whole volumes zeroed per example."""

    rank, layout = 4, "(N, D, H, W, C)"


@register
class AlphaDropout(Dropout):
    """PyTorch's AlphaDropout (for SELU networks): dropped values take SELU's negative
    saturation, then an affine map keeps zero mean and unit variance (see
    :mod:`handgrad.ops.dropout_variants`)."""

    forward_op = staticmethod(ops.alpha_dropout)
    backward_op = staticmethod(ops.alpha_dropout_backward)


@register
class FeatureAlphaDropout(ChannelDropout):
    """PyTorch's FeatureAlphaDropout on (N, ..., C): alpha dropout of whole channels."""

    forward_op = staticmethod(ops.feature_alpha_dropout)
    backward_op = staticmethod(ops.feature_alpha_dropout_backward)


@register
class StochasticDepth(Dropout):
    """torchvision's StochasticDepth (``p``, ``mode``): in training, zero the whole input of
    each example (``mode="row"``) or of the whole batch (``"batch"``) with probability
    ``p`` and scale the rest by 1 / (1 - p); the identity in evaluation. A residual branch
    dropped this way leaves only the skip connection."""

    forward_op = staticmethod(ops.stochastic_depth)
    backward_op = staticmethod(ops.stochastic_depth_backward)

    def __init__(self, p, mode="row", *, seed=None, name=None):
        super().__init__(p, seed=seed, name=name)
        modes = ops.dropout_variants.STOCHASTIC_DEPTH_MODES
        if mode not in modes:  # checked at construction, as the op does
            raise ValueError(f"StochasticDepth: 'mode' must be one of {modes}; "
                             f"received {describe(mode)}")
        self.mode = mode
        self.op_options = {"mode": mode}

    @property
    def p(self):
        return self.rate

    def get_config(self):
        config = super().get_config()
        return {"name": config["name"], "p": config["rate"], "mode": self.mode,
                "seed": config["seed"]}
