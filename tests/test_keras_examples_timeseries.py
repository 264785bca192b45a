"""Keras's "Timeseries classification from scratch" example
(keras.io/examples/timeseries/timeseries_classification_from_scratch), line for line, with
``class_weight`` on a generated imbalanced data set: series of 32 standard-normal steps, 10%
of them (class 1) carrying a half-period sine bump of height 1.5 at a random place.

Keras semantics relied on (Keras is not a dependency; each is checked below):

- ``class_weight={c: w}`` gives each training example its class's weight, and the batch loss
  is Keras's "sum_over_batch_size": ``sum_i w_i l_i / B`` (B the batch size, NOT the sum
  of the weights); the validation loss is not weighted;
- ``"sparse_categorical_crossentropy"`` takes probabilities and integer labels
  (``-log p_y`` with p clipped to [1e-7, 1 - 1e-7]);
- ``ModelCheckpoint("best_model", save_best_only=True, monitor="val_loss")`` writes only
  when val_loss improves, so the file holds the weights of the epoch of least val_loss;
- ``ReduceLROnPlateau(factor=0.5, patience=p, min_lr=1e-4)``: after ``p`` epochs in a row
  without ``val_loss < best - min_delta`` (min_delta 1e-4), ``lr = max(lr * factor,
  min_lr)``; ``EarlyStopping(patience=q)`` stops after ``q`` epochs without improvement;
- ``validation_split=0.2`` validates on the last 20% of the training arrays.

Differences from the Keras script, written down:

- Keras's ReduceLROnPlateau rule is chosen in handgrad by passing ``min_delta`` (without
  it, torch's relative threshold applies);
- handgrad's EarlyStopping has no ``verbose`` argument (the script passes ``verbose=1``);
- the checkpoint is a ``.safetensors`` file (Keras writes ``best_model.keras``);
- sizes: 16 filters (Keras 64), 20 epochs (Keras 500) with patiences 3 and 6 (Keras 20
  and 50), seeds fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers
from handgrad.testing import assert_close, tolerance
from handgrad.training import EarlyStopping, ModelCheckpoint, ReduceLROnPlateau

num_classes = 2
CLASS_WEIGHT = {0: 1.0, 1: 9.0}  # about the inverse class frequencies (90% / 10%)
EPOCHS, LR_PATIENCE, STOP_PATIENCE = 20, 3, 6


def series(n, seed, length=32, height=1.5):
    """(n, length, 1) float32 series and (n,) int64 labels, class 1 about 10%."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.1).astype(np.int64)
    t = np.arange(length)[None] - rng.integers(0, length - 16, n)[:, None]
    bump = np.where((t >= 0) & (t < 16), np.sin(np.pi * t / 8), 0.0)
    x = rng.standard_normal((n, length)) + height * y[:, None] * bump
    return x.astype(np.float32)[..., None], y


def make_model(input_shape):
    input_layer = hg.Input(input_shape)

    conv1 = layers.Conv1D(filters=16, kernel_size=3, padding="same")(input_layer)
    conv1 = layers.BatchNormalization()(conv1)
    conv1 = layers.ReLU()(conv1)

    conv2 = layers.Conv1D(filters=16, kernel_size=3, padding="same")(conv1)
    conv2 = layers.BatchNormalization()(conv2)
    conv2 = layers.ReLU()(conv2)

    conv3 = layers.Conv1D(filters=16, kernel_size=3, padding="same")(conv2)
    conv3 = layers.BatchNormalization()(conv3)
    conv3 = layers.ReLU()(conv3)

    gap = layers.GlobalAveragePooling1D()(conv3)

    output_layer = layers.Dense(num_classes, activation="softmax")(gap)

    return hg.Model(inputs=input_layer, outputs=output_layer, seed=0)


def train(path, class_weight):
    x_train, y_train = series(600, seed=0)
    model = make_model(input_shape=x_train.shape[1:])
    callbacks = [
        ModelCheckpoint(str(path), save_best_only=True, monitor="val_loss"),
        ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=LR_PATIENCE, min_lr=0.0001,
                          min_delta=1e-4),
        EarlyStopping(monitor="val_loss", patience=STOP_PATIENCE),
    ]
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["sparse_categorical_accuracy"])
    history = model.fit(x_train, y_train, batch_size=32, epochs=EPOCHS, callbacks=callbacks,
                        validation_split=0.2, verbose=0, rng=0, class_weight=class_weight)
    return model, history.history


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timeseries")
    return {name: (*train(folder / f"best_{name}.safetensors", weights),
                   folder / f"best_{name}.safetensors")
            for name, weights in (("plain", None), ("weighted", CLASS_WEIGHT))}


def recall(model, x, y, label=1):
    return float(np.mean(model.predict(x).argmax(axis=1)[y == label] == label))


def test_class_weight_loss_is_weighted_sum_over_batch_size():
    x, y = series(64, seed=2)
    assert 0 < y.sum() < len(y)
    probe, trained = make_model(x.shape[1:]), make_model(x.shape[1:])
    probs = probe(x, training=True)  # the training-mode forward (batch statistics)
    losses = -np.log(np.clip(probs[np.arange(len(y)), y].astype(np.float64), 1e-7, 1 - 1e-7))
    w = np.array([CLASS_WEIGHT[int(c)] for c in y])
    trained.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    logged = trained.fit(x, y, batch_size=len(x), epochs=1, verbose=0, rng=0,
                         class_weight=CLASS_WEIGHT).history["loss"][0]
    keras = np.sum(w * losses) / len(y)
    assert_close(logged, keras, dtype=np.float32, terms=len(y), scale=np.sum(w * losses) / len(y),
                 what="weighted batch loss")
    assert abs(keras - np.sum(w * losses) / np.sum(w)) > 0.1  # not the weights' mean


def test_class_weight_raises_the_minority_recall(runs):
    x_test, y_test = series(1000, seed=1)
    plain, weighted = runs["plain"][0], runs["weighted"][0]
    plain_recall, weighted_recall = recall(plain, x_test, y_test), recall(weighted, x_test,
                                                                          y_test)
    assert weighted_recall >= plain_recall + 0.3, (plain_recall, weighted_recall)
    # both still classify most of the (mostly majority) test series right
    for model in (plain, weighted):
        assert np.mean(model.predict(x_test).argmax(axis=1) == y_test) >= 0.9


def test_validation_loss_is_not_weighted(runs):
    x_train, y_train = series(600, seed=0)
    split_at = math.floor(len(x_train) * 0.8)
    model, history, _ = runs["weighted"]
    loss, accuracy = model.evaluate(x_train[split_at:], y_train[split_at:], verbose=0)
    assert_close(history["val_loss"][-1], loss, dtype=np.float32, terms=len(x_train),
                 what="val_loss")
    assert history["val_sparse_categorical_accuracy"][-1] == accuracy


@pytest.mark.parametrize("name", ["plain", "weighted"])
def test_checkpoint_reloads_the_best_val_loss(runs, name):
    x_train, y_train = series(600, seed=0)
    split_at = math.floor(len(x_train) * 0.8)
    _, history, path = runs[name]
    best = hg.load_model(path)
    best_loss, _ = best.evaluate(x_train[split_at:], y_train[split_at:], verbose=0)
    bound = tolerance(np.float32, len(x_train), min(history["val_loss"]))
    assert_close(best_loss, min(history["val_loss"]), dtype=np.float32, terms=len(x_train),
                 what="reloaded val_loss")
    if int(np.argmin(history["val_loss"])) != len(history["val_loss"]) - 1:
        # the best epoch was not the last: the file is not the final model (its loss is
        # further from the final epoch's than the rounding the check above allows)
        assert abs(best_loss - history["val_loss"][-1]) > bound


@pytest.mark.parametrize("name", ["plain", "weighted"])
def test_plateau_and_early_stopping_follow_keras_rules(runs, name):
    history = runs[name][1]
    lr, best, wait, expected_lrs = 1e-3, math.inf, 0, []
    stop_best, stop_wait, stopped = math.inf, 0, None
    for epoch, value in enumerate(history["val_loss"]):
        expected_lrs.append(lr)  # the lr trained with during this epoch
        if value < best - 1e-4:  # ReduceLROnPlateau: Keras's min_delta 1e-4
            best, wait = value, 0
        else:
            wait += 1
            if wait >= LR_PATIENCE and lr > 1e-4:
                lr, wait = max(lr * 0.5, 1e-4), 0
        if value < stop_best:  # EarlyStopping: Keras's min_delta 0
            stop_best, stop_wait = value, 0
        else:
            stop_wait += 1
            if stop_wait >= STOP_PATIENCE:
                stopped = epoch
                break
    assert history["lr"] == pytest.approx(expected_lrs, rel=1e-12)
    assert len(history["val_loss"]) == (EPOCHS if stopped is None else stopped + 1)
