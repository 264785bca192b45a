"""Argument validation shared by ops and layers.

Every check raises ``TypeError`` or ``ValueError`` whose message names the
function, the argument, what was expected and what was received.
"""

from __future__ import annotations

import difflib
import numbers

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def array_module(*arrays):
    """The array module (NumPy, or CuPy for CuPy arrays) that owns ``arrays``."""
    for array in arrays:
        if type(array).__module__.split(".")[0] == "cupy":
            import cupy

            return cupy
    return np


def describe(value) -> str:
    """A short description of ``value`` for error messages."""
    if not isinstance(value, type) and hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{value!r} ({type(value).__name__})"


def float_dtype(op: str, name: str, value, *, allow_none=True, integers=False):
    """``value`` (a dtype, a type or a name) as ``np.dtype`` float32 or float64 (with
    ``integers`` also any integer or bool dtype); ``None`` passes when allowed. A name
    NumPy does not know ("bfloat16") is refused like any other dtype: never read as
    ``None``, which ``np.dtype`` would take for float64."""
    if value is None and allow_none:
        return None
    resolved = None
    if value is not None and not isinstance(value, (bool, numbers.Number)):
        try:
            resolved = np.dtype(value)
        except (TypeError, ValueError, SyntaxError):
            resolved = None
    if resolved is not None and (any(resolved == d for d in FLOAT_DTYPES)
                                 or (integers and resolved.kind in "biu")):
        return resolved
    expected = "float32 or float64" + (" (or an integer dtype)" if integers else "")
    expected += " or None" if allow_none else ""
    raise TypeError(f"{op}: '{name}' must be {expected}; received {describe(value)}")


def float_array(op: str, name: str, value, ndim=None, layout: str = ""):
    """Return ``value`` as a C-contiguous float32/float64 array, checking its rank.

    ``ndim`` is an int or a tuple of allowed ranks; ``layout`` (e.g.
    ``"(N, H, W, C)"``) is quoted in the error message. Strided or transposed
    views are copied once here, so every op sees the same memory order and
    gives bit-identical results for any input layout.
    """
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):
        if isinstance(value, (list, tuple)) or isinstance(value, numbers.Number):
            value = np.asarray(value)
        else:
            raise TypeError(f"{op}: '{name}' must be an array; received {describe(value)}")
    if value.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{op}: '{name}' must have dtype float32 or float64; received dtype {value.dtype}"
        )
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if value.ndim not in allowed:
            ranks = " or ".join(f"{r}-D" for r in allowed)
            suffix = f" {layout}" if layout else ""
            raise ValueError(
                f"{op}: '{name}' must be a {ranks} array{suffix}; "
                f"received an array of shape {tuple(value.shape)}"
            )
    if value.ndim == 0:
        return value  # ascontiguousarray would turn it into shape (1,)
    return array_module(value).ascontiguousarray(value)


def upstream_grad(op: str, dy, expected_shape, dtype, name="dy",
                  shape_name="the forward output's shape"):
    """``dy`` (an array named ``name``) checked against the forward's dtype and
    ``expected_shape`` (described as ``shape_name`` in the error)."""
    dy = float_array(op, name, dy)
    if dy.dtype != dtype:
        raise TypeError(f"{op}: '{name}' must have the forward dtype {dtype}; received "
                        f"{dy.dtype}")
    if tuple(dy.shape) != tuple(expected_shape):
        raise ValueError(f"{op}: '{name}' must have {shape_name} {tuple(expected_shape)}; "
                         f"received {tuple(dy.shape)}")
    return dy


def same_dtype(op: str, **arrays) -> None:
    """Require all given (non-None) arrays to share one dtype: no silent casts."""
    named = [(name, a) for name, a in arrays.items() if a is not None]
    first_name, first = named[0]
    for name, array in named[1:]:
        if array.dtype != first.dtype:
            raise TypeError(
                f"{op}: '{name}' has dtype {array.dtype} but '{first_name}' has dtype "
                f"{first.dtype}; cast one of them explicitly (no silent casts)"
            )


def is_int(value) -> bool:
    """True for Python/NumPy integers, False for bools."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def int_tuple(op: str, name: str, value, n: int, minimum: int = 1) -> tuple[int, ...]:
    """Normalize an int or a length-``n`` sequence of ints, each >= ``minimum``."""
    expected = f"an int >= {minimum} or a tuple of {n} such ints"
    if is_int(value):
        values = (int(value),) * n
    elif isinstance(value, (tuple, list)) and len(value) == n and all(is_int(v) for v in value):
        values = tuple(int(v) for v in value)
    else:
        raise TypeError(f"{op}: '{name}' must be {expected}; received {describe(value)}")
    if any(v < minimum for v in values):
        raise ValueError(f"{op}: '{name}' must be {expected}; received {value!r}")
    return values


def positive_int(op: str, name: str, value) -> int:
    """An int >= 1."""
    return int_tuple(op, name, value, 1, minimum=1)[0]


def choice(op: str, name: str, value, options) -> str:
    """One of the allowed strings."""
    if not isinstance(value, str) or value not in options:
        allowed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{op}: '{name}' must be one of {allowed}; received {value!r}")
    return value


def as_generator(op: str, name: str, rng, allow_none: bool = True):
    """A ``numpy.random.Generator`` from a Generator, an int seed >= 0 or (when
    allowed) ``None`` for a fresh, OS-seeded one. Never touches the global state."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None and allow_none:
        return np.random.default_rng()
    if is_int(rng):
        if rng < 0:
            raise ValueError(f"{op}: '{name}' must be an int seed >= 0; received {rng!r}")
        return np.random.default_rng(int(rng))
    accepted = ("a numpy.random.Generator, an int seed or None" if allow_none
                else "a numpy.random.Generator or an int seed")
    raise TypeError(f"{op}: '{name}' must be {accepted}; received {describe(rng)}")


def unknown_argument(owner: str, key: str, spellings) -> TypeError:
    """The error for an argument ``key`` that ``owner`` does not take: its close matches
    among ``spellings`` (the accepted names) and all of them."""
    close = difflib.get_close_matches(key, list(spellings), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
    return TypeError(f"{owner}: unexpected argument {key!r}; {hint}accepted: "
                     f"{', '.join(sorted(spellings))}")
