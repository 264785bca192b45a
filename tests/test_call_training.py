"""A graph call's fixed mode: Keras's ``base_model(inputs, training=False)``.

Keras semantics relied on: a layer called on symbolic tensors with ``training=False``
runs that call in inference mode whatever the mode of the model that runs it (its
BatchNormalization normalizes by the moving statistics and does not update them, its
Dropout passes the input through), and the model still trains through it: the
gradients are those of the inference-mode function. ``training=True`` keeps the
training behaviour even in ``predict`` (Monte-Carlo dropout). The flag is part of the
saved model.
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.optimizers import SGD
from handgrad.testing import assert_close


def make_model(training=False):
    base = Sequential([L.Dense(5, input_shape=(4,)), L.BatchNormalization(),
                       L.Dropout(0.5)], name="base", dtype="float64", seed=0)
    x = hg.Input((4,))
    model = hg.Model(x, L.Dense(3, name="head")(base(x, training=training)),
                     dtype="float64", seed=1)
    # moving statistics away from (0, 1), so that an inference forward differs
    bn = base.layers[1]
    rng = np.random.default_rng(3)
    bn.buffers["running_mean"][:] = rng.standard_normal(5)
    bn.buffers["running_var"][:] = rng.uniform(0.5, 2.0, 5)
    return model, base


def data(n=16):
    rng = np.random.default_rng(4)
    return rng.standard_normal((n, 4)) * 2 + 1, rng.standard_normal((n, 3))


def torch_reference(model, base, x, dy):
    """The inference-mode function in torch (autograd): Dense, BatchNorm with the moving
    statistics, no dropout, Dense; returns the output and the gradients of sum(y * dy)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    params = {k: torch.tensor(v, requires_grad=True)
              for k, v in model.named_parameters().items()}
    stats = {k: torch.tensor(v) for k, v in model.named_buffers().items()}
    xt = torch.tensor(x, requires_grad=True)
    dense, bn = base.layers[0].name, base.layers[1].name
    h = xt @ params[f"base.{dense}.W"] + params[f"base.{dense}.b"]
    h = F.batch_norm(h, stats[f"base.{bn}.running_mean"], stats[f"base.{bn}.running_var"],
                     params[f"base.{bn}.gamma"], params[f"base.{bn}.beta"], training=False,
                     eps=base.layers[1].eps)
    y = h @ params["head.W"] + params["head.b"]
    (y * torch.tensor(dy)).sum().backward()
    grads = {k: p.grad.numpy() for k, p in params.items()}
    return y.detach().numpy(), xt.grad.numpy(), grads


def test_a_call_with_training_false_runs_in_inference_mode_and_backpropagates():
    model, base = make_model()
    x, dy = data()
    statistics = {k: v.copy() for k, v in model.named_buffers().items()}
    expected_y, expected_dx, expected_grads = torch_reference(model, base, x, dy)
    model.zero_grad()
    y = model.forward(x, training=True)
    dx = model.backward(dy)
    assert all(np.array_equal(v, model.named_buffers()[k]) for k, v in statistics.items())
    assert_close(y, expected_y, terms=16, what="y")
    assert_close(dx, expected_dx, terms=16, what="dx")
    for key, grad in model.named_gradients().items():
        assert_close(grad, expected_grads[key], terms=16 * 16, what=key)
    # a second training forward: the same output (no dropout drawn, no statistics moved)
    np.testing.assert_array_equal(model.forward(x, training=True), y)


def test_fit_trains_the_base_through_its_inference_call_and_keeps_its_statistics():
    model, base = make_model()
    x, y = data(32)
    statistics = {k: v.copy() for k, v in base.named_buffers().items()}
    weights = {k: v.copy() for k, v in base.named_parameters().items()}
    model.compile(SGD(learning_rate=0.1), "mse")
    model.fit(x, y, epochs=2, batch_size=8, verbose=0, rng=0)
    assert all(np.array_equal(v, base.named_buffers()[k]) for k, v in statistics.items())
    assert all(not np.array_equal(v, base.named_parameters()[k]) for k, v in weights.items())


def test_without_the_flag_the_call_follows_the_model():
    model, base = make_model(training=None)
    x, _ = data()
    statistics = {k: v.copy() for k, v in base.named_buffers().items()}
    model.forward(x, training=True)
    assert any(not np.array_equal(v, base.named_buffers()[k]) for k, v in statistics.items())


def test_training_true_keeps_dropout_in_predict():
    x = hg.Input((64,))
    model = hg.Model(x, L.Dropout(0.5)(x, training=True), dtype="float64")
    ones = np.ones((4, 64))
    out = model.predict(ones, verbose=0)
    assert (out == 0).any() and (out == 2).any()  # inverted dropout: kept values scaled by 2
    plain = hg.Model(x, L.Dropout(0.5)(x), dtype="float64")
    np.testing.assert_array_equal(plain.predict(ones, verbose=0), ones)


def test_the_flag_is_saved_and_loaded(tmp_path):
    model, _ = make_model()
    x, _ = data()
    config = model.get_config()
    assert [node.get("training") for node in config["nodes"]] == [False, None]
    model.save(tmp_path / "model.hgz")
    loaded = hg.load_model(tmp_path / "model.hgz")
    assert [node.training for node in loaded.nodes] == [False, None]
    np.testing.assert_array_equal(loaded.forward(x, training=True),
                                  model.forward(x, training=False))


def test_a_training_flag_that_is_not_a_bool_is_refused():
    x = hg.Input((4,))
    with pytest.raises(TypeError, match=r"'training' must be None .* or a bool; received"):
        L.Dense(2)(x, training="no")
