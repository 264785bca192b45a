"""``handgrad.inspect.detect_anomaly``: the first layer producing NaN/inf, forward and backward."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import losses
from handgrad.inspect import AnomalyError, anomaly, detect_anomaly
from handgrad.model import Sequential


def mlp(seed=0):
    """dense_a -> tanh -> Sequential 'inner' (dense_a, relu) -> dense_out, float64."""
    inner = Sequential([L.Dense(5, name="dense_a"), L.ReLU(name="relu")], name="inner")
    return Sequential([L.Dense(6, name="dense_a"), L.Tanh(name="tanh"), inner,
                       L.Dense(3, name="dense_out")], input_shape=(4,), dtype="float64",
                      seed=seed)


def data(n=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)), rng.integers(0, 3, n)


def catch(fn, model):
    """The AnomalyError raised by ``fn()`` under detect_anomaly(model) (NumPy's own
    warnings about inf arithmetic silenced: the check must not rely on them)."""
    with pytest.raises(AnomalyError) as info, np.errstate(all="ignore"), \
            detect_anomaly(model):
        fn()
    return info.value


def test_anomaly_error_is_a_floating_point_error():
    assert issubclass(AnomalyError, FloatingPointError)


def test_nan_weight_in_forward_names_the_layer_and_its_path():
    model = mlp()
    model["inner"]["dense_a"].parameters["W"][1, 2] = np.nan
    x, _ = data()
    error = catch(lambda: model.forward(x), model)
    assert error.layer is model["inner"]["dense_a"]
    assert error.pass_name == "forward" and error.what == "output"
    assert error.path == "inner.dense_a"
    message = str(error)
    assert "forward pass of Dense 'dense_a'" in message
    assert "'inner.dense_a'" in message and "its input was finite" in message
    assert f"{len(x)} NaN and 0 inf" in message  # one NaN column: one per example
    # Without the context manager the NaN passes silently (and nothing is checked).
    assert np.isnan(model.forward(x)).any()


def test_inf_input_names_the_first_layer_and_says_the_input_was_bad():
    model = mlp()
    x, _ = data()
    x[2, 0] = np.inf
    error = catch(lambda: model.forward(x, training=False), model)
    assert error.layer is model["dense_a"] and error.pass_name == "forward"
    assert "its input already held NaN/inf" in str(error)


def test_a_conv_layer_in_inference_mode_is_checked_too():
    model = Sequential([L.Conv2D(3, 3, padding=1, name="conv"), L.ReLU(), L.Flatten(),
                        L.Dense(2)], input_shape=(5, 5, 2), seed=0)
    model["conv"].parameters["b"][1] = np.inf
    x = np.random.default_rng(0).standard_normal((2, 5, 5, 2)).astype(np.float32)
    error = catch(lambda: model.forward(x, training=False), model)
    assert error.layer is model["conv"]
    assert "forward pass of Conv2D 'conv'" in str(error) and "inf values" in str(error)


def test_nan_upstream_gradient_names_the_layer_that_received_it():
    model = mlp()
    x, _ = data()
    y = model.forward(x)
    dy = np.random.default_rng(1).standard_normal(y.shape)
    dy[0, 1] = np.nan
    error = catch(lambda: model.backward(dy), model)
    assert error.layer is model["dense_out"] and error.pass_name == "backward"
    assert error.what == "dx"
    assert "backward pass of Dense 'dense_out'" in str(error)
    assert "the upstream gradient dy already held NaN/inf" in str(error)
    # raised in dense_out's backward hook: the layers nearer the input never ran theirs
    assert not np.any(model["inner"]["dense_a"].gradients["W"])
    assert not np.any(model["dense_a"].gradients["W"])


def test_nan_upstream_gradient_into_a_single_layer():
    layer = L.Tanh(name="squash")
    y = layer.forward(np.linspace(-1.0, 1.0, 6).reshape(2, 3))
    dy = np.ones_like(y)
    dy[1, 2] = np.inf
    error = catch(lambda: layer.backward(dy), layer)
    assert error.layer is layer and error.pass_name == "backward"
    assert "Tanh 'squash'" in str(error)


def test_backward_names_the_layer_that_creates_the_nan():
    """A weight poisoned between forward and backward: dx of that layer is the first NaN
    met on the way back; the layers nearer the loss stay clean."""
    model = mlp()
    x, labels = data()
    _, dlogits = losses.softmax_cross_entropy(model.forward(x), labels)
    model["inner"]["dense_a"].parameters["W"][0, 0] = np.nan
    error = catch(lambda: model.backward(dlogits), model)
    assert error.layer is model["inner"]["dense_a"] and error.pass_name == "backward"
    assert error.path == "inner.dense_a" and "the upstream gradient dy was finite" in str(error)


class PoisonedGradient(L.Dense):
    """A Dense whose weight gradient is NaN (its dx stays finite)."""

    def _backward(self, dy, cache):
        dx, grads = super()._backward(dy, cache)
        grads["W"] = grads["W"] * np.nan
        return dx, grads


def test_a_nan_parameter_gradient_is_reported_with_its_key():
    model = Sequential([L.Dense(4), PoisonedGradient(3, name="poisoned"), L.Dense(2)],
                       input_shape=(3,), dtype="float64", seed=0)
    y = model.forward(np.ones((2, 3)))
    error = catch(lambda: model.backward(np.full(y.shape, 0.5)), model)
    assert error.layer is model["poisoned"] and error.what == "gradient 'W'"
    assert "gradient 'W'" in str(error)


def test_a_frozen_layer_s_discarded_gradients_are_not_checked():
    model = Sequential([PoisonedGradient(3, name="poisoned")], input_shape=(3,),
                       dtype="float64", seed=0)
    model["poisoned"].trainable = False
    y = model.forward(np.ones((2, 3)))
    with detect_anomaly(model):
        model.backward(np.full(y.shape, 0.5))


class OwnForward(L.Layer):
    """A layer overriding ``forward`` itself (like the recurrent and attention layers)."""

    def _forward(self, x, training):  # used for shape inference only
        return x, None

    def forward(self, x, training=True):
        return x * np.nan


def test_layers_overriding_forward_are_checked_by_sequential():
    model = Sequential([L.Dense(3), OwnForward(name="own"), L.Dense(2)], input_shape=(3,),
                       dtype="float64", seed=0)
    error = catch(lambda: model.forward(np.ones((2, 3)), training=False), model)
    assert error.layer is model["own"] and "OwnForward 'own'" in str(error)


class Passthrough(L.Layer):
    """A finite layer overriding ``forward`` itself (so only its container reports it)."""

    def _forward(self, x, training):
        return x * 1.0, None

    def forward(self, x, training=True):
        self.ensure_built(x.shape[1:])
        if training:
            self._caches.append(None)
        return x * 1.0

    def _backward(self, dy, cache):
        return dy * 1.0, {}


def spy_on_checks(monkeypatch):
    """The list that every check of the anomaly checker appends (layer name, pass) to."""
    calls, check = [], anomaly._Checker.check

    def spy(self, layer, pass_name, upstream, produced):
        calls.append((layer.name, pass_name))
        check(self, layer, pass_name, upstream, produced)

    monkeypatch.setattr(anomaly._Checker, "check", spy)
    return calls


def checks(model, x, monkeypatch):
    """[(layer name, pass)] of every check during one forward and one backward of
    ``model`` under detect_anomaly; none after the block."""
    calls = spy_on_checks(monkeypatch)
    with detect_anomaly(model):
        y = model.forward(x)
        model.backward(np.ones_like(y))
    count = len(calls)
    model.backward(np.ones_like(model.forward(x)))
    assert len(calls) == count  # the block's hooks are gone
    return calls


def test_each_activation_is_checked_once_in_a_sequential(monkeypatch):
    inner = Sequential([L.Dense(4, name="fc"), L.ReLU(name="relu"), Passthrough(name="own")],
                       name="inner")
    model = Sequential([L.Dense(4, name="stem"), inner, L.Dense(2, name="head")],
                       input_shape=(3,), dtype="float64", seed=0)
    calls = checks(model, np.ones((2, 3)), monkeypatch)
    assert [name for name, p in calls if p == "forward"] == ["stem", "fc", "relu", "own",
                                                             "head"]
    assert [name for name, p in calls if p == "backward"] == ["head", "own", "relu", "fc",
                                                              "stem"]


def test_each_activation_is_checked_once_in_a_residual(monkeypatch):
    block = Sequential([L.Dense(4, name="fc"), L.ReLU(name="relu")], name="inner")
    residual = L.Residual(block, L.Dense(4, name="proj"), name="res", dtype="float64",
                          seed=0)
    calls = checks(residual, np.ones((2, 4)), monkeypatch)
    assert calls == [("fc", "forward"), ("relu", "forward"), ("proj", "forward"),
                     ("res", "forward"), ("relu", "backward"), ("fc", "backward"),
                     ("proj", "backward"), ("res", "backward")]
    model = Sequential([residual, L.Tanh(name="tanh")])
    calls = checks(model, np.ones((2, 4)), monkeypatch)
    assert [name for name, p in calls if p == "forward"] == ["fc", "relu", "proj", "res",
                                                             "tanh"]


def test_finite_values_pass_and_results_are_unchanged():
    x, labels = data(8)
    plain, checked = mlp(), mlp()
    plain.compile("adam", "cross_entropy")
    checked.compile("adam", "cross_entropy")
    plain.train_step(x, labels)
    with detect_anomaly(checked):
        checked.train_step(x, labels)
        predictions = checked.predict(x)
    for key, value in plain.named_parameters().items():
        np.testing.assert_array_equal(checked.named_parameters()[key], value)
    np.testing.assert_array_equal(predictions, plain.predict(x))


def test_checks_are_off_by_default_and_removed_after_errors_and_nesting():
    model = mlp()
    model["dense_out"].parameters["b"][0] = np.nan
    x, _ = data()
    model.forward(x)  # no block: not checked
    with detect_anomaly(model, enabled=False):
        model.forward(x)  # not checked
    with detect_anomaly(model):
        with pytest.raises(AnomalyError), detect_anomaly(model):
            model.forward(x)
        with pytest.raises(AnomalyError):
            model.forward(x)  # the outer block still checks after the inner one raised
    model.forward(x)  # unchecked again: every hook was removed
    with pytest.raises(TypeError, match="'model' must be the handgrad layer or model"):
        with detect_anomaly(None):
            pass


def test_only_the_given_model_is_checked_and_a_copy_has_no_checks():
    model = mlp()
    x, _ = data()
    with detect_anomaly(model):
        twin = copy.deepcopy(model)  # a copy starts without the original's hooks
    twin["inner"]["dense_a"].parameters["W"][:] = np.nan
    with detect_anomaly(model):
        assert np.isnan(twin.forward(x)).all()  # another instance: not checked
    error = catch(lambda: twin.forward(x), twin)
    assert error.layer is twin["inner"]["dense_a"] and error.path == "inner.dense_a"


def test_detect_anomaly_works_as_a_decorator():
    model = mlp()
    model["dense_a"].parameters["W"][0, 0] = np.inf
    x, _ = data()

    @detect_anomaly(model)
    def run():
        return model.forward(x)

    with pytest.raises(AnomalyError, match="Dense 'dense_a'"):
        run()
