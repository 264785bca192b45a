"""``Lambda(function, backward=...)``: a layer given its forward and its hand-written
backward ``backward(dy, x, y) -> dx`` (y the cached forward result).

Keras semantics relied on: ``Lambda(fn, output_shape=None)`` computes ``fn(x)`` on the
batch, ``output_shape`` (per example, or a function of the input shape) only declares the
shape; Keras derives the gradient by autodiff, handgrad takes it from ``backward``.
"""

import numpy as np
import pytest

from handgrad import _custom, io
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import gradcheck

X = np.random.default_rng(0).standard_normal((3, 4, 2))


def softsign(x):
    return x / (1 + np.abs(x))


def softsign_backward(dy, x, y):
    return dy / (1 + np.abs(x)) ** 2


def wrong_backward(dy, x, y):  # the derivative of x / (1 + x), not of softsign
    return dy / (1 + x) ** 2


@pytest.fixture(autouse=True)
def empty_registry(monkeypatch):
    monkeypatch.setattr(_custom, "_REGISTRY", {})


def test_gradcheck_passes_the_right_backward_and_fails_a_wrong_one():
    assert gradcheck(L.Lambda(softsign, backward=softsign_backward), X, rng=0).passed
    assert not gradcheck(L.Lambda(softsign, backward=wrong_backward), X, rng=0).passed


def test_backward_receives_the_cached_forward_result():
    seen = []
    layer = L.Lambda(np.tanh, backward=lambda dy, x, y: seen.append((x, y)) or dy * (1 - y * y))
    y = layer.forward(X)
    dx = layer.backward(np.ones_like(y))
    (x_seen, y_seen), = seen
    assert x_seen is X and y_seen is y
    np.testing.assert_array_equal(dx, 1 - np.tanh(X) ** 2)


def test_without_backward_inference_runs_and_backward_names_the_missing_argument():
    model = Sequential([L.Dense(3), L.Lambda(softsign)], seed=0, dtype="float64")
    y = model.predict(X)
    np.testing.assert_array_equal(y, softsign(model.layers[0].forward(X, training=False)))
    layer = L.Lambda(softsign)
    layer.forward(X)
    with pytest.raises(TypeError, match=r"Lambda: backward needs the hand-written gradient: "
                                        r"pass Lambda\(function, backward="):
        layer.backward(np.ones_like(X))


def test_output_shape_declares_the_shape_and_is_checked():
    def halve(x):
        return x[:, :, :1]

    halve_backward = lambda dy, x, y: np.concatenate([dy, np.zeros_like(dy)], axis=-1)  # noqa: E731
    declared = L.Lambda(halve, halve_backward, output_shape=lambda shape: (*shape[:-1], 1))
    assert declared.output_shape((4, 2)) == (4, 1)
    assert L.Lambda(halve, output_shape=(4, 1)).forward(X).shape == (3, 4, 1)
    with pytest.raises(ValueError, match=r"returned per-example shape \(4, 1\) but "
                                         r"'output_shape' is \(4, 2\)"):
        L.Lambda(halve, output_shape=(4, 2)).forward(X)
    assert gradcheck(declared, X, rng=0).passed


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: L.Lambda(3), TypeError, r"'function' must be a callable x -> y; received 3 \(int\)"),
    (lambda: L.Lambda(np.tanh, backward="grad"), TypeError, r"'backward' must be a callable"),
    (lambda: L.Lambda(np.tanh, output_shape=(2, -1)), TypeError, r"'output_shape' must be"),
])
def test_bad_arguments_are_refused_by_name(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(("fn", "backward", "match"), [
    (lambda x: float(x.sum()), None, r"'function' must return an array with the input's "
                                     r"batch axis N = 3; returned .* \(float\)"),
    (lambda x: x[0], None, r"batch axis N = 3; returned shape \(4, 2\)"),
    (np.tanh, lambda dy, x, y: dy[:, 0], r"'backward' must return dx of the input's dtype "
                                         r"and shape, float64 \(3, 4, 2\); returned float64 "
                                         r"shape \(3, 2\)"),
])
def test_bad_results_are_refused_by_name(fn, backward, match):
    layer = L.Lambda(fn, backward)
    with pytest.raises(ValueError, match=match):
        layer.backward(np.ones_like(layer.forward(X)))


def model_with(function, backward):
    model = Sequential([L.Dense(2), L.Lambda(function, backward)], seed=1,
                       dtype="float64")
    model.build((4, 2))
    return model


def test_registered_callables_save_and_load(tmp_path):
    io.register_custom()(softsign)
    io.register_custom("softsign_grad")(softsign_backward)
    model = model_with(softsign, softsign_backward)
    io.save(model, tmp_path / "m.safetensors")
    loaded = io.load(tmp_path / "m.safetensors")
    assert loaded.layers[1].function is softsign
    assert loaded.layers[1].backward_function is softsign_backward
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_custom_objects_name_the_callables_without_registration(tmp_path):
    model = model_with(softsign, softsign_backward)
    objects = {"soft": softsign, "soft_grad": softsign_backward}
    io.save(model, tmp_path / "m.safetensors", custom_objects=objects)
    with pytest.raises(ValueError, match=r"names the custom object 'soft'"):
        io.load(tmp_path / "m.safetensors")
    loaded = io.load(tmp_path / "m.safetensors", custom_objects=objects)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_an_unnamed_function_is_refused_when_saving(tmp_path):
    model = model_with(lambda x: 2 * x, None)
    with pytest.raises(ValueError, match=r"the 'function' of Lambda .* is the custom callable .*"
                                         r"Register it"):
        io.save(model, tmp_path / "m.safetensors")
    assert not (tmp_path / "m.safetensors").exists()
