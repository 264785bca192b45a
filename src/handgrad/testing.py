"""Gradient checking that users can call too: a layer's backward against central
finite differences, in float64.

For ``L = <layer(x), dy>`` with a random ``dy``, the analytic ``dL/dx`` and
``dL/dparam`` from ``backward`` are compared with ``(L(v + eps) - L(v - eps)) /
(2 eps)`` entry by entry (all entries, or a random sample of ``max_entries``).
Layer state that changes between calls (a dropout generator) is restored before
every evaluation, so each one sees the same randomness.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .layers import Layer


@dataclass
class GradcheckResult:
    """Largest normwise relative error per checked tensor ("x", "W", ...)."""

    errors: dict
    tolerance: float

    @property
    def max_error(self) -> float:
        return max(self.errors.values()) if self.errors else 0.0

    @property
    def passed(self) -> bool:
        return self.max_error <= self.tolerance


def numeric_gradient(loss, array, eps=1e-6, picks=None):
    """Central differences ``(loss() at a[j] + eps - loss() at a[j] - eps) / (2 eps)``
    for every flat entry ``j`` of ``array`` (or only those in ``picks``), perturbing
    ``array`` in place and restoring it. Returns an array shaped like ``array`` (or
    like ``picks``)."""
    flat = array.reshape(-1)
    if not np.shares_memory(flat, array):
        raise ValueError("numeric_gradient: 'array' must be contiguous (it is perturbed "
                         "in place)")
    picks = np.arange(flat.size) if picks is None else np.asarray(picks)
    numeric = np.empty(picks.shape, dtype=np.float64)
    for i, j in enumerate(picks):
        saved = flat[j]
        flat[j] = saved + eps
        plus = loss()
        flat[j] = saved - eps
        minus = loss()
        flat[j] = saved
        numeric[i] = (plus - minus) / (2 * eps)
    return numeric.reshape(array.shape) if len(picks) == flat.size else numeric


def _relative_error(analytic, numeric):
    scale = max(float(np.max(np.abs(numeric))), float(np.max(np.abs(analytic))), 1e-12)
    return float(np.max(np.abs(analytic - numeric))) / scale


def gradcheck(layer: Layer, x, *, rng=None, eps=1e-6, tolerance=1e-6, max_entries=64):
    """Check ``layer.backward`` (dx and every parameter gradient) against central
    finite differences at ``x`` (float64). Returns a :class:`GradcheckResult`."""
    rng = np.random.default_rng(rng)
    x = np.array(x, dtype=np.float64)
    if not layer.built:
        layer.build(x.shape[1:], rng=rng, dtype=np.float64)
    state = copy.deepcopy(layer.extra_state())
    buffers = {k: v.copy() for k, v in layer.named_buffers().items()}

    def loss(inputs, dy):
        layer.load_extra_state(copy.deepcopy(state))
        for key, value in layer.named_buffers().items():
            value[...] = buffers[key]
        y = layer.forward(inputs, training=True)
        layer.clear_caches()
        return float(np.sum(y * dy))

    layer.load_extra_state(copy.deepcopy(state))
    y = layer.forward(x, training=True)
    dy = rng.standard_normal(y.shape)
    layer.clear_caches()
    layer.load_extra_state(copy.deepcopy(state))
    layer.zero_grad()
    layer.forward(x, training=True)
    dx = layer.backward(dy)
    tensors = {"x": (x, dx)}
    for key, param in layer.named_parameters().items():
        tensors[key] = (param, layer.named_gradients()[key].copy())
    errors = {}
    for key, (value, analytic) in tensors.items():
        picks = np.arange(value.size)
        if value.size > max_entries:
            picks = rng.choice(value.size, max_entries, replace=False)
        numeric = numeric_gradient(lambda: loss(x, dy), value, eps, picks)
        errors[key] = _relative_error(analytic.reshape(-1)[picks], numeric.reshape(-1))
    layer.load_extra_state(state)
    return GradcheckResult(errors, tolerance)
