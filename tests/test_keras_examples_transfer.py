"""Keras's guide "Transfer learning & fine-tuning" (keras.io/guides/transfer_learning),
its end-to-end workflow line for line with handgrad's pieces. The pretrained base is a
small conv net with BatchNormalization trained here on the digits 0-4 (Keras's: Xception
on ImageNet); the new task is the digits 5-9.

Keras semantics the guide relies on, checked here:
- ``base_model.trainable = False`` freezes every weight of the base: training the model
  leaves them bit-identical, and only the new head's kernel and bias are trainable
  (``len(model.trainable_weights) == 2``; the base's weights and its BatchNormalization
  moving statistics are ``non_trainable_weights``);
- a frozen BatchNormalization runs in inference mode (its moving mean and variance are
  not updated);
- ``x = base_model(inputs, training=False)`` keeps the base's BatchNormalization in
  inference mode even after ``base_model.trainable = True``: fine-tuning then trains the
  base's weights (gamma and beta included) with a low learning rate (``Adam(1e-5)``,
  after ``compile`` again), and the moving statistics stay as they were.
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.optimizers import Adam


def make_base():
    return Sequential([
        L.Conv2D(8, 3, padding="same", activation="relu", input_shape=(8, 8, 1)),
        L.BatchNormalization(momentum=0.9),  # Keras: 0.99, slow for a short pretraining
        L.MaxPooling2D(2),
        L.Conv2D(16, 3, padding="same", activation="relu"),
        L.BatchNormalization(momentum=0.9),  # Keras: 0.99, slow for a short pretraining
        L.GlobalAveragePooling2D(),
    ], name="base", seed=0)


def arrays(layer):
    return {**{k: v.copy() for k, v in layer.named_parameters().items()},
            **{k: v.copy() for k, v in layer.named_buffers().items()}}


@pytest.fixture(scope="module")
def tasks():
    pytest.importorskip("sklearn")
    from handgrad.data import load_digits

    d = load_digits()

    def split(x, y, low):
        keep = (y >= low) & (y < low + 5)
        return x[keep], y[keep] - low

    return ({"train": split(d.x_train, d.y_train, 0), "test": split(d.x_test, d.y_test, 0)},
            {"train": split(d.x_train, d.y_train, 5), "test": split(d.x_test, d.y_test, 5)})


def test_frozen_base_then_fine_tuning(tasks):
    pretrain, task = tasks
    base_model = make_base()
    source = Sequential([base_model, L.Dense(5)], seed=1)
    source.compile(Adam(learning_rate=3e-3), "cross_entropy")
    source.fit(*pretrain["train"], epochs=4, batch_size=32, verbose=0, rng=0)

    base_model.trainable = False
    inputs = hg.Input((8, 8, 1))
    x = base_model(inputs, training=False)
    outputs = L.Dense(5)(x)
    model = hg.Model(inputs, outputs, seed=2)
    assert len(model.trainable_weights) == 2  # the head's kernel and bias
    assert len(model.non_trainable_weights) == len(base_model.weights)

    frozen = arrays(base_model)
    model.compile(optimizer=Adam(1e-2), loss="cross_entropy", metrics=["accuracy"])
    model.fit(*task["train"], epochs=6, batch_size=32, verbose=0, rng=0)
    assert all(np.array_equal(v, arrays(base_model)[k]) for k, v in frozen.items())
    accuracy = model.evaluate(*task["test"], return_dict=True)["accuracy"]
    assert accuracy > 0.6, accuracy  # chance is 0.2: the pretrained features transfer

    base_model.trainable = True
    moving = len(base_model.named_buffers())
    assert len(model.trainable_weights) == len(model.weights) - moving
    model.compile(optimizer=Adam(1e-5), loss="cross_entropy", metrics=["accuracy"])
    model.fit(*task["train"], epochs=1, batch_size=32, verbose=0, rng=0)
    tuned = arrays(base_model)
    statistics = [k for k in frozen if "running" in k]
    assert statistics and all(np.array_equal(frozen[k], tuned[k]) for k in statistics)
    weights = [k for k in frozen if k not in statistics]
    assert all(not np.array_equal(frozen[k], tuned[k]) for k in weights), [
        k for k in weights if np.array_equal(frozen[k], tuned[k])]
    step = max(np.abs(frozen[k] - tuned[k]).max() for k in weights)
    assert step < 1e-5 * 30  # Adam moves each weight at most about lr per step (24 steps)


def test_a_frozen_batch_norm_keeps_its_statistics_in_a_training_forward():
    """Keras: a BatchNormalization with trainable=False runs in inference mode even in
    training, so its output is the moving-statistics normalization."""
    bn = L.BatchNormalization()
    x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32) * 3 + 1
    bn.build((4,))
    bn.trainable = False
    before = {k: v.copy() for k, v in bn.buffers.items()}
    out = bn.forward(x, training=True)
    assert all(np.array_equal(v, bn.buffers[k]) for k, v in before.items())
    np.testing.assert_array_equal(out, bn.forward(x, training=False))
