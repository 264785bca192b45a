"""Channel dropout, alpha dropout and stochastic depth: PyTorch's dropout1d/2d/3d,
alpha_dropout, feature_alpha_dropout and torchvision's stochastic_depth, channels-last.

A keep mask ``k`` (1 kept, 0 dropped) is drawn as in :func:`.dropout` (``u >= rate``,
``u`` uniform in ``x``'s dtype from ``rng``; ``rows`` draws it for a global batch), per
element (``alpha_dropout``) or per example and channel (the ``feature_`` forms: ``k`` of
shape (N, 1, ..., 1, C), broadcast over the spatial axes), or is given as ``keep``.
With p = rate::

    feature_dropout                         y = x * k / (1 - p)
    alpha_dropout, feature_alpha_dropout    y = x * k * a + s * a * (k - 1 + p)
                                            a = 1 / sqrt((s^2 p + 1) (1 - p))

where s = 1.7580993408473766 is SELU's scale * alpha: a dropped value becomes SELU's
negative saturation -s, then the affine map that keeps a zero-mean, unit-variance input
so. ``dx = dy * m`` with ``m`` the multiplier (``k / (1 - p)`` or ``k * a``), which the
cache holds (of the mask's shape). ``training=False`` or ``rate=0`` is the identity and
draws nothing.
"""

from __future__ import annotations

import math

from .._checks import array_module, as_generator, describe, float_array
from .._hyper import flag, number
from ._args.elementwise import make_cache, open_cache
from .declare import Fixed, Sample, declare, exports
from .dropout import _rows

SELU_SATURATION = 1.7580993408473766  # SELU's scale * alpha


def _mask_shape(op, x, per_channel):
    """(N, 1.., C) when ``per_channel`` else ``x``'s shape."""
    if per_channel and x.ndim < 2:
        raise ValueError(f"{op}: 'x' must be (N, ..., C) with at least 2 axes; received "
                         f"shape {tuple(x.shape)}")
    return (x.shape[0], *[1] * (x.ndim - 2), x.shape[-1]) if per_channel else x.shape


def _keep(op, x, rate, rng, rows, keep, shape):
    """The boolean keep mask of ``shape``: drawn (u >= rate) or ``keep`` checked."""
    xp = array_module(x)
    if keep is not None:
        if getattr(getattr(keep, "dtype", None), "kind", None) != "b" \
                or tuple(keep.shape) != tuple(shape):
            raise ValueError(f"{op}: 'keep' must be a boolean array of shape {tuple(shape)} "
                             f"for 'x' of shape {tuple(x.shape)}; received "
                             f"{describe(keep)}")
        return xp.asarray(keep)
    generator = as_generator(op, "rng", rng, allow_none=False)
    if rows is None:
        u = generator.random(shape, dtype=x.dtype)
    else:
        start, total = rows
        u = generator.random((total, *shape[1:]), dtype=x.dtype)[start:start + x.shape[0]]
    return xp.asarray(u >= rate)


def _forward(op, x, rate, rng, training, rows, keep, per_channel, alpha, shape=None):
    """``shape``: of the mask (a function of ``x``), default by ``per_channel``."""
    x = float_array(op, "x", x)
    rate = number(op, "rate", rate, low=0.0, high=1.0, high_open=True)
    rows = _rows(op, rows, x)
    if not flag(op, "training", training) or rate == 0.0 or x.size == 0:
        return x, make_cache(op, x)
    shape = _mask_shape(op, x, per_channel) if shape is None else shape(x)
    if shape[:1] != x.shape[:1]:  # one draw for the whole batch, in every process
        rows = None
    k = _keep(op, x, rate, rng, rows, keep, shape)
    if not alpha:
        multiplier = k * x.dtype.type(1.0 / (1.0 - rate))
        return x * multiplier, make_cache(op, x, multiplier)
    a = 1.0 / math.sqrt((SELU_SATURATION ** 2 * rate + 1.0) * (1.0 - rate))
    multiplier = k * x.dtype.type(a)
    shift = (k - x.dtype.type(1.0 - rate)) * x.dtype.type(SELU_SATURATION * a)
    return x * multiplier + shift, make_cache(op, x, multiplier)


def _backward(op, forward, dy, cache):
    dy, cache = open_cache(op, forward, dy, cache)
    return dy if cache.saved is None else dy * cache.saved


def feature_dropout(x, rate, rng=None, *, training=True, rows=None, keep=None):
    """Channel dropout, as ``F.dropout1d/2d/3d`` with the channel axis last: y = x * k /
    (1 - rate), k (N, 1, ..., 1, C) drawn from ``rng`` (or given as ``keep``, boolean).
    x (N, *S, C); ``rows`` as in :func:`.dropout`. Returns ``(y, cache)``."""
    return _forward("feature_dropout", x, rate, rng, training, rows, keep, True, False)


def feature_dropout_backward(dy, cache):
    """dx = dy * k / (1 - rate) (dy without dropout)."""
    return _backward("feature_dropout_backward", "feature_dropout", dy, cache)


def alpha_dropout(x, rate, rng=None, *, training=True, rows=None, keep=None):
    """Alpha dropout, as ``F.alpha_dropout``: y = x * k * a + s * a * (k - 1 + rate) (see
    the module docstring), k of ``x``'s shape. Returns ``(y, cache)``."""
    return _forward("alpha_dropout", x, rate, rng, training, rows, keep, False, True)


def alpha_dropout_backward(dy, cache):
    """dx = dy * k * a."""
    return _backward("alpha_dropout_backward", "alpha_dropout", dy, cache)


def feature_alpha_dropout(x, rate, rng=None, *, training=True, rows=None, keep=None):
    """Alpha dropout of whole channels, as ``F.feature_alpha_dropout`` with the channel
    axis last: k (N, 1, ..., 1, C). Returns ``(y, cache)``."""
    return _forward("feature_alpha_dropout", x, rate, rng, training, rows, keep, True, True)


def feature_alpha_dropout_backward(dy, cache):
    """dx = dy * k * a (k broadcast over the spatial axes)."""
    return _backward("feature_alpha_dropout_backward", "feature_alpha_dropout", dy, cache)


STOCHASTIC_DEPTH_MODES = ("row", "batch")


def stochastic_depth(x, rate, rng=None, *, mode="row", training=True, rows=None, keep=None):
    """torchvision's ``stochastic_depth``: y = x * k / (1 - rate), k of shape (N, 1, ..., 1)
    (``mode="row"``: per example) or (1, ..., 1) (``"batch"``: one draw for the batch),
    drawn from ``rng`` or given as ``keep`` (boolean). x (N, ...). Returns ``(y, cache)``."""
    op = "stochastic_depth"
    if mode not in STOCHASTIC_DEPTH_MODES:
        raise ValueError(f"{op}: 'mode' must be one of {STOCHASTIC_DEPTH_MODES}; received "
                         f"{mode!r}")

    def shape(a):
        if a.ndim < 1:
            raise ValueError(f"{op}: 'x' must have a batch axis; received shape {a.shape}")
        return (a.shape[0] if mode == "row" else 1, *[1] * (a.ndim - 1))
    return _forward(op, x, rate, rng, training, rows, keep, False, False, shape)


def stochastic_depth_backward(dy, cache):
    """dx = dy * k / (1 - rate) (dy without dropping)."""
    return _backward("stochastic_depth_backward", "stochastic_depth", dy, cache)


def _torch_stochastic_depth(F, x, rate, rng=None, *, mode="row", training=True, rows=None,
                            keep=None):
    if training and rate:
        raise NotImplementedError("torchvision's stochastic_depth draws its own mask")
    return x


def _torch_identity(name=None):
    """torch draws its own masks: only the identity has a torch counterpart (the masks
    are compared given torch's, in tests/test_dropout_variants.py)."""
    def counterpart(F, x, rate, rng=None, *, training=True, rows=None, keep=None):
        if training and rate:
            raise NotImplementedError(f"torch's {name or 'channel dropout'} draws its own mask")
        op = name or f"dropout{x.ndim - 2}d"  # channel dropout: by the spatial rank
        return getattr(F, op)(x, rate, training=False)
    return counterpart


for _forward_op, _backward_op, _torch_name in (
        (feature_dropout, feature_dropout_backward, None),
        (alpha_dropout, alpha_dropout_backward, "alpha_dropout"),
        (feature_alpha_dropout, feature_alpha_dropout_backward, "feature_alpha_dropout")):
    declare(_forward_op, _backward_op, torch=_torch_identity(_torch_name),
            samples=(Sample(((4, 3, 5), Fixed(0.3), Fixed(7))),
                     Sample(((4, 3, 5), Fixed(0.3), Fixed(7)), {"training": False}),
                     Sample(((2, 3, 2, 2), Fixed(0.0), Fixed(1)))))
declare(stochastic_depth, stochastic_depth_backward, torch=_torch_stochastic_depth,
        samples=(Sample(((6, 3, 2), Fixed(0.4), Fixed(7))),
                 Sample(((6, 3, 2), Fixed(0.4), Fixed(7)), {"mode": "batch"}),
                 Sample(((4, 3), Fixed(0.3), Fixed(7)), {"training": False})))
__all__ = exports(__name__, globals())
