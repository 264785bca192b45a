"""Data augmentation for training batches: vectorized NumPy, one draw per example.

Each function takes a batch ``x`` (examples first: ``(N, L, C)`` sequences,
``(N, H, W, C)`` images) and a ``numpy.random.Generator`` (or an int seed), draws only
from that generator, and returns a new array of ``x``'s shape and dtype (``x`` is never
changed in place). None loops over the examples in Python.

    aug = compose(partial(random_shift, max_shift=4), partial(random_scale, amount=0.1),
                  partial(gaussian_noise, sigma=0.05))     # or augmentation(shift=4, ...)
    model.fit(x, y, augment=aug, rng=0)                    # training batches only

``fit(..., augment=fn)`` calls ``fn(x_batch, rng)`` on each training batch (a list of
arrays for a model with several inputs) with fit's own generator, so a seed gives the
same run; validation and evaluation data are never augmented.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._checks import array_module, as_generator, choice, describe, is_int

SHIFT_MODES = ("roll", "zero")


def _batch(op, x, min_ndim, layout):
    if not (hasattr(x, "dtype") and hasattr(x, "shape")):
        raise TypeError(f"{op}: 'x' must be an array {layout}; received {describe(x)}")
    if x.dtype.kind != "f":
        raise TypeError(f"{op}: 'x' must be a float array; received dtype {x.dtype}")
    if x.ndim < min_ndim:
        raise ValueError(f"{op}: 'x' must be an array {layout} with at least {min_ndim} "
                         f"axes; received shape {tuple(x.shape)}")
    return x


def _real(op, name, value, low, high=math.inf, high_open=False):
    """A finite real number in [low, high] (or [low, high) when ``high_open``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: '{name}' must be a number; received {describe(value)}")
    value = float(value)
    above = value >= high if high_open else value > high
    if not math.isfinite(value) or value < low or above:
        bracket = ")" if high_open else "]"
        raise ValueError(f"{op}: '{name}' must be in [{low:g}, {high:g}{bracket}; "
                         f"received {value!r}")
    return value


def _shifts(op, max_shift, n_axes):
    """``max_shift`` as one int >= 0 per spatial axis."""
    values = (max_shift,) * n_axes if is_int(max_shift) else max_shift
    if (not isinstance(values, (tuple, list)) or len(values) != n_axes
            or not all(is_int(v) for v in values)):
        raise TypeError(f"{op}: 'max_shift' must be an int >= 0 or a tuple of {n_axes} "
                        f"such ints (one per spatial axis); received {describe(max_shift)}")
    if any(v < 0 for v in values):
        raise ValueError(f"{op}: 'max_shift' must be >= 0; received {max_shift!r}")
    return tuple(int(v) for v in values)


def random_shift(x, rng, max_shift, *, mode="roll"):
    """Translate each example by its own integer offsets, drawn uniformly from
    ``[-max_shift, max_shift]`` independently for every spatial axis (axes 1 to
    ``x.ndim - 2``; the last axis holds the channels): ``out[n, t] = x[n, t - s_n]``.
    ``mode="roll"`` wraps around (circular), ``"zero"`` fills the vacated samples with
    zeros. ``max_shift`` is an int or one int per spatial axis."""
    op = "random_shift"
    x = _batch(op, x, 3, "(N, L, C) or (N, H, W, C)")
    rng = as_generator(op, "rng", rng, allow_none=False)
    limits = _shifts(op, max_shift, x.ndim - 2)
    mode = choice(op, "mode", mode, SHIFT_MODES)
    xp = array_module(x)
    out, n = x, x.shape[0]
    for axis, limit in enumerate(limits, start=1):
        if limit == 0:
            continue
        length = x.shape[axis]
        shift = rng.integers(-limit, limit + 1, size=n)
        source = np.arange(length)[None, :] - shift[:, None]  # (N, length)
        shape = [1] * x.ndim
        shape[0], shape[axis] = n, length
        if mode == "roll":
            index = xp.asarray((source % length).reshape(shape))
            out = xp.take_along_axis(out, index, axis=axis)
        else:
            inside = ((source >= 0) & (source < length)).reshape(shape)
            index = xp.asarray(np.clip(source, 0, length - 1).reshape(shape))
            out = xp.take_along_axis(out, index, axis=axis) * xp.asarray(inside, dtype=x.dtype)
    return out.copy() if out is x else out


def random_scale(x, rng, amount):
    """Multiply each example by its own factor ``1 + U(-amount, amount)``, 0 <= amount < 1."""
    op = "random_scale"
    x = _batch(op, x, 1, "(N, ...)")
    rng = as_generator(op, "rng", rng, allow_none=False)
    amount = _real(op, "amount", amount, 0.0, 1.0, high_open=True)
    factor = 1.0 + rng.uniform(-amount, amount, size=(x.shape[0],) + (1,) * (x.ndim - 1))
    return x * array_module(x).asarray(factor, dtype=x.dtype)


def gaussian_noise(x, rng, sigma):
    """Add independent Gaussian noise of standard deviation ``sigma >= 0`` to every value."""
    op = "gaussian_noise"
    x = _batch(op, x, 1, "(N, ...)")
    rng = as_generator(op, "rng", rng, allow_none=False)
    sigma = _real(op, "sigma", sigma, 0.0)
    noise = rng.standard_normal(x.shape, dtype=x.dtype)
    return x + array_module(x).asarray(noise) * x.dtype.type(sigma)


class Compose:
    """``fns`` applied in order, each as ``fn(x, rng)`` with the same generator."""

    def __init__(self, *fns):
        for fn in fns:
            if not callable(fn):
                raise TypeError(f"compose: each augmentation must be a callable "
                                f"(x, rng) -> x; received {describe(fn)}")
        self.fns = fns

    def __call__(self, x, rng):
        rng = as_generator("compose", "rng", rng, allow_none=False)
        for fn in self.fns:
            x = fn(x, rng)
        return x

    def __repr__(self):
        return f"compose({', '.join(map(repr, self.fns))})"


def compose(*fns) -> Compose:
    """One augmentation ``(x, rng) -> x`` that applies ``fns`` in order."""
    return Compose(*fns)


class _Bound:
    """``fn(x, rng, **kwargs)`` with a readable repr (for logs and metrics)."""

    def __init__(self, fn, **kwargs):
        self.fn, self.kwargs = fn, kwargs

    def __call__(self, x, rng):
        return self.fn(x, rng, **self.kwargs)

    def __repr__(self):
        args = ", ".join(f"{key}={value!r}" for key, value in self.kwargs.items())
        return f"{self.fn.__name__}({args})"


def augmentation(shift=0, scale=0.0, noise=0.0, mode="roll") -> Compose:
    """The usual pipeline: :func:`random_shift` by up to ``shift`` samples (``mode``),
    then :func:`random_scale` by ``scale``, then :func:`gaussian_noise` of ``noise``;
    a zero setting leaves its step out. Arguments are checked here, not at the first batch."""
    op = "augmentation"
    if not is_int(shift) or shift < 0:
        raise (TypeError if not is_int(shift) else ValueError)(
            f"{op}: 'shift' must be an int >= 0; received {describe(shift)}")
    mode = choice(op, "mode", mode, SHIFT_MODES)
    scale = _real(op, "scale", scale, 0.0, 1.0, high_open=True)
    noise = _real(op, "noise", noise, 0.0)
    steps = [_Bound(random_shift, max_shift=int(shift), mode=mode)] if shift else []
    steps += [_Bound(random_scale, amount=scale)] if scale else []
    steps += [_Bound(gaussian_noise, sigma=noise)] if noise else []
    return Compose(*steps)
