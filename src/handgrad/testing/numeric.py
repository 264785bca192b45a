"""Checking numbers, for the test suite and for users: tolerances derived from the
dtype and the case, and a layer's backward against central finite differences.

No tolerance is one fixed number. A value computed in floating point from ``n``
rounded terms of total magnitude ``S`` is off by about ``eps * sqrt(n) * S``
(Higham, *Accuracy and Stability of Numerical Algorithms*, ch. 2-4), where ``S``
is the size of the *terms* (for a sum, the sum of their absolute values), not of
the result: a result that cancels to almost nothing is as inexact as its terms.
:func:`tolerance` is that bound and :func:`assert_close` applies it.

A central difference ``D(h) = (L(v + h) - L(v - h)) / (2h)`` is off by a
truncation error ``h^2 L'''(v) / 6`` and a rounding error ``~ eps |L| / h``.
Both depend on the function, so :func:`numeric_gradient` measures them on the
case itself: ``|D(h) - D(2h)|`` is three times the truncation error of ``D(h)``
plus the rounding noise of both. An analytic gradient passes when it is within
``FD_FACTOR`` times that measured error (:func:`assert_gradient_close`,
:func:`gradcheck`).

For ``L = sum_k <y_k, dy_k>`` over the outputs of a layer or model (one, or several
for a graph ``Model``) with random ``dy_k``, :func:`gradcheck` compares the analytic
gradient of every input and every parameter from ``backward`` with ``D(h)`` entry by
entry (all entries, or a random sample of ``max_entries``). Layer state that changes
between calls (a dropout generator) is restored before every evaluation, so each
one sees the same randomness.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from ..layers import Layer

FD_FACTOR = 4.0  # an analytic gradient may differ from D(h) by this x D's measured error


def tolerance(dtype, terms=1, scale=1.0, factor=8.0) -> float:
    """Absolute error allowed for a value computed in ``dtype`` from ``terms`` rounded
    terms of total magnitude ``scale``: ``factor * eps(dtype) * sqrt(terms) * scale``.

    ``scale`` is the size of the terms: the same linear op applied to ``|x|`` and
    ``|w|``, or ``max|y| * max|dy|`` for a softmax backward. ``terms`` is how many are
    summed into one output. When two inexact results are compared (handgrad and
    torch), their errors add; the default ``factor`` covers both.
    """
    eps = float(np.finfo(np.dtype(dtype)).eps)
    return factor * eps * float(np.sqrt(max(int(terms), 1))) * float(scale)


def finite_max(a) -> float:
    """``max|a|`` over the finite entries (0.0 when there are none)."""
    a = np.abs(np.asarray(a, dtype=np.float64))
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size else 0.0


def max_abs_error(actual, expected) -> float:
    """``max|actual - expected|`` over finite entries; equal infinities (and NaN where
    both are NaN) count as equal, any other non-finite mismatch as ``inf``."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != expected {expected.shape}")
    if expected.size == 0:
        return 0.0
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    finite = np.isfinite(expected) & np.isfinite(actual)
    if not np.all(same | finite):
        return float("inf")
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(np.where(same, 0.0, actual - expected))))


def assert_close(actual, expected, *, dtype=None, terms=1, scale=None, factor=8.0, what=""):
    """Raise AssertionError unless ``max|actual - expected| <= tolerance(dtype, terms,
    scale, factor)``. ``dtype`` defaults to the less precise of the two arrays, ``scale``
    to ``max|expected|`` (pass the size of the terms where they cancel)."""
    if dtype is None:
        kinds = [np.asarray(a).dtype for a in (actual, expected)]
        floats = [d for d in kinds if d.kind == "f"] or [np.dtype(np.float64)]
        dtype = max(floats, key=lambda d: np.finfo(d).eps)
    scale = finite_max(expected) if scale is None else float(scale)
    bound = tolerance(dtype, terms, scale, factor)
    error = max_abs_error(actual, expected)
    if not error <= bound:
        raise AssertionError(
            f"{what or 'values'}: max |error| {error:.3e} > {bound:.3e} = {factor:g} * "
            f"eps({np.dtype(dtype).name}) * sqrt({terms}) * {scale:.3g}")


def _fd_bound(numeric, fd_error, factor):
    """Absolute error the finite differences vouch for (plus float64 rounding)."""
    return factor * finite_max(fd_error) + tolerance(np.float64, 1, finite_max(numeric))


def assert_gradient_close(analytic, numeric, fd_error, *, factor=FD_FACTOR, what=""):
    """Check an analytic gradient against ``numeric_gradient(..., with_error=True)``:
    ``max|analytic - numeric| <= factor * max(fd_error)`` (+ float64 rounding)."""
    error = max_abs_error(analytic, numeric)
    bound = _fd_bound(numeric, fd_error, factor)
    if not error <= bound:
        raise AssertionError(f"{what or 'gradient'}: max |analytic - numeric| {error:.3e} > "
                             f"{bound:.3e} ({factor:g} x the measured finite-difference "
                             f"error {finite_max(fd_error):.3e})")


@dataclass
class GradcheckResult:
    """Per checked tensor ("x", "W", ...): the normwise relative error of the analytic
    gradient and the relative error the finite differences vouch for (``FD_FACTOR`` x
    their measured error). A fixed relative ``tolerance``, when given, replaces those."""

    errors: dict
    tolerance: float | None = None
    bounds: dict = field(default_factory=dict)

    @property
    def max_error(self) -> float:
        return max(self.errors.values()) if self.errors else 0.0

    @property
    def passed(self) -> bool:
        if self.tolerance is not None:
            return self.max_error <= self.tolerance
        return all(error <= self.bounds[key] for key, error in self.errors.items())


def numeric_gradient(loss, array, eps=1e-6, picks=None, *, with_error=False):
    """Central differences ``D(h) = (loss() at a[j] + h - loss() at a[j] - h) / (2h)``,
    ``h = eps``, for every flat entry ``j`` of ``array`` (or those in ``picks``),
    perturbing ``array`` in place and restoring it. Returns an array shaped like
    ``array`` (or like ``picks``). With ``with_error=True`` returns ``(numeric,
    error)``, ``error = |D(h) - D(2h)| + eps_machine * |loss| / h``: the truncation
    and rounding error of ``D(h)`` measured on this case (4 evaluations an entry)."""
    flat = array.reshape(-1)
    if not np.shares_memory(flat, array):
        raise ValueError("numeric_gradient: 'array' must be contiguous (it is perturbed "
                         "in place)")
    picks = np.arange(flat.size) if picks is None else np.asarray(picks)
    numeric = np.empty(picks.shape, dtype=np.float64)
    error = np.zeros(picks.shape, dtype=np.float64)
    machine_eps = float(np.finfo(np.float64).eps)

    def central(j, step):
        saved = flat[j]
        flat[j] = saved + step
        plus = float(loss())
        flat[j] = saved - step
        minus = float(loss())
        flat[j] = saved
        return (plus - minus) / (2 * step), max(abs(plus), abs(minus))

    for i, j in enumerate(picks):
        numeric[i], size = central(j, eps)
        if with_error:
            error[i] = abs(numeric[i] - central(j, 2 * eps)[0]) + machine_eps * size / eps
    shape = array.shape if len(picks) == flat.size else picks.shape
    numeric, error = numeric.reshape(shape), error.reshape(shape)
    return (numeric, error) if with_error else numeric


def _relative(error, numeric, analytic):
    scale = max(finite_max(numeric), finite_max(analytic), float(np.finfo(np.float64).tiny))
    return error / scale


def _checked_inputs(layer, x):
    """``(keys, arrays)``: ``x`` as a list of arrays with their result keys ("x" for one
    array; "x[0]", "x[1]" for a list; the input names for a dict, in the layer's input
    order). Float inputs are float64 copies (perturbed in place); integer ones (ids) are
    kept as they are and not checked."""
    if isinstance(x, dict):
        names = getattr(layer, "input_names", None)
        if names is None or sorted(x) != sorted(names):
            raise ValueError(f"gradcheck: a dict 'x' is for a graph Model and must be keyed "
                             f"by its input names {names}; received keys {sorted(x)}")
        keys, values = list(names), [x[name] for name in names]
    elif isinstance(x, (list, tuple)):
        keys, values = [f"x[{i}]" for i in range(len(x))], list(x)
    else:
        keys, values = ["x"], [x]
    arrays = [np.asarray(v) if np.asarray(v).dtype.kind in "iub" else
              np.array(v, dtype=np.float64) for v in values]
    return keys, arrays


def gradcheck(layer: Layer, x, *, rng=None, eps=1e-6, tolerance=None, max_entries=64):
    """Check ``layer.backward`` (every input gradient and every parameter gradient)
    against central finite differences at ``x`` (float64), for ``L = sum_k <y_k, dy_k>``
    over the outputs ``y_k`` with random ``dy_k``. ``x`` is an array, or for a layer
    with several inputs (a merge, attention, a graph ``Model``) a list of arrays, or a
    dict keyed by a Model's input names; integer inputs (ids) are not checked. Returns
    a :class:`GradcheckResult` keyed by "x" ("x[0]", "x[1]" for a list; input names for
    a dict) and parameter names, which passes when each gradient is within
    ``FD_FACTOR`` times the finite differences' measured error, or, when ``tolerance``
    is given, below that relative error."""
    rng = np.random.default_rng(rng)
    keys, arrays = _checked_inputs(layer, x)
    several = not (len(keys) == 1 and keys[0] == "x")
    if not layer.built:
        layer.graph_build([a.shape[1:] for a in arrays], rng, np.float64)
    narrow = sorted(k for k, v in layer.named_parameters().items() if v.dtype != np.float64)
    if narrow:
        raise TypeError(f"gradcheck: finite differences need float64; {layer.label} has "
                        f"parameters {narrow} of another dtype (build it with "
                        f"dtype='float64')")
    state = copy.deepcopy(layer.extra_state())
    buffers = {k: v.copy() for k, v in layer.named_buffers().items()}

    def forward():
        layer.load_extra_state(copy.deepcopy(state))
        for key, value in layer.named_buffers().items():
            value[...] = buffers[key]
        y = layer.graph_forward(arrays, True) if several else layer.forward(arrays[0],
                                                                             training=True)
        return y if isinstance(y, (list, tuple)) else [y]

    def loss(dys):
        ys = forward()
        layer.clear_caches()
        return float(sum(np.sum(y * dy) for y, dy in zip(ys, dys)))

    ys = forward()
    dys = [rng.standard_normal(y.shape) for y in ys]
    layer.clear_caches()
    ys = forward()
    layer.zero_grad()
    dy = dys if len(ys) > 1 else dys[0]
    dxs = layer.graph_backward(dy) if several else [layer.backward(dy)]
    tensors = {key: (array, dx) for key, array, dx in zip(keys, arrays, dxs)
               if array.dtype.kind == "f" and dx is not None}
    for key, param in layer.named_parameters().items():
        tensors[key] = (param, layer.named_gradients()[key].copy())
    errors, bounds = {}, {}
    for key, (value, analytic) in tensors.items():
        picks = np.arange(value.size)
        if value.size > max_entries:
            picks = rng.choice(value.size, max_entries, replace=False)
        numeric, fd_error = numeric_gradient(lambda: loss(dys), value, eps, picks,
                                             with_error=True)
        analytic, numeric, fd_error = (np.asarray(analytic).reshape(-1)[picks],
                                       numeric.reshape(-1), fd_error.reshape(-1))
        errors[key] = _relative(max_abs_error(analytic, numeric), numeric, analytic)
        bounds[key] = _relative(_fd_bound(numeric, fd_error, FD_FACTOR), numeric, analytic)
    layer.load_extra_state(state)
    return GradcheckResult(errors, tolerance, bounds)
