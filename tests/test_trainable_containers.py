"""A container made around a frozen layer leaves it frozen.

Keras semantics relied on: ``trainable`` is the layer's own setting; a container's
constructor does not rewrite its children's (wrapping ``base_model`` with
``trainable = False`` in a model, a wrapper or a block keeps it frozen); assigning
``container.trainable`` sets it on every child. handgrad also freezes the children of a
container given ``trainable=False``.
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.model import Sequential


def frozen_dense(units=3):
    layer = L.Dense(units)
    layer.trainable = False
    return layer


def frozen_base():
    base = Sequential([L.Dense(5, input_shape=(4,)), L.BatchNormalization()], name="base")
    base.trainable = False
    return base


CONTAINERS = {
    "Residual": lambda: L.Residual(frozen_dense(4)),
    "TimeDistributed": lambda: L.TimeDistributed(frozen_dense()),
    "Sequential": lambda: Sequential([frozen_base(), L.Dense(2)]),
    "Model": lambda: (lambda x: hg.Model(x, L.Dense(2)(frozen_base()(x))))(hg.Input((4,))),
}


def frozen_children(container):
    return [path for path, layer in container.walk() if path and not layer.trainable]


@pytest.mark.parametrize("kind", sorted(CONTAINERS))
def test_a_container_keeps_a_frozen_child_frozen(kind):
    container = CONTAINERS[kind]()
    frozen = frozen_children(container)
    assert frozen, kind
    assert container.trainable
    config = container.get_config()
    assert frozen_children(type(container).from_config(config)) == frozen


@pytest.mark.parametrize("kind", sorted(CONTAINERS))
def test_trainable_false_freezes_and_assignment_sets_every_child(kind):
    container = CONTAINERS[kind]()
    container.trainable = True
    assert not frozen_children(container)
    container.trainable = False
    assert all(not layer.trainable for _, layer in container.walk())


def test_a_container_made_frozen_freezes_its_children():
    block = L.Residual(L.Dense(4), trainable=False)
    assert not block.block.trainable
    wrapped = L.TimeDistributed(L.Dense(3), trainable=False)
    assert not wrapped.layer.trainable


def test_training_a_model_around_a_frozen_wrapper_leaves_the_wrapped_weights():
    dense = frozen_dense(3)
    x = hg.Input((5, 4))
    model = hg.Model(x, L.TimeDistributed(dense)(x), seed=0)
    before = {k: v.copy() for k, v in dense.parameters.items()}
    model.compile("sgd", "mse")
    rng = np.random.default_rng(0)
    model.fit(rng.standard_normal((8, 5, 4)).astype(np.float32),
              rng.standard_normal((8, 5, 3)).astype(np.float32), epochs=1, verbose=0)
    assert all(np.array_equal(v, dense.parameters[k]) for k, v in before.items())
