"""Forwards that are never backpropagated do not pile up: a model's new outermost forward
that keeps caches drops what earlier forwards left unconsumed, while a shared layer's
several calls inside one forward stay paired (test_graph.py), a plain layer's top-level
forwards still stack (weight tying by hand, test_layers_contract.py) and an inference
forward between a training forward and its backward leaves the caches alone."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.model import Sequential


def cnn():
    return Sequential([L.Conv2D(8, 3, padding=1), L.BatchNorm(), L.ReLU(), L.Dropout(0.5),
                       L.Residual(Sequential([L.Conv2D(8, 3, padding=1), L.Tanh()])),
                       L.MaxPool2D(2), L.Flatten(), L.Dense(10)],
                      seed=0, input_shape=(16, 16, 3))


def graph():
    u = hg.Input((16, 16, 3), name="u")
    h = cnn()(u)
    return hg.Model(u, [L.Dense(2, name="a")(h), L.Dense(1, name="b")(h)], seed=0)


def cache_counts(model):
    return {path: len(layer._caches) for path, layer in model.walk()
            if path and not isinstance(layer, Sequential)}


def x_batch():
    return np.random.default_rng(0).standard_normal((8, 16, 16, 3)).astype(np.float32)


@pytest.mark.parametrize("make", [cnn, graph], ids=["sequential", "graph"])
def test_fifty_training_forwards_keep_one_cache_per_layer(make):
    model, x = make(), x_batch()
    model.forward(x, training=True)
    one = cache_counts(model)
    assert one and set(one.values()) == {1}
    for _ in range(49):
        model.forward(x, training=True)
    assert cache_counts(model) == one
    dy = model.forward(x, training=True)
    model.backward(dy if isinstance(dy, np.ndarray) else [np.ones_like(d) for d in dy])
    assert set(cache_counts(model).values()) == {0}


def test_memory_does_not_grow_with_forwards_never_backpropagated():
    model, x = cnn(), x_batch()
    model.forward(x, training=True)
    model.clear_caches()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        model.forward(x, training=True)
        one = tracemalloc.get_traced_memory()[0] - start  # what one forward holds
        for _ in range(49):
            model.forward(x, training=True)
        fifty = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert one > 0 and fifty < 2 * one  # (was 50 times one forward's caches)


def test_an_inference_forward_between_forward_and_backward_releases_nothing():
    model, x = cnn(), x_batch()
    y = model.forward(x, training=True)
    model.predict(x)
    model.forward(x, training=False)
    assert set(cache_counts(model).values()) == {1}
    model.backward(np.ones_like(y))


def test_a_plain_layer_called_twice_by_hand_keeps_both_caches():
    dense, x = L.Dense(3, dtype="float64", seed=0), np.ones((2, 4))
    dense.forward(x)
    dense.forward(2 * x)
    assert len(dense._caches) == 2
    dense.backward(np.ones((2, 3)))
    dense.backward(np.ones((2, 3)))
    np.testing.assert_array_equal(dense.gradients["W"], np.full((4, 3), 6.0))  # 2 * (1 + 2)


def test_the_released_model_says_how_to_use_it_twice():
    model, x = cnn(), x_batch()
    y = model.forward(x, training=True)
    model.forward(x, training=True)
    model.backward(np.ones_like(y))
    with pytest.raises(RuntimeError, match="call a model once on the joined batches, or "
                                           "inside a graph Model"):
        model.backward(np.ones_like(y))
