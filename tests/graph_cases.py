"""Graphs and checks shared by the graph-model tests."""

from __future__ import annotations

import numpy as np

import handgrad as hg
from handgrad import layers as L
from handgrad.testing import assert_gradient_close, numeric_gradient

F64 = np.float64


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def assert_matches_finite_differences(model, xs, dys):
    """backward (every float input and every parameter) == central differences of
    ``L = sum_k <y_k, dy_k>`` over the outputs with a gradient (``dys[k]`` not None)."""
    def loss():
        ys = as_list(model.forward(xs if len(xs) > 1 else xs[0], training=True))
        model.clear_caches()
        return sum(float(np.sum(y * dy)) for y, dy in zip(ys, dys) if dy is not None)

    model.zero_grad()
    model.forward(xs if len(xs) > 1 else xs[0], training=True)
    dxs = as_list(model.backward(dys if len(dys) > 1 else dys[0]))
    checked = {f"x[{i}]": (x, dx) for i, (x, dx) in enumerate(zip(xs, dxs))
               if x.dtype.kind == "f"}
    grads = model.named_gradients()
    checked.update((key, (p, grads[key].copy())) for key, p in model.named_parameters().items())
    assert checked, "nothing to check"
    for key, (value, analytic) in checked.items():
        numeric, error = numeric_gradient(loss, value, with_error=True)
        assert_gradient_close(analytic, numeric, error, what=key)
    return dxs


# ------------------------------------------------------------------------- graphs
def branching(dtype=F64, seed=0):
    """Two inputs, two outputs; ``shared`` called on both inputs; fan-out of ``a``,
    ``hb`` and ``s``; Add, Multiply and Concatenate."""
    a, b = hg.Input((4,), name="a"), hg.Input((4,), name="b")
    shared = L.Dense(4, name="shared")
    ha = L.Tanh(name="tanh")(shared(a))
    hb = shared(b)
    s = L.Add(name="add")([ha, hb])
    p = L.Multiply(name="mul")([s, hb])
    c = L.Concatenate(name="cat")([p, a])
    return hg.Model([a, b], [L.Dense(3, name="logits")(c), L.Dense(1, name="score")(s)],
                    dtype=dtype, seed=seed)


def inner_block(name, dtype=F64, seed=1):
    u = hg.Input((4,), name="u")
    return hg.Model(u, L.Dense(4, name="out")(L.Tanh(name="act")(L.Dense(4, name="hid")(u))),
                    name=name, dtype=dtype, seed=seed)
