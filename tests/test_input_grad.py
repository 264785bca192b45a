"""``input_grad=False``: a backward whose input gradient nobody reads (a model's data, as
torch's tensors without ``requires_grad``) returns None and skips computing dx where the
op can (convolutions, dense), with the parameter gradients unchanged; ``fit`` asks for it."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad import ops
from handgrad.inspect import AnomalyError, detect_anomaly
from handgrad.model import Sequential
from handgrad.ops._engine import dispatch
from handgrad.testing import assert_close

PATHS = [False] + ([True] if dispatch.available() else [])

CONVS = [  # (op, x shape, w shape, keyword arguments)
    ("conv1d", (2, 9, 4), (3, 4, 6), {"padding": 1}),
    ("conv2d", (2, 7, 6, 8), (3, 3, 8, 8), {"stride": 2}),
    ("conv2d", (2, 7, 6, 8), (3, 3, 2, 8), {"padding": 1, "groups": 4}),  # grouped
    ("conv2d", (2, 7, 6, 8), (3, 3, 1, 8), {"padding": 1, "groups": 8}),  # depthwise
    ("conv3d", (1, 4, 5, 4, 3), (2, 2, 2, 3, 5), {"padding": 1}),
    ("conv_transpose1d", (2, 5, 4), (3, 6, 4), {"stride": 2}),
    ("conv_transpose2d", (2, 4, 5, 6), (3, 3, 4, 6), {"stride": 2, "padding": 1}),
    ("conv_transpose3d", (1, 3, 3, 3, 4), (2, 2, 2, 5, 4), {"stride": 2}),
]


@pytest.mark.parametrize("compiled", PATHS, ids=lambda c: "compiled" if c else "numpy")
@pytest.mark.parametrize(("op", "x_shape", "w_shape", "kwargs"), CONVS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CONVS)])
def test_conv_backward_without_input_grad(op, x_shape, w_shape, kwargs, compiled):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = rng.standard_normal(w_shape[-1] if "transpose" not in op else
                            w_shape[-2] * kwargs.get("groups", 1))
    with dispatch.use_compiled(compiled):
        y, cache = getattr(ops, op)(x, w, b, **kwargs)
        dy = rng.standard_normal(y.shape)
        dx, dw, db = getattr(ops, f"{op}_backward")(dy, cache)
        none, dw_only, db_only = getattr(ops, f"{op}_backward")(dy, cache, input_grad=False)
    assert dx.shape == x.shape and none is None
    terms = y.size // y.shape[-1]  # the sums over batch and positions
    assert_close(dw_only, dw, terms=terms, what=op)
    assert_close(db_only, db, terms=terms, what=op)


def test_linear_backward_without_input_grad():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 2)), np.ones(2)
    y, cache = ops.linear(x, w, b)
    dy = rng.standard_normal(y.shape)
    dx, dw, db = ops.linear_backward(dy, cache)
    none, dw_only, db_only = ops.linear_backward(dy, cache, input_grad=False)
    assert none is None and dx.shape == x.shape
    np.testing.assert_array_equal(dw_only, dw)
    np.testing.assert_array_equal(db_only, db)


def _gradients(model):
    return {k: v.copy() for k, v in model.named_gradients().items()}


def _both_ways(model, x):
    """(dx and gradients with input_grad=True, the return value and gradients with
    input_grad=False) of one step on ``x``."""
    results = []
    for flag in (True, False):
        model.zero_grad()
        y = model.forward(x, training=True)
        returned = model.backward(np.ones_like(y), input_grad=flag)
        results += [returned, _gradients(model)]
    return results


def _spy_backward_op(monkeypatch, owner, name="backward_op"):
    """Record the ``input_grad`` of every call of the backward op ``owner.name`` (a conv
    layer class's ``backward_op``, or an op of ``handgrad.ops``)."""
    calls, original = [], getattr(owner, name)

    def spy(dy, cache, input_grad=True):
        calls.append(input_grad)
        return original(dy, cache, input_grad=input_grad)

    monkeypatch.setattr(owner, name, staticmethod(spy) if isinstance(owner, type) else spy)
    return calls


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect"])
def test_sequential_first_layer_skips_dx(monkeypatch, padding_mode):
    calls = _spy_backward_op(monkeypatch, L.Conv2D)
    model = Sequential([L.Conv2D(4, 3, padding=1, activation="relu",
                                 padding_mode=padding_mode), L.Conv2D(3, 3),
                        L.Flatten(), L.Dense(2)], seed=0, input_shape=(6, 6, 2))
    x = np.random.default_rng(2).standard_normal((3, 6, 6, 2)).astype(np.float32)
    dx, full, none, partial = _both_ways(model, x)
    assert dx.shape == x.shape and none is None
    assert calls == [True, True, True, False]  # (second, first) conv per backward
    assert full.keys() == partial.keys()
    for key in full:
        assert_close(partial[key], full[key], terms=x.size, what=key)


def test_graph_skips_dx_only_where_every_input_is_the_models(monkeypatch):
    calls = _spy_backward_op(monkeypatch, ops, "linear_backward")
    image, meta = hg.Input((5,), name="image"), hg.Input((3,), name="meta")
    first = L.Dense(4, name="first")(image)  # reads only a model input
    joined = L.Concatenate()([first, meta])
    model = hg.Model([image, meta], L.Dense(2, name="head")(joined), seed=0)
    rng = np.random.default_rng(3)
    x = [rng.standard_normal((4, 5)), rng.standard_normal((4, 3))]
    x = [a.astype(np.float32) for a in x]
    dx, full, none, partial = _both_ways(model, x)
    assert [a.shape for a in dx] == [(4, 5), (4, 3)] and none == [None, None]
    assert calls == [True, True, True, False]  # (head, first) per backward
    for key in full:
        assert_close(partial[key], full[key], terms=4 * 5, what=key)


def test_a_subclass_overriding_backward_keeps_its_own_pass():
    """SparseEvolution overrides Dense's _backward (it masks dW): input_grad=False must
    still run that override (it takes no input_grad), not Dense's pass without dx."""
    model = Sequential([L.SparseEvolution(6, epsilon=2.0), L.ReLU(), L.Dense(2)], seed=0,
                       input_shape=(8,))
    x = np.random.default_rng(4).standard_normal((5, 8)).astype(np.float32)
    _, full, none, partial = _both_ways(model, x)
    assert none is None
    for key in full:
        np.testing.assert_array_equal(partial[key], full[key])


def test_fit_does_not_compute_the_datas_gradient(monkeypatch):
    calls = _spy_backward_op(monkeypatch, L.Conv2D)
    model = Sequential([L.Conv2D(4, 3), L.Flatten(), L.Dense(3)], seed=0,
                       input_shape=(5, 5, 1))
    model.compile("sgd", "cross_entropy")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 5, 5, 1)).astype(np.float32)
    model.train_step(x, rng.integers(0, 3, 6))
    assert calls == [False]


def test_hooks_and_anomaly_checks_see_none_for_the_skipped_dx():
    model = Sequential([L.Conv2D(4, 3), L.Flatten(), L.Dense(3)], seed=0,
                       input_shape=(5, 5, 1))
    model.compile("sgd", "cross_entropy")
    seen = []
    model.layers[0].register_backward_hook(lambda layer, dy, dx: seen.append(dx))
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 5, 5, 1)).astype(np.float32)
    with detect_anomaly(model):
        model.train_step(x, rng.integers(0, 3, 6))
    assert seen == [None]
    x[0, 0, 0, 0] = np.nan  # the checks still run on that layer: its forward output
    with detect_anomaly(model), pytest.raises(AnomalyError):
        model.train_step(x, rng.integers(0, 3, 6))
