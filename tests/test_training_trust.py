"""Trust in fit/evaluate/predict: a NaN loss stops training without touching the weights,
empty and malformed data get clear errors, val_* monitors need validation data when fit
starts, and validation_split (the rest is in test_training_first_run.py)."""

from __future__ import annotations

import io as stdio
import math

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import losses, optimizers
from handgrad.inspect import anomaly as debug
from handgrad.model import Sequential
from handgrad.training import NonFiniteLossError
from handgrad.training.callbacks import Callback, EarlyStopping, ModelCheckpoint, TerminateOnNaN


def data(n=16, features=3, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype(dtype)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int64)


def mlp(features=3, outputs=2, dtype=None, loss="cross_entropy", metrics=None):
    net = Sequential([L.Dense(8), L.ReLU(), L.Dense(outputs)], seed=0, dtype=dtype,
                     input_shape=(features,))
    return net.compile("sgd", loss, metrics=metrics)


def weights(net):
    return {k: v.copy() for k, v in net.named_parameters().items()}


def same_weights(net, snapshot):
    return all(np.array_equal(v, snapshot[k]) for k, v in net.named_parameters().items())


class Snapshots(Callback):
    """The weights after every step (``before[i]`` is the state before step i)."""

    def on_train_begin(self, logs):
        self.before = [weights(self.model)]

    def on_train_batch_end(self, step, logs):
        self.before.append(weights(self.model))


def nan_on_call(k, value=math.nan):
    """A cross-entropy whose k-th call (1-based) reports ``value`` as its loss."""
    calls = []

    def loss(pred, target):
        calls.append(1)
        result, grad = losses.softmax_cross_entropy(pred, target)
        return (value if len(calls) == k else result), grad

    return loss, calls


# ------------------------------------------------------------- 1. non-finite loss


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_fit_raises_on_a_non_finite_loss_before_its_update(value):
    loss, calls = nan_on_call(6, value)
    x, y = data()
    net = mlp(loss=loss)
    snaps = Snapshots()
    with pytest.raises(NonFiniteLossError, match=r"epoch 2, step 2 of 4") as error:
        net.fit(x, y, epochs=5, batch_size=4, callbacks=[snaps], verbose=0)
    assert isinstance(error.value, FloatingPointError)
    message = str(error.value)
    assert "handgrad.inspect.detect_anomaly" in message and hasattr(debug, "detect_anomaly")
    assert "update was not applied" in message and "inputs are finite" in message
    assert "on_nonfinite='stop'" in message and "on_nonfinite='ignore'" in message
    assert (error.value.epoch, error.value.step) == (2, 2)
    assert error.value.loss == value or (math.isnan(value) and math.isnan(error.value.loss))
    assert len(calls) == 6 and net.optimizer.iterations == 5
    assert len(snaps.before) == 6 and same_weights(net, snaps.before[5])
    assert all(not layer._caches for layer in net)


def test_the_error_says_when_the_inputs_already_hold_nan():
    x, y = data()
    x[5, 1] = np.nan
    net = mlp()
    before = weights(net)
    with pytest.raises(NonFiniteLossError, match="inputs already hold NaN or inf"):
        net.fit(x, y, epochs=1, batch_size=16, verbose=0)
    assert same_weights(net, before)


def test_a_diverging_run_keeps_the_weights_of_its_last_finite_step():
    x, y = data()
    net = Sequential([L.Dense(8), L.ReLU(), L.Dense(2)], seed=0, input_shape=(3,))
    net.compile(optimizers.SGD(lr=1e30), "cross_entropy")
    snaps = Snapshots()
    with np.errstate(over="ignore", invalid="ignore"), \
            pytest.raises(NonFiniteLossError, match=r"fit: the loss is .* at epoch \d+, step"):
        net.fit(x * 1e3, y, epochs=20, batch_size=4, rng=0, callbacks=[snaps], verbose=0)
    assert net.optimizer.iterations == len(snaps.before) - 1
    assert same_weights(net, snaps.before[-1])


def test_train_step_alone_raises_and_can_go_on():
    loss, _ = nan_on_call(1)
    x, y = data(8)
    net = mlp(loss=loss)
    before = weights(net)
    with pytest.raises(NonFiniteLossError, match="train_step: the loss is nan"):
        net.train_step(x, y)
    assert same_weights(net, before) and net.optimizer.iterations == 0
    assert all(not layer._caches for layer in net)
    assert math.isfinite(net.train_step(x, y)["loss"])  # no stale cache in the way
    assert net.optimizer.iterations == 1


def test_on_nonfinite_stop_ends_training_quietly_without_the_update(capsys):
    x, y = data()
    snaps = Snapshots()
    loss, _ = nan_on_call(7)  # call 5 is the validation of epoch 1
    net = mlp(loss=loss)
    history = net.fit(x, y, epochs=5, batch_size=4, callbacks=[snaps], verbose=1,
                      validation_data=(x, y), on_nonfinite="stop")
    assert history.epoch == [0, 1]
    assert math.isnan(history["loss"][1]) and len(history["val_loss"]) == 1
    assert net.optimizer.iterations == 5 and same_weights(net, snaps.before[5])
    err = capsys.readouterr().err
    assert "epoch 2, step 2 of 4" in err and "on_nonfinite='stop'" in err


def test_on_nonfinite_ignore_trains_on():
    loss, calls = nan_on_call(3)
    x, y = data()
    history = mlp(loss=loss).fit(x, y, epochs=2, batch_size=4, verbose=0,
                                 on_nonfinite="ignore")
    assert history.epoch == [0, 1] and len(calls) == 8
    assert math.isnan(history["loss"][0]) and math.isfinite(history["loss"][1])


def test_terminate_on_nan_keeps_its_keras_behaviour():
    loss, _ = nan_on_call(2)
    x, y = data()
    stop = TerminateOnNaN(stream=stdio.StringIO())
    net = mlp(loss=loss)
    history = net.fit(x, y, epochs=3, batch_size=4, callbacks=[stop], verbose=0)
    assert history.epoch == [0] and net.optimizer.iterations == 2  # update applied
    assert "step 2" in stop.message
    loss, _ = nan_on_call(2)
    with pytest.raises(NonFiniteLossError):  # an explicit policy wins
        mlp(loss=loss).fit(x, y, epochs=3, batch_size=4, callbacks=[TerminateOnNaN()],
                           verbose=0, on_nonfinite="raise")


def test_a_custom_train_step_is_checked_after_it_ran():
    x, y = data(8)
    net = mlp()
    net.train_step = lambda xb, yb: {"loss": math.nan}
    with pytest.raises(NonFiniteLossError, match="custom train_step already applied"):
        net.fit(x, y, epochs=1, batch_size=4, verbose=0)


def test_on_nonfinite_is_validated():
    x, y = data(8)
    with pytest.raises(ValueError, match=r"fit: 'on_nonfinite' must be one of .*'warn'"):
        mlp().fit(x, y, verbose=0, on_nonfinite="warn")


# ----------------------------------------------------------------- 2. the data


def test_predict_on_zero_examples_gives_an_empty_array():
    net = mlp(outputs=5)
    out = net.predict(np.zeros((0, 3), np.float32))
    assert out.shape == (0, 5) and out.dtype == np.float32
    double = mlp(outputs=4, dtype="float64")
    assert double.predict(np.zeros((0, 3))).dtype == np.float64
    conv = Sequential([L.Conv2D(4, 3), L.Flatten(), L.Dense(7)], seed=0)  # not built
    out = conv.predict(np.zeros((0, 8, 8, 1), np.float32))
    assert out.shape == (0, 7) and conv.built and conv.input_shape == (8, 8, 1)


def test_predict_on_zero_examples_checks_the_dtype_like_any_input():
    with pytest.raises(TypeError, match="dtype"):
        mlp().predict(np.zeros((0, 3), np.float64))


@pytest.mark.parametrize("method", ["fit", "evaluate"])
def test_fit_and_evaluate_refuse_zero_examples(method):
    net = mlp()
    before = weights(net)
    with pytest.raises(ValueError, match=rf"{method}: 'x' has no examples \(shape \(0, 3\)\)"):
        getattr(net, method)(np.zeros((0, 3), np.float32), np.zeros(0, np.int64))
    assert same_weights(net, before) and net.optimizer.iterations == 0


@pytest.mark.parametrize("method", ["fit", "evaluate"])
@pytest.mark.parametrize("x, y, error, match", [
    (None, np.zeros(4, np.int64), TypeError, r"'x' must be an array of inputs; received None"),
    ("abc", np.zeros(4, np.int64), TypeError, r"'x' must be an array of inputs; received 'abc'"),
    ({"a": 1}, np.zeros(4, np.int64), TypeError, r"'x' must be an array.*dict"),
    (np.zeros((4, 3), np.float32), None, TypeError, r"'y' must be an array of targets"),
    (np.zeros((4, 3), np.float32), np.zeros(3, np.int64), ValueError,
     r"'x' and 'y' must have the same number of examples; received 4 in 'x' and 3 in 'y'"),
    ([[1.0, 2.0, 3.0], [1.0]], np.zeros(2, np.int64), ValueError, "'x' is not a rectangular"),
    (np.array([["a", "b", "c"]]), np.zeros(1, np.int64), TypeError,
     "'x' must be a numeric array"),
    (np.float32(1.0), np.zeros(1, np.int64), ValueError, "'x' must have a leading example"),
    (np.zeros((4, 3, 1), np.float32), np.zeros(4, np.int64), ValueError,
     r"'x' must have shape \(N, 3\) \(the model's input_shape \(3,\)"),
])
def test_bad_data_is_named(method, x, y, error, match):
    net = mlp()
    with pytest.raises(error, match=f"{method}: {match}"):
        getattr(net, method)(x, y)
    assert net.optimizer.iterations == 0


@pytest.mark.parametrize("dtype, match", [
    (np.float64, "input dtype float64 does not match the layer's float32 parameters; cast"),
    (np.int64, "'x' must have dtype float32 or float64; received dtype int64"),
])
def test_a_wrong_input_dtype_is_refused_before_any_update(dtype, match):
    x, y = data(8)
    net = mlp()
    with pytest.raises(TypeError, match=match):
        net.fit(x.astype(dtype), y, verbose=0)
    assert net.optimizer.iterations == 0 and all(not layer._caches for layer in net)


def test_predict_names_its_bad_arguments():
    net = mlp()
    with pytest.raises(TypeError, match="predict: 'x' must be an array"):
        net.predict(None)
    with pytest.raises(ValueError, match=r"predict: 'batch_size' must be an int >= 1"):
        net.predict(np.zeros((2, 3), np.float32), batch_size=0)
    with pytest.raises(ValueError, match=r"evaluate: 'batch_size'"):
        net.evaluate(*data(4), batch_size=-1)


def test_a_missing_channel_axis_gets_a_hint():
    net = Sequential([L.Conv2D(2, 3), L.Flatten(), L.Dense(2)], seed=0, input_shape=(8, 8, 1))
    with pytest.raises(ValueError, match=r"predict: .*\(N, 8, 8, 1\).*x\[\.\.\., None\]"):
        net.predict(np.zeros((2, 8, 8), np.float32))


@pytest.mark.parametrize("validation_data, match", [
    ((np.zeros((0, 3), np.float32), np.zeros(0, np.int64)), "'validation_data' has no examples"),
    ((np.zeros((2, 3, 1), np.float32), np.zeros(2, np.int64)), "'validation_data' inputs"),
])
def test_validation_data_is_checked_before_training(validation_data, match):
    net = mlp()
    with pytest.raises(ValueError, match=f"fit: {match}"):
        net.fit(*data(8), validation_data=validation_data, verbose=0)
    assert net.optimizer.iterations == 0


# ------------------------------------------------------------ 3. val_* monitors


@pytest.mark.parametrize("callback", [
    lambda: EarlyStopping(),
    lambda: EarlyStopping("val_accuracy"),
    lambda: ModelCheckpoint("never-written.safetensors", save_best_only=True),
])
def test_a_val_monitor_without_validation_data_fails_when_fit_starts(callback, tmp_path):
    net = mlp()
    with pytest.raises(ValueError, match=r"monitor 'val_\w+' needs validation data.*"
                                         r"validation_split=0\.2.*or monitor '\w+'"):
        net.fit(*data(), epochs=2, callbacks=[callback()], verbose=0)
    assert net.optimizer.iterations == 0 and not list(tmp_path.iterdir())


def test_a_checkpoint_of_every_epoch_needs_no_validation(tmp_path):
    path = tmp_path / "last.safetensors"
    mlp().fit(*data(), epochs=1, callbacks=[ModelCheckpoint(path)], verbose=0)
    assert path.exists()


def test_a_val_monitor_of_an_unknown_quantity_fails_when_fit_starts():
    x, y = data()
    net = mlp()
    with pytest.raises(ValueError, match=r"monitor 'val_acc' will not be in the epoch logs.*"
                                         r"'val_accuracy'"):
        net.fit(x, y, callbacks=[EarlyStopping("val_acc")], validation_data=(x, y), verbose=0)
    assert net.optimizer.iterations == 0
    acc = mlp(metrics=["acc"])  # the name the user gave is the name logged
    stop = EarlyStopping("val_acc", patience=0)
    history = acc.fit(x, y, epochs=2, callbacks=[stop], validation_split=0.25, verbose=0)
    assert stop.best == max(history["val_acc"])


def test_an_unknown_monitor_is_a_value_error_after_the_first_epoch():
    with pytest.raises(ValueError, match=r"monitor 'los' is not in the epoch logs"):
        mlp().fit(*data(), epochs=3, callbacks=[EarlyStopping("los")], verbose=0)


# ---------------------------------------------------------- 4. validation_split


@pytest.mark.parametrize("n, split", [(10, 0.2), (10, 0.25), (7, 0.5), (3, 0.1)])
def test_validation_split_holds_out_the_last_examples_before_shuffling(n, split):
    x, y = data(n)
    cut = math.floor(n * (1 - split))  # Keras's rule
    seen = []
    net = mlp()
    step = net.train_step
    net.train_step = lambda xb, yb: seen.append(xb.copy()) or step(xb, yb)
    history = net.fit(x, y, epochs=2, batch_size=2, rng=0, validation_split=split, verbose=0)
    trained = np.concatenate(seen[: len(seen) // 2])
    assert sorted(map(tuple, trained)) == sorted(map(tuple, x[:cut]))
    loss, accuracy = net.evaluate(x[cut:], y[cut:])
    assert history["val_loss"][-1] == loss and history["val_accuracy"][-1] == accuracy


@pytest.mark.parametrize("split", [None, 0, 0.0])
def test_a_zero_validation_split_means_none(split):
    history = mlp().fit(*data(), validation_split=split, verbose=0)
    assert "val_loss" not in history.history


@pytest.mark.parametrize("kwargs, error, match", [
    ({"validation_split": -0.1}, ValueError, r"'validation_split' must be .*received -0\.1"),
    ({"validation_split": 1.0}, ValueError, r"'validation_split' must be .*< 1"),
    ({"validation_split": math.nan}, ValueError, "'validation_split'"),
    ({"validation_split": "0.2"}, TypeError, r"'validation_split'.*'0\.2'"),
    ({"validation_split": True}, TypeError, "'validation_split'.*True"),
    ({"validation_split": 0.5, "validation_data": "given"}, ValueError,
     "pass either 'validation_data' or 'validation_split', not both"),
    ({"validation_split": 0.99}, ValueError,
     r"validation_split=0\.99 of 16 examples leaves 0 for training and 16 for validation"),
])
def test_validation_split_is_validated(kwargs, error, match):
    x, y = data()
    if kwargs.get("validation_data") == "given":
        kwargs["validation_data"] = (x, y)
    net = mlp()
    with pytest.raises(error, match=f"fit: {match}"):
        net.fit(x, y, verbose=0, **kwargs)
    assert net.optimizer.iterations == 0
