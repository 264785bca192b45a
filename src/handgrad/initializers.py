"""Weight initializers: ``init(shape, dtype=np.float32, rng=None) -> ndarray``.

Fans follow the channels-last weight layout: a dense weight is ``(F_in, F_out)`` and
a convolution weight ``(*kernel, C_in // groups, C_out)``, so with
``r = prod(kernel)``: ``fan_in = r * shape[-2]`` and ``fan_out = r * shape[-1]``
(the same numbers as PyTorch for its ``(C_out, C_in // groups, *kernel)`` layout).
A 1-D shape (a bias) has ``fan_in = fan_out = shape[0]``.

================  ==========================================================
glorot_uniform    U(-b, b),  b = sqrt(6 / (fan_in + fan_out))
glorot_normal     N(0, s^2), s = sqrt(2 / (fan_in + fan_out))
he_uniform        U(-b, b),  b = sqrt(6 / fan_in)
he_normal         N(0, s^2), s = sqrt(2 / fan_in)
lecun_normal      N(0, s^2), s = sqrt(1 / fan_in)
truncated_normal  N(0, std^2) restricted to [-bound, bound] (std=0.02, bound=2 std)
torch_default     U(-b, b),  b = 1 / sqrt(fan_in): PyTorch's kaiming_uniform(a=sqrt(5))
zeros, ones       constants
================  ==========================================================

The normal initializers are plain normals, as in ``torch.nn.init`` (Keras truncates
them). ``rng`` is a ``numpy.random.Generator`` or an int seed; ``None`` draws a fresh
``default_rng()``. The global ``np.random`` state is never used. Samples are drawn
directly in ``dtype`` (float32 or float64).
"""

from __future__ import annotations

import math

import numpy as np

from . import _custom
from ._checks import as_generator, describe, float_dtype, is_int
from ._hyper import lookup, number

__all__ = [
    "fans", "get", "glorot_normal", "glorot_uniform", "he_normal", "he_uniform",
    "lecun_normal", "ones", "serialize", "torch_default", "torch_default_bias",
    "truncated_normal", "zeros",
]


def _shape(op, shape) -> tuple[int, ...]:
    """An int or a sequence of ints >= 0, as a tuple."""
    dims = (shape,) if is_int(shape) else shape
    expected = f"{op}: 'shape' must be an int or a tuple of ints >= 0; received {describe(shape)}"
    if not isinstance(dims, (tuple, list)) or not all(is_int(d) for d in dims):
        raise TypeError(expected)
    if any(d < 0 for d in dims):
        raise ValueError(expected)
    return tuple(int(d) for d in dims)


def _args(op, shape, dtype, rng):
    return (_shape(op, shape), float_dtype(op, "dtype", dtype, allow_none=False),
            as_generator(op, "rng", rng))


def fans(shape) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a channels-last weight shape (see the module docstring)."""
    shape = _shape("fans", shape)
    if len(shape) == 0:
        raise ValueError("fans: 'shape' must have at least 1 dimension; received ()")
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[:-2])
    return receptive * shape[-2], receptive * shape[-1]


def _scale(numerator: float, fan: int) -> float:
    """``sqrt(numerator / fan)``, 0 for an empty weight."""
    return math.sqrt(numerator / fan) if fan > 0 else 0.0


def _uniform(shape, dtype, gen, bound):
    """U(-bound, bound) drawn in ``dtype``."""
    x = gen.random(shape, dtype=dtype)
    x *= 2.0 * bound
    x -= bound
    return x


def _normal(shape, dtype, gen, std):
    """N(0, std^2) drawn in ``dtype``."""
    x = gen.standard_normal(shape, dtype=dtype)
    x *= std
    return x


def glorot_uniform(shape, dtype=np.float32, rng=None) -> np.ndarray:
    """Glorot/Xavier uniform: U(-b, b), b = sqrt(6 / (fan_in + fan_out))."""
    shape, dtype, gen = _args("glorot_uniform", shape, dtype, rng)
    return _uniform(shape, dtype, gen, _scale(6.0, sum(fans(shape))))


def glorot_normal(shape, dtype=np.float32, rng=None) -> np.ndarray:
    """Glorot/Xavier normal: N(0, s^2), s = sqrt(2 / (fan_in + fan_out))."""
    shape, dtype, gen = _args("glorot_normal", shape, dtype, rng)
    return _normal(shape, dtype, gen, _scale(2.0, sum(fans(shape))))


def he_uniform(shape, dtype=np.float32, rng=None) -> np.ndarray:
    """He/Kaiming uniform for ReLU: U(-b, b), b = sqrt(6 / fan_in)."""
    shape, dtype, gen = _args("he_uniform", shape, dtype, rng)
    return _uniform(shape, dtype, gen, _scale(6.0, fans(shape)[0]))


def he_normal(shape, dtype=np.float32, rng=None) -> np.ndarray:
    """He/Kaiming normal for ReLU: N(0, s^2), s = sqrt(2 / fan_in)."""
    shape, dtype, gen = _args("he_normal", shape, dtype, rng)
    return _normal(shape, dtype, gen, _scale(2.0, fans(shape)[0]))


def lecun_normal(shape, dtype=np.float32, rng=None) -> np.ndarray:
    """LeCun normal (for SELU): N(0, s^2), s = sqrt(1 / fan_in)."""
    shape, dtype, gen = _args("lecun_normal", shape, dtype, rng)
    return _normal(shape, dtype, gen, _scale(1.0, fans(shape)[0]))


def truncated_normal(shape, dtype=np.float32, rng=None, *, std=0.02, bound=None) -> np.ndarray:
    """N(0, std^2) conditioned on ``|x| <= bound`` (default ``2 * std``), by rejection.

    Proposals are normal when ``bound >= std`` and uniform on [-bound, bound] (accepted
    with probability ``exp(-x^2 / (2 std^2))``) otherwise, so each round accepts more
    than half of the remaining entries.
    """
    op = "truncated_normal"
    shape, dtype, gen = _args(op, shape, dtype, rng)
    std = number(op, "std", std, low=0.0, low_open=True)
    bound = 2.0 * std if bound is None else number(op, "bound", bound, low=0.0, low_open=True)
    flat = np.empty(math.prod(shape), dtype=dtype)
    todo = np.arange(flat.size)
    while todo.size:
        if bound >= std:
            x = _normal(todo.size, dtype, gen, std)
            accept = np.abs(x) <= bound
        else:
            x = _uniform(todo.size, dtype, gen, bound)
            accept = gen.random(todo.size, dtype=dtype) < np.exp(-0.5 * (x / std) ** 2)
        flat[todo[accept]] = x[accept]
        todo = todo[~accept]
    return flat.reshape(shape)


def zeros(shape, dtype=np.float32, rng=None) -> np.ndarray:
    """All zeros (``rng`` is validated and unused)."""
    shape, dtype, _ = _args("zeros", shape, dtype, rng)
    return np.zeros(shape, dtype=dtype)


def ones(shape, dtype=np.float32, rng=None) -> np.ndarray:
    """All ones (``rng`` is validated and unused)."""
    shape, dtype, _ = _args("ones", shape, dtype, rng)
    return np.ones(shape, dtype=dtype)


def torch_default(shape, dtype=np.float32, rng=None) -> np.ndarray:
    """PyTorch's default weight init ``kaiming_uniform_(a=sqrt(5))``: U(-b, b), b = fan_in^-0.5."""
    shape, dtype, gen = _args("torch_default", shape, dtype, rng)
    return _uniform(shape, dtype, gen, _scale(1.0, fans(shape)[0]))


def torch_default_bias(fan_in):
    """PyTorch's default bias init for a layer whose weight has ``fan_in``: an initializer
    drawing U(-b, b), b = 1/sqrt(fan_in) (0 when ``fan_in`` is 0)."""
    expected = f"torch_default_bias: 'fan_in' must be an int >= 0; received {describe(fan_in)}"
    if not is_int(fan_in):
        raise TypeError(expected)
    if fan_in < 0:
        raise ValueError(expected)
    bound = _scale(1.0, int(fan_in))

    def init(shape, dtype=np.float32, rng=None) -> np.ndarray:
        shape, dtype, gen = _args("torch_default_bias", shape, dtype, rng)
        return _uniform(shape, dtype, gen, bound)

    init.__name__ = init.__qualname__ = f"torch_default_bias({int(fan_in)})"
    return init


_REGISTRY = {
    f.__name__: f
    for f in (glorot_uniform, glorot_normal, he_uniform, he_normal, lecun_normal,
              truncated_normal, zeros, ones, torch_default)
}


def get(name_or_callable):
    """The initializer called ``name`` (case-insensitive), or a callable returned as is."""
    if callable(name_or_callable):
        return name_or_callable
    return lookup("initializers.get", _REGISTRY, name_or_callable)


def serialize(initializer, what="initializer"):
    """What a saved config stores for ``initializer``: its name for a built-in (or a
    name string as is), else a ``{"custom": name}`` reference (see :mod:`handgrad.io`)."""
    if isinstance(initializer, str):
        return initializer
    for name, builtin in _REGISTRY.items():
        if builtin is initializer:
            return name
    return _custom.reference(initializer, what)
