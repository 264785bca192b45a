"""Normalization layers: batch, layer, group and instance norm (channels-last).

Parameters are ``"gamma"`` (initialized to ones) and ``"beta"`` (zeros), as in
PyTorch. Running statistics are buffers (``layer.buffers["running_mean"]`` and
``["running_var"]``, zeros and ones), updated in place by every training forward of a
trainable layer; ``training=False`` normalizes with them. A frozen layer
(``trainable=False``, also set through a container that holds it) runs in inference
mode, as in Keras: it normalizes with its running statistics and leaves them alone
(a frozen backbone keeps what it learned); backward still returns dx. Every layer
keeps its input's shape.

``momentum`` is PyTorch's: ``running = (1 - momentum) * running + momentum * batch``
(Keras's ``momentum=0.99`` is ``momentum=0.01`` here; a value above 0.5 warns).
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import ops
from .._checks import describe, is_int, positive_int
from .._hyper import flag, number
from ..ops import check_normalized_shape
from . import declarations as twins
from . import onnx_forms
from .base import Layer
from .registry import register
from .spelling import refuse_count


class NormalizationBase(Layer):
    """Shared config (eps, affine flags), parameters, input checks and backward.

    Subclasses set ``backward_op`` and implement ``_normalize(x, training)``.
    """

    receptive_field = "pointwise"

    layout = "(N, ..., C)"

    def __init__(self, eps, use_gamma, use_beta, *, name=None, trainable=True, dtype=None,
                 seed=None):
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        self.eps = number(type(self).__name__, "eps", eps, low=0.0, low_open=True)
        self.use_gamma, self.use_beta = use_gamma, use_beta

    def get_config(self):
        return {**super().get_config(), "eps": self.eps}

    @property
    def min_rank(self):
        """The smallest per-example rank (without the batch axis)."""
        return 1

    def param_shape(self, input_shape):
        """The shape of gamma and beta (the channels), for a per-example input shape."""
        return (input_shape[-1],)

    def _check_rank(self, input_shape):
        if len(input_shape) < self.min_rank:
            raise ValueError(f"{self.label}: expects inputs {self.layout}; received per-example "
                             f"shape {tuple(input_shape)}")

    def _build(self, input_shape, rng):
        self._check_rank(input_shape)
        shape = self.param_shape(input_shape)
        if self.use_gamma:
            self.add_parameter("gamma", shape, "ones", rng)
        if self.use_beta:
            self.add_parameter("beta", shape, "zeros", rng)

    def _add_running_stats(self, channels):
        self.buffers["running_mean"] = np.zeros((channels,), dtype=self.dtype)
        self.buffers["running_var"] = np.ones((channels,), dtype=self.dtype)

    def _check_input(self, input_shape):
        """A new per-example shape must have the features the layer was built for."""
        self._check_rank(input_shape)
        expected = self.param_shape(self.input_shape)
        if tuple(self.param_shape(input_shape)) != tuple(expected):
            raise ValueError(f"{self.label}: was built for inputs whose trailing axes are "
                             f"{tuple(expected)} (per-example shape {self.input_shape}); "
                             f"received per-example shape {tuple(input_shape)}")

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        self._check_input(tuple(input_shape))
        return tuple(input_shape)

    def _forward(self, x, training):
        self._check_input(x.shape[1:])
        if self.buffers:
            self.check_dtype(x, "running statistics")
        return self._normalize(x, training)

    def _affine(self):
        return self.parameters.get("gamma"), self.parameters.get("beta")

    def _backward(self, dy, cache):
        dx, dgamma, dbeta = type(self).backward_op(dy, cache)
        grads = {key: grad for key, grad in (("gamma", dgamma), ("beta", dbeta))
                 if grad is not None}
        return dx, grads


class RunningNormalization(NormalizationBase):
    """Batch and instance norm: per-channel affine and optional running statistics."""

    #: whether a torch momentum above 0.5 warns (Keras's BatchNormalization: it is Keras's)
    torch_momentum_warning = True
    #: whether ``momentum=None`` (a cumulative average, torch's BatchNorm) is accepted
    cumulative_average = False

    def __init__(self, momentum, eps, affine, track_running_stats, **kwargs):
        owner = type(self).__name__
        torch_name = f"{owner}{'2d' if owner == 'BatchNorm' else '1d'}"
        refuse_count(owner, "momentum", momentum, "first", f"{torch_name}({momentum})",
                     f"{owner}()")
        affine = flag(owner, "affine", affine)
        super().__init__(eps, affine, affine, **kwargs)
        self.momentum = None if momentum is None and self.cumulative_average else \
            number(owner, "momentum", momentum, low=0.0, high=1.0)
        self.affine = affine
        self.track_running_stats = flag(owner, "track_running_stats", track_running_stats)
        if self.track_running_stats and self.momentum is not None and self.momentum > 0.5 \
                and self.torch_momentum_warning:
            warnings.warn(
                f"{owner}: momentum={self.momentum:g} is PyTorch's momentum, the weight of the "
                f"new batch: running = (1 - momentum) * running + momentum * batch, so the "
                f"running statistics follow the last batches; Keras's momentum is the weight "
                f"of the old value: for Keras's momentum={self.momentum:g} write "
                f"momentum={1 - self.momentum:.3g}", UserWarning, stacklevel=3)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "affine": self.affine,
                "track_running_stats": self.track_running_stats}

    def _build(self, input_shape, rng):
        super()._build(input_shape, rng)
        if self.track_running_stats:
            self._add_running_stats(input_shape[-1])
            if self.momentum is None:  # torch's counter: the cumulative average's weights
                self.buffers["num_batches_tracked"] = np.zeros((), np.int64)

    def _update_weight(self, updates):
        """The weight of this batch in the running statistics: ``momentum``, or with
        ``momentum=None`` 1 / n for the n-th batch that ``updates`` them (the counter moves
        then), as torch's cumulative moving average."""
        counter = self.buffers.get("num_batches_tracked")
        if counter is None:  # momentum=None without running statistics: nothing to weigh
            return 0.0 if self.momentum is None else self.momentum
        if updates:
            counter += 1
        return 1.0 / max(int(counter), 1)

    def _statistics_args(self, training):
        """(gamma, beta, running_mean, running_var, use the statistics of x): a frozen
        layer uses its running statistics, in training too (Keras's rule)."""
        mean, var = self.buffers.get("running_mean"), self.buffers.get("running_var")
        return (*self._affine(), mean, var, (training and self.trainable) or mean is None)


@register
class BatchNorm(RunningNormalization):
    """Batch normalization over the channels (last axis) of (N, C), (N, L, C), (N, H, W, C)
    or any (N, ..., C): PyTorch's BatchNorm1d/2d/3d with the channel axis last.

    Training: statistics of the batch (over every axis but the last); the running statistics
    are updated (unbiased variance). Evaluation, and training while frozen
    (``trainable=False``, as in Keras): the running statistics, left unchanged. With
    ``track_running_stats=False`` the batch statistics are used in every mode.
    ``momentum`` is PyTorch's (see the module docstring); ``momentum=None`` is torch's
    cumulative average: the n-th training batch has weight 1 / n, counted by the buffer
    ``num_batches_tracked`` (torch's, imported and exported). ``BatchNorm(16)``, PyTorch's
    ``num_features``, is refused: the channels come from the data.

    In data-parallel training :mod:`handgrad.distributed` registers a ``communicator``
    (``needs_communicator``, see :mod:`.hooks`; an object whose ``allreduce(array)`` sums
    over the processes): training forwards then use the statistics of the global batch,
    and backward the matching means (``ops.batch_norm``'s ``allreduce``).
    """

    torch_twin = twins.TorchTwin("BatchNorm1d/2d", twins.norm_params)
    onnx_form = onnx_forms.batch_norm

    backward_op = staticmethod(ops.batch_norm_backward)
    needs_communicator = True
    cumulative_average = True

    def __init__(self, momentum=0.1, eps=1e-5, affine=True, track_running_stats=True, **kwargs):
        super().__init__(momentum, eps, affine, track_running_stats, **kwargs)

    def _normalize(self, x, training):
        gamma, beta, mean, var, batch_stats = self._statistics_args(training)
        shared = None if self.communicator is None or not (training and batch_stats) else \
            self.communicator.allreduce
        momentum = self._update_weight(batch_stats and mean is not None)
        return ops.batch_norm(x, gamma, beta, mean, var, training=batch_stats,
                              momentum=momentum, eps=self.eps, allreduce=shared)


@register
class InstanceNorm(RunningNormalization):
    """Instance normalization of (N, L, C) or (N, H, W, C): statistics per example and channel
    over the spatial axes; PyTorch's InstanceNorm1d/2d with the channel axis last (the same
    defaults: no affine parameters, no running statistics).

    With ``track_running_stats=True`` training updates running statistics (averaged over the
    examples) and evaluation, and training while frozen, normalizes with them.
    """

    torch_twin = twins.TorchTwin("InstanceNorm1d/2d", twins.norm_params)
    onnx_form = onnx_forms.instance_norm

    backward_op = staticmethod(ops.instance_norm_backward)
    layout = "(N, L, C) or (N, H, W, C)"

    def __init__(self, momentum=0.1, eps=1e-5, affine=False, track_running_stats=False,
                 **kwargs):
        super().__init__(momentum, eps, affine, track_running_stats, **kwargs)

    @property
    def min_rank(self):
        return 2

    def _normalize(self, x, training):
        gamma, beta, mean, var, input_stats = self._statistics_args(training)
        return ops.instance_norm(x, gamma, beta, mean, var, use_input_stats=input_stats,
                                 momentum=self.momentum, eps=self.eps)


@register
class GroupNorm(NormalizationBase):
    """Group normalization of (N, C), (N, L, C) or (N, H, W, C): the C channels split into
    ``num_groups`` contiguous groups, statistics per example and group (PyTorch's GroupNorm
    with the channel axis last). The same computation in training and evaluation. PyTorch's
    second argument, ``num_channels``, is refused: the channels come from the data."""

    torch_twin = twins.TorchTwin("GroupNorm", twins.group_norm_params)
    onnx_form = onnx_forms.group_norm

    backward_op = staticmethod(ops.group_norm_backward)

    def __init__(self, num_groups, eps=1e-5, affine=True, **kwargs):
        owner = type(self).__name__
        refuse_count(owner, "eps", eps, "second", f"GroupNorm({num_groups!r}, {eps})",
                     f"GroupNorm({num_groups!r})")
        affine = flag(owner, "affine", affine)
        super().__init__(eps, affine, affine, **kwargs)
        self.num_groups = positive_int(owner, "num_groups", num_groups)
        self.affine = affine

    def get_config(self):
        return {**super().get_config(), "num_groups": self.num_groups, "affine": self.affine}

    def _check_rank(self, input_shape):
        super()._check_rank(input_shape)
        if input_shape[-1] % self.num_groups:
            raise ValueError(f"{self.label}: 'num_groups' {self.num_groups} must divide the "
                             f"number of channels; received per-example shape "
                             f"{tuple(input_shape)} with {input_shape[-1]} channels")

    def _normalize(self, x, training):
        return ops.group_norm(x, self.num_groups, *self._affine(), eps=self.eps)


@register
class LayerNorm(NormalizationBase):
    """Layer normalization over the trailing axes of each example (PyTorch's LayerNorm).

    Give ``normalized_shape`` (an int d or a tuple, checked against the input's trailing
    axes, as PyTorch) or ``axes`` (how many trailing axes, taken from the input at build);
    neither means ``axes=1``. ``elementwise_affine`` adds gamma (and, with ``bias``, beta)
    of the normalized shape. The same computation in training and evaluation.
    """

    torch_twin = twins.TorchTwin("LayerNorm", twins.layer_norm_params)
    onnx_form = onnx_forms.layer_norm

    backward_op = staticmethod(ops.layer_norm_backward)
    layout = "(N, ..., *normalized_shape)"

    def __init__(self, normalized_shape=None, eps=1e-5, elementwise_affine=True, bias=True, *,
                 axes=None, **kwargs):
        owner = type(self).__name__
        elementwise_affine = flag(owner, "elementwise_affine", elementwise_affine)
        bias = flag(owner, "bias", bias)
        super().__init__(eps, elementwise_affine, elementwise_affine and bias, **kwargs)
        if normalized_shape is not None and axes is not None:
            raise ValueError(f"{owner}: give 'normalized_shape' or 'axes', not both; received "
                             f"{normalized_shape!r} and {axes!r}")
        if normalized_shape is not None:
            self.normalized_shape = check_normalized_shape(owner, normalized_shape)
            self.axes = None
        else:
            if axes is not None and not is_int(axes):
                raise TypeError(f"{owner}: 'axes' must be an int >= 1 or None; received "
                                f"{describe(axes)}")
            self.normalized_shape = None
            self.axes = 1 if axes is None else positive_int(owner, "axes", axes)
        self.elementwise_affine, self.bias = elementwise_affine, bias

    def get_config(self):
        config = {**super().get_config(), "elementwise_affine": self.elementwise_affine,
                  "bias": self.bias}
        if self.normalized_shape is not None:
            config["normalized_shape"] = list(self.normalized_shape)
        else:
            config["axes"] = self.axes
        return config

    @property
    def min_rank(self):
        return len(self.normalized_shape) if self.normalized_shape else self.axes

    def param_shape(self, input_shape):
        return tuple(input_shape[len(input_shape) - self.min_rank:])

    def _check_rank(self, input_shape):
        super()._check_rank(input_shape)
        if self.normalized_shape and self.param_shape(input_shape) != self.normalized_shape:
            raise ValueError(f"{self.label}: the trailing axes of each example must equal "
                             f"normalized_shape {self.normalized_shape}; received per-example "
                             f"shape {tuple(input_shape)}")

    def _normalize(self, x, training):
        return ops.layer_norm(x, self.param_shape(x.shape[1:]), *self._affine(), eps=self.eps)


@register
class RMSNorm(LayerNorm):
    """RMS normalization over the trailing axes of each example (PyTorch's RMSNorm):
    y = x / sqrt(mean(x^2) + eps) * gamma. ``normalized_shape`` or ``axes`` as for
    :class:`LayerNorm`; ``eps=None`` is the machine epsilon of the input's dtype (as
    PyTorch); ``elementwise_affine`` adds gamma (no beta)."""

    torch_twin = twins.TorchTwin("RMSNorm", twins.layer_norm_params)
    onnx_form = onnx_forms.rms_norm

    backward_op = staticmethod(ops.rms_norm_backward)

    def __init__(self, normalized_shape=None, eps=None, elementwise_affine=True, *, axes=None,
                 **kwargs):
        super().__init__(normalized_shape, 1.0 if eps is None else eps, elementwise_affine,
                         False, axes=axes, **kwargs)
        self.eps = None if eps is None else self.eps

    def get_config(self):
        config = super().get_config()
        del config["bias"]
        return config

    def _backward(self, dy, cache):
        dx, dgamma = ops.rms_norm_backward(dy, cache)
        return dx, {} if dgamma is None else {"gamma": dgamma}

    def _normalize(self, x, training):
        return ops.rms_norm(x, self.param_shape(x.shape[1:]), self.parameters.get("gamma"),
                            eps=self.eps)
