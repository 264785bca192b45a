"""Argument checks for the normalization ops, shared by the vectorized kernels and
their loop twins, and the :class:`NormCall` that describes one call.

Every normalization views ``x`` (a reshape, never a copy of a contiguous input)
so that its statistics are taken over ``axes`` of the view: one mean and one
variance per index of the other axes (a "group").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._checks import describe, float_array, is_int, positive_int, same_dtype
from ..._hyper import flag, number


@dataclass(frozen=True)
class NormCall:
    """A validated normalization call.

    ``view_shape``/``axes``: statistics are over ``axes`` of ``x.reshape(view_shape)``.
    ``input_stats``: normalize with the statistics of ``x`` (else with the running ones).
    ``update``: also update ``running_mean``/``running_var`` in place (per channel, the
    last axis of ``x``).
    """

    op: str
    x: object
    gamma: object
    beta: object
    running_mean: object
    running_var: object
    input_stats: bool
    update: bool
    momentum: float
    eps: float
    view_shape: tuple
    axes: tuple

    @property
    def group_size(self) -> int:
        """Values per statistic (m), the n in the unbiased factor n / (n - 1)."""
        return math.prod(self.view_shape[a] for a in self.axes)


def _eps(op, eps):
    """eps > 0: with eps = 0 a constant group divides 0 by 0 (PyTorch refuses it too)."""
    return number(op, "eps", eps, low=0.0, low_open=True)


def _affine(op, x, name, value, shape):
    """``gamma``/``beta``: None or a float array of ``shape`` with ``x``'s dtype."""
    if value is None:
        return None
    value = float_array(op, name, value)
    same_dtype(op, x=x, **{name: value})
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"{op}: '{name}' must have shape {tuple(shape)} to match 'x' of shape "
                         f"{tuple(x.shape)}; received shape {tuple(value.shape)}")
    return value


def _running(op, x, name, value):
    """A running statistic: a (C,) array of ``x``'s dtype, updated in place, so it is
    checked but never copied or converted."""
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):
        raise TypeError(f"{op}: '{name}' must be an array of shape ({x.shape[-1]},) (it is "
                        f"updated in place); received {describe(value)}")
    if value.dtype != x.dtype:
        raise TypeError(f"{op}: '{name}' has dtype {value.dtype} but 'x' has dtype {x.dtype}; "
                        f"cast one of them explicitly (no silent casts)")
    if tuple(value.shape) != (x.shape[-1],):
        raise ValueError(f"{op}: '{name}' must have shape ({x.shape[-1]},) (the channels, last "
                         f"axis of 'x' of shape {tuple(x.shape)}); received shape "
                         f"{tuple(value.shape)}")
    return value


def _running_pair(op, x, running_mean, running_var):
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: pass both 'running_mean' and 'running_var' or neither; "
                         f"received {describe(running_mean)} and {describe(running_var)}")
    if running_mean is None:
        return None, None
    return _running(op, x, "running_mean", running_mean), _running(op, x, "running_var",
                                                                    running_var)


def _channels_last(op, x, min_ndim, layout, need_channels=True):
    x = float_array(op, "x", x)
    if x.ndim < min_ndim:
        raise ValueError(f"{op}: 'x' must be a {min_ndim}-D or higher array {layout}; "
                         f"received an array of shape {tuple(x.shape)}")
    if need_channels and x.shape[-1] == 0:
        raise ValueError(f"{op}: 'x' must have at least one channel (last axis of {layout}); "
                         f"received an array of shape {tuple(x.shape)}")
    return x


def _channel_stats_call(op, x, gamma, beta, running_mean, running_var, input_stats, momentum,
                        eps, axes, what, local_stats=True):
    """Batch and instance norm: per-channel affine, optional running statistics;
    ``local_stats=False`` (statistics of a batch that several processes share) leaves the
    size check to the caller, who knows the whole batch."""
    gamma = _affine(op, x, "gamma", gamma, (x.shape[-1],))
    beta = _affine(op, x, "beta", beta, (x.shape[-1],))
    running_mean, running_var = _running_pair(op, x, running_mean, running_var)
    momentum = number(op, "momentum", momentum, low=0.0, high=1.0)
    eps = _eps(op, eps)
    if not input_stats and running_mean is None:
        raise ValueError(f"{op}: normalizing with running statistics needs 'running_mean' and "
                         f"'running_var'; received None")
    call = NormCall(op, x, gamma, beta, running_mean, running_var, input_stats,
                    input_stats and running_mean is not None, momentum, eps, tuple(x.shape), axes)
    if input_stats and local_stats and call.group_size == 1:
        raise ValueError(f"{op}: expected more than 1 {what} when training (statistics of "
                         f"'x'); received 'x' of shape {tuple(x.shape)}")
    return call


def prepare_batch_norm(op, x, gamma, beta, running_mean, running_var, training, momentum, eps,
                       local_stats=True):
    """x (N, ..., C): statistics per channel over every axis but the last."""
    x = _channels_last(op, x, 2, "(N, C), (N, L, C) or (N, H, W, C)")
    training = flag(op, "training", training)
    return _channel_stats_call(op, x, gamma, beta, running_mean, running_var, training,
                               momentum, eps, tuple(range(x.ndim - 1)), "value per channel",
                               local_stats)


def prepare_instance_norm(op, x, gamma, beta, running_mean, running_var, use_input_stats,
                          momentum, eps):
    """x (N, *S, C): statistics per example and channel over the spatial axes S."""
    x = _channels_last(op, x, 3, "(N, L, C) or (N, H, W, C)")
    use_input_stats = flag(op, "use_input_stats", use_input_stats)
    return _channel_stats_call(op, x, gamma, beta, running_mean, running_var, use_input_stats,
                               momentum, eps, tuple(range(1, x.ndim - 1)),
                               "spatial element per example and channel")


def check_normalized_shape(op, normalized_shape) -> tuple[int, ...]:
    """An int d (meaning (d,)) or a non-empty tuple of ints >= 0 (a 0 gives empty groups,
    as in PyTorch)."""
    if is_int(normalized_shape):
        normalized_shape = (normalized_shape,)
    if (not isinstance(normalized_shape, (tuple, list)) or not normalized_shape
            or not all(is_int(d) for d in normalized_shape)):
        raise TypeError(f"{op}: 'normalized_shape' must be an int or a non-empty tuple of ints; "
                        f"received {describe(normalized_shape)}")
    if any(d < 0 for d in normalized_shape):
        raise ValueError(f"{op}: 'normalized_shape' must hold ints >= 0; received "
                         f"{tuple(normalized_shape)}")
    return tuple(int(d) for d in normalized_shape)


def prepare_layer_norm(op, x, normalized_shape, gamma, beta, eps):
    """x (..., *normalized_shape): statistics over the trailing axes, per leading index."""
    shape = check_normalized_shape(op, normalized_shape)
    x = float_array(op, "x", x)
    k = len(shape)
    if x.ndim < k or tuple(x.shape[x.ndim - k:]) != shape:
        raise ValueError(f"{op}: the trailing axes of 'x' must equal normalized_shape {shape}; "
                         f"received 'x' of shape {tuple(x.shape)}")
    gamma = _affine(op, x, "gamma", gamma, shape)
    beta = _affine(op, x, "beta", beta, shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    return NormCall(op, x, gamma, beta, None, None, True, False, 0.0, _eps(op, eps),
                    tuple(x.shape), axes)


def prepare_rms_norm(op, x, normalized_shape, gamma, eps):
    """RMS norm: layer norm's axes and checks (no beta); ``eps=None`` is the machine epsilon
    of ``x``'s dtype, as in PyTorch."""
    x = float_array(op, "x", x)
    eps = float(np.finfo(x.dtype).eps) if eps is None else eps
    return prepare_layer_norm(op, x, normalized_shape, gamma, None, eps)


def prepare_group_norm(op, x, num_groups, gamma, beta, eps):
    """x (N, *S, C) viewed as (N, *S, G, C / G): statistics per example and group over
    S and the group's channels."""
    x = _channels_last(op, x, 2, "(N, C), (N, L, C) or (N, H, W, C)", need_channels=False)
    groups = positive_int(op, "num_groups", num_groups)
    channels = x.shape[-1]
    if channels % groups:
        raise ValueError(f"{op}: 'num_groups' must divide the number of channels {channels} "
                         f"(last axis of 'x' of shape {tuple(x.shape)}); received {groups}")
    gamma = _affine(op, x, "gamma", gamma, (channels,))
    beta = _affine(op, x, "beta", beta, (channels,))
    view = (*x.shape[:-1], groups, channels // groups)
    axes = (*range(1, x.ndim - 1), x.ndim)
    return NormCall(op, x, gamma, beta, None, None, True, False, 0.0, _eps(op, eps), view, axes)
