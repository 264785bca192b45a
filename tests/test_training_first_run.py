"""The first run explains itself: the progress bar's ETA, Keras's loss and metric names
(logged as given; handgrad's cross-entropies take logits, Keras's names with
``from_logits=True``) and channels-first data refused with
the fix."""

from __future__ import annotations

import functools
import io as stdio
import sys

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import losses
from handgrad.io import load, save
from handgrad.model import Sequential
from handgrad.testing import assert_close
from handgrad.training import metrics
from handgrad.training.progress import ProgressBar, format_duration
from test_training_trust import data, mlp

# ---------------------------------------------------------------- 5. progress


class Terminal(stdio.StringIO):
    def isatty(self):
        return True


def test_progress_bar_shows_the_eta_from_the_rate_so_far():
    times = iter([10.0, 12.5, 15.0])  # start, then after steps 1 and 2
    stream = Terminal()
    bar = ProgressBar(5, "Epoch 1/1", stream=stream, clock=lambda: next(times))
    bar.update(1, {"loss": 1.0}, 10.0)
    assert f"ETA {format_duration(2.5 * 4)}" in stream.getvalue()
    bar.update(2, {"loss": 1.0}, 10.0)
    assert stream.getvalue().rstrip().endswith(f"ETA {format_duration(5.0 / 2 * 3)}  10 ex/s")
    bar.finish({"loss": 0.5, "seconds": 6.25})
    last = stream.getvalue().split("\r")[-1]
    assert "ETA" not in last and f"{6.25:.1f}s" in last and last.endswith("\n")
    assert last.rstrip().endswith("10 ex/s")  # blank-padded over the longer ETA line


def test_a_shorter_redraw_blanks_the_rest_of_the_line():
    stream = Terminal()
    bar = ProgressBar(2, "E", stream=stream)
    bar.update(1, {"loss": 1.0, "accuracy": 0.5}, 1.0)
    bar.update(2, {}, 1.0)
    first, second = stream.getvalue().split("\r")[1:]
    assert len(second) == len(first) and second.rstrip() != second


@pytest.mark.parametrize("seconds", [0.2, 42, 187.4, 3723])
def test_format_duration(seconds):
    text = format_duration(seconds)
    parts = [int(p) for p in text.rstrip("s").split(":")]
    assert sum(p * 60 ** i for i, p in enumerate(reversed(parts))) == round(seconds)
    assert text.endswith("s") == (seconds < 59.5)


def test_fit_in_a_terminal_shows_the_eta_then_the_epoch_time(monkeypatch):
    stream = Terminal()
    monkeypatch.setattr(sys, "stdout", stream)
    history = mlp().fit(*data(), epochs=1, batch_size=4, verbose=1)
    lines = stream.getvalue().split("\r")[1:]
    assert len(lines) == 5 and all("ETA" in line for line in lines[:4])
    assert f"{history['seconds'][0]:.1f}s" in lines[-1] and "ETA" not in lines[-1]


# ------------------------------------------------------------ 6. Keras's names


@pytest.mark.parametrize("alias, name", [
    ("mean_squared_error", "mse"), ("mean_absolute_error", "mae"), ("huber_loss", "huber"),
    ("MSE", "mse"), ("smooth_l1_loss", "smooth_l1"),
])
def test_loss_aliases_are_the_same_function(alias, name):
    assert losses.get(alias) is losses.LOSSES[name]


def test_sparse_and_categorical_crossentropy_take_logits_with_from_logits():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 4))
    ids = rng.integers(0, 4, 6)
    one_hot = np.eye(4)[ids]
    expected, dexpected = losses.softmax_cross_entropy(logits, ids)
    for loss, labels in [("sparse_categorical_crossentropy", ids),
                         ("sparse_categorical_crossentropy", ids[:, None]),
                         ("categorical_crossentropy", one_hot),
                         ("categorical_crossentropy", one_hot.astype(np.int64))]:
        value, grad = losses.get(loss)(logits, labels, from_logits=True)
        assert_close(value, expected, terms=4 * 6, what=loss)
        assert_close(grad, dexpected, terms=4, what=loss)
    with pytest.raises(TypeError, match=r"sparse_categorical_crossentropy: 'labels' must be "
                                        r"integer class ids.*categorical_crossentropy"):
        losses.sparse_categorical_crossentropy(logits, one_hot)
    with pytest.raises(ValueError, match=r"categorical_crossentropy: 'labels' must be one-hot.*"
                                         r"sparse_categorical_crossentropy"):
        losses.categorical_crossentropy(logits, ids)


def test_keras_names_train_and_log_under_the_given_name(tmp_path):
    x, y = data(24)
    net = mlp(loss=losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["acc"])
    history = net.fit(x, y[:, None], epochs=2, batch_size=8, validation_split=0.25, rng=0,
                      verbose=0)
    assert {"loss", "acc", "val_loss", "val_acc"} <= set(history.history)
    twin = mlp(metrics=["accuracy"])
    for key, value in net.named_parameters().items():
        twin.named_parameters()[key][...] = value
    ours = net.evaluate(x, y[:, None], return_dict=True)
    theirs = twin.evaluate(x, y, return_dict=True)
    assert ours["loss"] == theirs["loss"] and ours["acc"] == theirs["accuracy"]
    save(net, tmp_path / "m.safetensors")
    loaded = load(tmp_path / "m.safetensors")
    assert loaded.evaluate(x, y[:, None], return_dict=True) == ours


def test_metric_names_and_values():
    rng = np.random.default_rng(1)
    pred = rng.standard_normal((10, 3)).astype(np.float64)
    target = rng.standard_normal((10, 3)).astype(np.float64)
    ids = rng.integers(0, 3, 10)
    assert_close(metrics.METRICS["mae"](pred, target), np.abs(pred - target).mean(), terms=30,
                 scale=np.abs(pred - target).max())
    assert_close(metrics.METRICS["mse"](pred, target), ((pred - target) ** 2).mean(), terms=30,
                 scale=((pred - target) ** 2).max())
    hits = np.argmax(pred, -1) == ids
    for name in ("acc", "accuracy", "sparse_categorical_accuracy", "categorical_accuracy"):
        assert metrics.METRICS[name](pred, ids) == hits.mean()
        assert metrics.METRICS[name](pred, ids[:, None]) == hits.mean()
        assert metrics.METRICS[name](pred, np.eye(3)[ids]) == hits.mean()
    labels = target > 0
    assert metrics.binary_accuracy(pred, labels) == ((pred > 0) == labels).mean()
    with pytest.raises(ValueError, match=r"accuracy: 'y' must have shape \(10,\)"):
        metrics.accuracy(pred, ids[:5])
    with pytest.raises(ValueError, match=r"binary_accuracy: 'y' must have shape \(10, 3\)"):
        metrics.binary_accuracy(pred, ids)


def multi_label(loss, metric_names):
    """A 5-output model compiled with ``loss`` and evaluated on multi-label 0/1 targets."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((200, 6)), (rng.standard_normal((200, 5)) > 0).astype(float)
    net = Sequential([L.Dense(5)], seed=0, input_shape=(6,), dtype="float64")
    if not losses.takes_logits(losses.get(loss)):
        net.add(L.Sigmoid())
    logs = net.compile("sgd", loss, metric_names).evaluate(x, y, return_dict=True)
    return logs, net.predict(x), y


def test_accuracy_with_binary_cross_entropy_is_binary_accuracy_per_output():
    logs, pred, y = multi_label("binary_cross_entropy_with_logits", ["accuracy", "acc"])
    binary = ((pred > 0) == (y > 0.5)).mean()  # one decision per output (multi-label)
    assert logs["accuracy"] == logs["acc"] == binary
    assert binary != (np.argmax(pred, -1) == np.argmax(y, -1)).mean()  # what it was
    default, _, _ = multi_label("binary_cross_entropy_with_logits", None)  # default metrics
    assert default["accuracy"] == binary


@pytest.mark.parametrize("loss", ["binary_cross_entropy", "binary_crossentropy"])
def test_accuracy_of_probabilities_thresholds_at_one_half(loss):
    logs, prob, y = multi_label(loss, ["accuracy", "binary_accuracy"])
    binary = ((prob > 0.5) == (y > 0.5)).mean()
    assert logs["accuracy"] == logs["binary_accuracy"] == binary
    assert binary != ((prob > 0) == (y > 0.5)).mean()  # a logit threshold would say 0.5


def test_accuracy_with_cross_entropy_is_the_arg_max():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((50, 6)), rng.integers(0, 5, 50)
    net = Sequential([L.Dense(5)], seed=0, input_shape=(6,), dtype="float64")
    logs = net.compile("sgd", "cross_entropy").evaluate(x, y, return_dict=True)
    assert logs["accuracy"] == (np.argmax(net.predict(x), -1) == y).mean()
    smoothed = functools.partial(losses.softmax_cross_entropy, label_smoothing=0.1)
    assert net.compile("sgd", smoothed, ["accuracy"]).evaluate(x, y, return_dict=True)[
        "accuracy"] == \
        logs["accuracy"]


@pytest.mark.parametrize("loss", ["mse", "mae", "huber", losses.mse])
def test_accuracy_is_refused_where_the_loss_leaves_it_ambiguous(loss):
    name = loss if isinstance(loss, str) else "mse"
    with pytest.raises(ValueError, match=rf"compile: metric 'accuracy' is ambiguous with loss "
                                         rf"'{name}'.*name the metric: 'binary_accuracy'.*"
                                         rf"'categorical_accuracy'"):
        mlp().compile("sgd", loss, metrics=["accuracy"])
    logs, pred, y = multi_label(loss, ["binary_accuracy"])  # a named metric is taken as is:
    # on the Sigmoid's probabilities, Keras's threshold 0.5
    assert logs["binary_accuracy"] == ((pred > 0.5) == (y > 0.5)).mean()
    assert list(multi_label(loss, None)[0]) == ["loss"]  # the default logs no accuracy


def test_compile_metric_arguments():
    with pytest.raises(TypeError, match=r"compile: 'metrics' must be a list.*'accuracy'"):
        mlp().compile("sgd", "mse", metrics="accuracy")
    with pytest.raises(ValueError, match=r"compile: 'metrics' entries must be one of .*'f1'"):
        mlp().compile("sgd", "mse", metrics=["f1"])


@pytest.mark.parametrize("last, loss", [
    (L.Softmax(), "softmax_cross_entropy"), (L.Softmax(), "cross_entropy"),
    (L.Sigmoid(), "binary_cross_entropy_with_logits"),
])
def test_a_probability_output_is_refused_by_a_logits_loss(last, loss):
    net = Sequential([L.Dense(3), last], input_shape=(2,))
    with pytest.raises(ValueError, match=rf"compile: loss '{loss}' takes logits, but the model "
                                         rf"ends with {type(last).__name__}"):
        net.compile("sgd", loss)
    assert net.optimizer is None
    net.compile("sgd", "mse", metrics=())  # probabilities regressed on targets are fine


# ------------------------------------------------------------ 7. channels-first


def conv_net(layer, **kwargs):
    return Sequential([layer, L.ReLU(), L.Flatten(), L.Dense(2)], seed=0, **kwargs)


@pytest.mark.parametrize("make, shape", [
    (lambda: L.Conv2D(4, 3), (6, 1, 12, 12)),
    (lambda: L.Conv2D(4, 3), (6, 3, 16, 16)),
    (lambda: L.MaxPool2D(2), (6, 4, 8, 8)),
    (lambda: L.Conv1D(4, 3), (6, 1, 40)),
    (lambda: Sequential([L.Conv1D(4, 3)]), (6, 2, 40)),
])
@pytest.mark.parametrize("method", ["fit", "evaluate", "predict"])
def test_channels_first_data_is_refused_with_the_fix(make, shape, method):
    net = conv_net(make()).compile("sgd", "cross_entropy")
    x = np.zeros(shape, np.float32)
    args = (x,) if method == "predict" else (x, np.zeros(shape[0], np.int64))
    moved = (shape[0], *shape[2:], shape[1])
    with pytest.raises(ValueError, match=rf"{method}: 'x' of shape .* looks channels-first.*"
                                         rf"np\.moveaxis\(x, 1, -1\) \(shape "
                                         rf"{re_tuple(moved)}\).*input_shape="):
        getattr(net, method)(*args)
    assert not net.built


def re_tuple(shape):
    return r"\(" + ", ".join(map(str, shape)) + r"\)"


@pytest.mark.parametrize("make, shape", [
    (lambda: L.Conv1D(4, 3), (6, 40, 1)),     # MNIST-1D
    (lambda: L.Conv2D(4, 3), (6, 8, 8, 1)),   # digits
    (lambda: L.Conv2D(4, 3), (6, 32, 32, 3)),  # RGB images
    (lambda: L.Conv2D(4, 1), (6, 4, 4, 64)),  # small feature maps, many channels
    (lambda: L.GRU(4), (6, 3, 16)),           # short sequences
    (lambda: L.Dense(4), (6, 2, 16)),
])
def test_channels_last_data_trains(make, shape):
    net = conv_net(make()).compile("sgd", "cross_entropy")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    net.fit(x, np.arange(shape[0]) % 2, epochs=1, batch_size=3, verbose=0)
    assert net.optimizer.iterations == 2 and net.input_shape == shape[1:]


def test_an_explicit_input_shape_confirms_an_unusual_layout():
    net = conv_net(L.Conv2D(4, 1), input_shape=(2, 16, 16)).compile("sgd", "cross_entropy")
    net.fit(np.zeros((4, 2, 16, 16), np.float32), np.zeros(4, np.int64), verbose=0)
    assert net.optimizer.iterations == 1


def test_a_built_model_names_its_expected_shape_for_transposed_data():
    x, y = np.zeros((4, 12, 12, 1), np.float32), np.zeros(4, np.int64)
    net = conv_net(L.Conv2D(4, 3), input_shape=(12, 12, 1)).compile("sgd", "cross_entropy")
    with pytest.raises(ValueError, match=r"fit: 'x_val' of shape \(4, 1, 12, 12\) looks "
                                         r"channels-first.*expects per-example shape "
                                         r"\(12, 12, 1\)"):
        net.fit(x, y, validation_data=(np.moveaxis(x, -1, 1), y), verbose=0)
    with pytest.raises(ValueError, match=r"predict: 'x' .* looks channels-first"):
        net.predict(np.moveaxis(x, -1, 1))
    assert net.optimizer.iterations == 0
