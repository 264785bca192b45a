"""The training loop: convergence, determinism, train_step/predict/evaluate semantics
and argument validation of compile/fit."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import losses, optimizers
from handgrad.model import Sequential
from handgrad.testing import assert_close
from handgrad.training.callbacks import Callback, EarlyStopping

from tolerances_composite import network_bounds


class BatchLog(Callback):
    """Records the logs of every batch."""

    def __init__(self):
        self.batches = []

    def on_train_batch_end(self, step, logs):
        self.batches.append(dict(logs))


def mlp(seed=0, dtype=None, dropout=0.0, outputs=2):
    layers = [L.Dense(16), L.ReLU()]
    if dropout:
        layers.append(L.Dropout(dropout, seed=seed + 1))
    layers += [L.Dense(16), L.Tanh(), L.Dense(outputs)]
    return Sequential(layers, seed=seed, dtype=dtype, input_shape=(2,))


def xor_data(n, rng, dtype=np.float32):
    x = rng.uniform(-1, 1, size=(n, 2)).astype(dtype)
    x += np.sign(x) * dtype(0.1)  # a margin around both axes
    y = (x[:, 0] * x[:, 1] > 0).astype(np.int64)
    return x, y


def params_equal(a, b):
    pa, pb = a.named_parameters(), b.named_parameters()
    return pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)


# ----------------------------------------------------------------- convergence


def test_mlp_learns_xor_to_full_accuracy():
    rng = np.random.default_rng(0)
    x, y = xor_data(256, rng)
    model = mlp(seed=3).compile(optimizers.Adam(lr=0.02), "cross_entropy")
    before = model.evaluate(x, y, return_dict=True)["accuracy"]
    history = model.fit(x, y, epochs=60, batch_size=32, rng=1, verbose=0)
    assert before < 0.8
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert model.evaluate(x, y, return_dict=True)["accuracy"] == 1.0


def test_single_logit_binary_classifier_separates_two_blobs():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(-2, 0.7, (100, 2)), rng.normal(2, 0.7, (100, 2))])
    x = x.astype(np.float32)
    y = np.repeat(np.float32([0, 1]), 100)[:, None]
    model = Sequential([L.Dense(8), L.ReLU(), L.Dense(1)], seed=0, input_shape=(2,))
    model.compile(optimizers.SGD(lr=0.1, momentum=0.9), "binary_cross_entropy_with_logits")
    model.fit(x, y, epochs=10, batch_size=20, rng=0, verbose=0)
    predicted = model.predict(x)[:, 0] > 0  # the binary rule: logit > 0
    assert np.array_equal(predicted, y[:, 0] > 0.5)
    # targets (N, 1) like the logits, as binary_cross_entropy_with_logits requires
    assert model.evaluate(x, y, return_dict=True)["accuracy"] == 1.0
    assert model.train_step(x, y)["accuracy"] == 1.0


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    from handgrad.data import load_digits

    return load_digits(seed=0)


def test_small_conv2d_net_beats_90_percent_on_digits(digits):
    model = Sequential([L.Conv2D(8, 3, padding=1), L.ReLU(), L.MaxPool2D(2), L.Flatten(),
                        L.Dense(10)], seed=0, input_shape=(8, 8, 1))
    model.compile(optimizers.Adam(lr=1e-2), "cross_entropy")
    model.fit(digits.x_train[:900], digits.y_train[:900], epochs=6, batch_size=32, rng=0,
              verbose=0)
    assert model.evaluate(digits.x_test, digits.y_test, return_dict=True)["accuracy"] > 0.9


def test_conv1d_net_improves_clearly_on_mnist1d():
    pytest.importorskip("mnist1d")
    from handgrad.data import load_mnist1d

    data = load_mnist1d()
    model = Sequential([L.Conv1D(16, 5, padding=2), L.ReLU(), L.MaxPool1D(2),
                        L.Conv1D(16, 3, padding=1), L.ReLU(), L.MaxPool1D(2), L.Flatten(),
                        L.Dense(10)], seed=0, input_shape=(40, 1))
    model.compile(optimizers.Adam(lr=3e-3), "cross_entropy")
    x_test, y_test = data.x_test[:500], data.y_test[:500]
    before = model.evaluate(x_test, y_test, return_dict=True)
    model.fit(data.x_train[:2000], data.y_train[:2000], epochs=6, batch_size=50, rng=0,
              verbose=0)
    after = model.evaluate(x_test, y_test, return_dict=True)
    assert before["accuracy"] < 0.2
    assert after["accuracy"] > 0.4
    assert after["loss"] < before["loss"] - 0.5


# --------------------------------------------------------- semantics of the loop


@pytest.mark.parametrize("optimizer", [
    lambda: optimizers.SGD(lr=0.1, momentum=0.9, nesterov=True),
    lambda: optimizers.Adam(lr=0.01, weight_decay=1e-3),
])
def test_train_step_equals_a_manual_loop_exactly(optimizer):
    rng = np.random.default_rng(2)
    x, y = xor_data(48, rng)
    model = mlp(seed=5, dropout=0.25).compile(optimizer(), "cross_entropy")
    twin = copy.deepcopy(model)
    manual_opt = optimizer()
    for start in range(0, 48, 16):
        xb, yb = x[start:start + 16], y[start:start + 16]
        logs = model.train_step(xb, yb)
        twin.zero_grad()
        pred = twin.forward(xb, training=True)
        loss, dpred = losses.softmax_cross_entropy(pred, yb)
        twin.backward(dpred)
        manual_opt.step(twin.named_parameters(trainable_only=True),
                        twin.named_gradients(trainable_only=True))
        assert logs["loss"] == loss
        assert logs["accuracy"] == np.mean(np.argmax(pred, axis=-1) == yb)
        assert params_equal(model, twin)
    assert model.optimizer.iterations == manual_opt.iterations == 3
    for key, value in manual_opt.state_dict().items():
        assert np.array_equal(model.optimizer.state_dict()[key], value)


def test_train_step_leaves_no_cache_behind():
    model = mlp().compile("sgd", "cross_entropy")
    x, y = xor_data(8, np.random.default_rng(0))
    model.train_step(x, y)
    assert all(not layer._caches for layer in model)


def _train(seed_data, rng):
    x, y = xor_data(100, np.random.default_rng(seed_data))
    model = mlp(seed=7, dropout=0.3).compile(optimizers.Adam(lr=0.01), "cross_entropy")
    history = model.fit(x, y, epochs=3, batch_size=16, rng=rng, validation_data=(x[:20], y[:20]),
                        verbose=0)
    return model, history


def test_fit_with_the_same_seed_is_reproducible():
    first, h1 = _train(0, 123)
    second, h2 = _train(0, np.random.default_rng(123))
    assert params_equal(first, second)
    assert h1.epoch == h2.epoch == [0, 1, 2]
    for key in h1.history:
        if key != "seconds":
            assert h1[key] == h2[key], key
    third, _ = _train(0, 124)
    assert not params_equal(first, third)


def test_fit_without_shuffle_visits_batches_in_order():
    x, y = xor_data(10, np.random.default_rng(0))
    seen = []
    model = mlp().compile("sgd", "cross_entropy")
    model.train_step = lambda xb, yb: seen.append(xb.copy()) or {"loss": 0.0}
    model.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0)
    assert [len(b) for b in seen] == [4, 4, 2] * 2
    assert np.array_equal(np.concatenate(seen[:3]), x)


def test_predict_equals_forward_in_inference_mode():
    x, _ = xor_data(37, np.random.default_rng(4))
    model = mlp(dropout=0.5, outputs=3)
    expected = model.forward(x, training=False)
    state = model["dropout_2"].rng.bit_generator.state
    terms, scale = network_bounds(model, x)  # batches of other sizes may round otherwise
    for batch_size in (1, 5, 37, 256):
        out = model.predict(x, batch_size=batch_size)
        assert out.dtype == np.float32 and out.shape == (37, 3)
        assert_close(out, expected, dtype=np.float32, terms=terms, scale=scale,
                     what=f"batch size {batch_size}")
    assert model["dropout_2"].rng.bit_generator.state == state  # no dropout draw
    assert all(not layer._caches for layer in model)


@pytest.mark.parametrize("batch_size", [1, 7, 10, 64])
def test_evaluate_weights_uneven_last_batches(batch_size):
    rng = np.random.default_rng(5)
    x, y = xor_data(31, rng, dtype=np.float64)
    model = mlp(dtype="float64", outputs=2).compile("sgd", "cross_entropy")
    pred = model.forward(x, training=False)
    loss, _ = losses.softmax_cross_entropy(pred, y)
    result = model.evaluate(x, y, batch_size=batch_size, return_dict=True)
    assert set(result) == {"loss", "accuracy"}
    # the logits of other batch sizes may round otherwise (a cross-entropy moves by at most
    # its logits' error), then the mean adds 31 positive item losses of about the loss
    terms, scale = network_bounds(model, x)
    assert_close(result["loss"], loss, dtype=np.float64, terms=terms + len(x),
                 scale=max(scale, loss), what="loss")
    assert_close(result["accuracy"], np.mean(np.argmax(pred, -1) == y), dtype=np.float64,
                 terms=len(x), scale=1.0, what="accuracy")  # a weighted mean of fractions


def test_evaluate_without_metrics_reports_only_the_loss():
    x, y = xor_data(12, np.random.default_rng(0))
    model = mlp().compile("sgd", "cross_entropy", metrics=())
    assert set(model.evaluate(x, y, batch_size=5, return_dict=True)) == {"loss"}


def test_float64_model_trains_in_float64():
    x, y = xor_data(16, np.random.default_rng(0), dtype=np.float64)
    model = mlp(dtype="float64").compile("adam", "cross_entropy")
    model.fit(x, y, epochs=1, batch_size=8, rng=0, verbose=0)
    assert all(p.dtype == np.float64 for p in model.named_parameters().values())
    assert model.predict(x).dtype == np.float64


def test_compiled_loss_may_be_any_callable():
    calls = []

    def half_mse(pred, target):
        calls.append(pred.shape)
        loss, grad = losses.mse(pred, target)
        return 0.5 * loss, 0.5 * grad

    x = np.random.default_rng(0).standard_normal((12, 2)).astype(np.float32)
    target = x @ np.float32([[1.0], [-2.0]])
    model = Sequential([L.Dense(1)], seed=0, input_shape=(2,))
    model.compile(optimizers.SGD(lr=0.5, momentum=0.5), half_mse, metrics=())
    history = model.fit(x, target, epochs=60, batch_size=12, verbose=0)
    assert model.loss_name == "half_mse"
    assert calls[0] == (12, 1)
    assert history["loss"][-1] < 1e-3 < history["loss"][0]


# ----------------------------------------------------------------- validation


def test_compile_rejects_unknown_names():
    model = mlp()
    with pytest.raises(ValueError, match=r"compile: 'metrics'.*'f1'"):
        model.compile("sgd", "cross_entropy", metrics=("f1",))
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        model.compile("sgd", "hinge")
    with pytest.raises(ValueError, match="nope"):
        model.compile("nope", "cross_entropy")


@pytest.mark.parametrize("method", ["fit", "evaluate", "train_step"])
def test_training_methods_before_compile_raise(method):
    x, y = xor_data(4, np.random.default_rng(0))
    model = mlp()
    with pytest.raises(RuntimeError, match=rf"{method}: call model\.compile\(optimizer, loss\)"):
        getattr(model, method)(x, y)
    assert model.optimizer is None


@pytest.mark.parametrize("kwargs, error, match", [
    ({"epochs": -1}, ValueError, "fit: 'epochs' must be an int >= 0; received -1"),
    ({"epochs": 2.0}, ValueError, "fit: 'epochs'.*received 2.0"),
    ({"epochs": True}, ValueError, "fit: 'epochs'.*received True"),
    ({"batch_size": 0}, ValueError, "fit: 'batch_size' must be an int >= 1; received 0"),
    ({"batch_size": "8"}, ValueError, "fit: 'batch_size'.*received '8'"),
    ({"initial_epoch": -2}, ValueError, "fit: 'initial_epoch'.*received -2"),
    ({"validation_data": ([1.0],)}, ValueError, "fit: 'validation_data' must be a pair"),
    ({"validation_data": np.zeros((2, 2))}, ValueError, "fit: 'validation_data'.*array"),
    ({"callbacks": [EarlyStopping(), "x"]}, TypeError,
     "fit: 'callbacks' must hold Callback objects; received 'x'"),
    ({"rng": 1.5}, TypeError, "fit: 'rng' must be a numpy.random.Generator"),
])
def test_fit_validates_its_arguments(kwargs, error, match):
    x, y = xor_data(8, np.random.default_rng(0))
    model = mlp().compile("sgd", "cross_entropy")
    before = {k: v.copy() for k, v in model.named_parameters().items()}
    with pytest.raises(error, match=match):
        model.fit(x, y, verbose=0, **kwargs)
    assert all(np.array_equal(v, before[k]) for k, v in model.named_parameters().items())


def test_fit_rejects_a_bare_callback_with_a_clear_error():
    # A single Callback instead of a list must name fit's 'callbacks' argument.
    x, y = xor_data(8, np.random.default_rng(0))
    model = mlp().compile("sgd", "cross_entropy")
    with pytest.raises(TypeError, match="fit: 'callbacks'"):
        model.fit(x, y, callbacks=EarlyStopping(monitor="loss"), verbose=0)


def test_fit_checks_validation_data_before_training():
    # Mismatched validation arrays must be reported before an epoch is spent training.
    x, y = xor_data(8, np.random.default_rng(0))
    model = mlp().compile("sgd", "cross_entropy")
    before = {k: v.copy() for k, v in model.named_parameters().items()}
    with pytest.raises(ValueError, match="fit: 'validation_data'"):
        model.fit(x, y, validation_data=(x, y[:5]), verbose=0)
    assert all(np.array_equal(v, before[k]) for k, v in model.named_parameters().items())


def test_fit_with_zero_epochs_or_a_late_initial_epoch_trains_nothing():
    x, y = xor_data(8, np.random.default_rng(0))
    model = mlp().compile("sgd", "cross_entropy")
    before = {k: v.copy() for k, v in model.named_parameters().items()}
    assert model.fit(x, y, epochs=0, verbose=0).epoch == []
    assert model.fit(x, y, epochs=2, initial_epoch=2, verbose=0).epoch == []
    assert all(np.array_equal(v, before[k]) for k, v in model.named_parameters().items())
    assert model.optimizer.iterations == 0


def test_fit_reports_mismatched_x_and_y():
    x, y = xor_data(8, np.random.default_rng(0))
    model = mlp().compile("sgd", "cross_entropy")
    with pytest.raises(ValueError, match="8 in 'x' and 5 in 'y'"):
        model.fit(x, y[:5], verbose=0)
