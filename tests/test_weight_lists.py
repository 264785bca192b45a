"""Keras's ``weights``, ``trainable_weights`` and ``non_trainable_weights``.

Keras semantics relied on (its transfer-learning guide): a built Dense has 2 weights,
both trainable; a BatchNormalization has 4: gamma and beta trainable, the moving mean
and variance non-trainable; a frozen layer's weights are all non-trainable; the lists
hold the layer's variables themselves (not copies), ``weights`` in ``get_weights``
order, and a model's lists gather its layers'.
"""

from __future__ import annotations

import numpy as np

import handgrad as hg
from handgrad import layers as L
from handgrad.model import Sequential


def counts(layer):
    return (len(layer.weights), len(layer.trainable_weights),
            len(layer.non_trainable_weights))


def test_the_guides_single_layer_counts():
    dense = L.Dense(3).build((4,))
    assert counts(dense) == (2, 2, 0)
    bn = L.BatchNormalization().build((4,))
    assert counts(bn) == (4, 2, 2)
    assert bn.trainable_weights[0] is bn.parameters["gamma"]
    assert bn.non_trainable_weights[0] is bn.buffers["running_mean"]
    dense.trainable = False
    assert counts(dense) == (2, 0, 2)
    assert L.Dense(3).weights == []  # unbuilt: no weights yet


def test_a_frozen_base_and_a_trainable_head():
    base = Sequential([L.Dense(5, input_shape=(4,)), L.BatchNormalization(),
                       L.Dense(6)], name="base")
    base.trainable = False
    x = hg.Input((4,))
    head = L.Dense(2, name="head")
    model = hg.Model(x, head(base(x, training=False)), seed=0)
    assert counts(model) == (2 + 4 + 2 + 2, 2, 2 + 4 + 2)
    assert model.trainable_weights[0] is head.parameters["W"]
    assert model.trainable_weights[1] is head.parameters["b"]
    assert all(any(w is v for v in model.non_trainable_weights) for w in base.weights)
    # weights: get_weights' order, the arrays themselves
    assert len(model.weights) == len(model.get_weights())
    assert all(np.array_equal(w, v) for w, v in zip(model.weights, model.get_weights()))
    model.weights[0][...] = 7.0
    assert np.all(base.layers[0].parameters["W"] == 7.0)

    base.trainable = True  # fine-tuning: only the running statistics stay non-trainable
    assert counts(model) == (10, 8, 2)
    assert counts(base) == (8, 6, 2)
