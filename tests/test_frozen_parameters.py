"""A frozen layer (``trainable=False``) never changes, whatever the optimizer: in the
explicit loop, where ``model.named_parameters()`` names its arrays in ``.frozen``, and in
``fit``. A parameter whose gradient is ``None`` is skipped entirely, as ``torch.optim``
skips one whose ``grad`` is None: no weight decay, no momentum, no state, no step count."""

from __future__ import annotations

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import losses, optimizers
from handgrad.model import Sequential
from handgrad.testing import assert_close

OPTIMIZERS = {
    "sgd-momentum-decay": lambda: optimizers.SGD(lr=0.1, momentum=0.9, weight_decay=0.1),
    "sgd-nesterov": lambda: optimizers.SGD(lr=0.1, momentum=0.9, nesterov=True,
                                           weight_decay=0.1),
    "adam-decay": lambda: optimizers.Adam(lr=1e-2, weight_decay=0.1),
    "adamw": lambda: optimizers.AdamW(lr=1e-2, weight_decay=0.1),
    "amsgrad-clipped": lambda: optimizers.Adam(lr=1e-2, amsgrad=True, clipnorm=0.1),
    "rmsprop-centered-momentum": lambda: optimizers.RMSProp(
        lr=1e-2, momentum=0.9, centered=True, weight_decay=0.1),
    "adagrad-decay": lambda: optimizers.AdaGrad(lr=0.1, weight_decay=0.1),
}


def model_with_a_frozen_layer():
    return Sequential([L.Dense(6, name="frozen", trainable=False), L.ReLU(),
                       L.Dense(3, name="head")], seed=0, input_shape=(4,), dtype="float64")


def data():
    rng = np.random.default_rng(1)
    return rng.standard_normal((16, 4)), rng.integers(0, 3, 16)


def snapshot(model):
    return {k: v.copy() for k, v in model.named_parameters().items()}


def check_frozen_kept(model, before, optimizer):
    after = model.named_parameters()
    for key in ("frozen.W", "frozen.b"):
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
        assert all(key not in arrays for arrays in optimizer.state.values()), key
    assert not np.array_equal(after["head.W"], before["head.W"])  # the rest trains


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_the_explicit_loop_leaves_a_frozen_layer_as_it_was(make):
    model, optimizer = model_with_a_frozen_layer(), make()
    x, y = data()
    before = snapshot(model)
    assert model.named_parameters().frozen == {"frozen.W", "frozen.b"}
    for _ in range(3):
        model.zero_grad()
        _, dlogits = losses.softmax_cross_entropy(model.forward(x, training=True), y)
        model.backward(dlogits)
        optimizer.step(model.named_parameters(), model.named_gradients())
    check_frozen_kept(model, before, optimizer)


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_fit_leaves_a_frozen_layer_as_it_was(make):
    model, optimizer = model_with_a_frozen_layer(), make()
    x, y = data()
    before = snapshot(model)
    model.compile(optimizer=optimizer, loss="cross_entropy")
    model.fit(x, y, epochs=2, batch_size=8, rng=0, verbose=0)
    check_frozen_kept(model, before, optimizer)


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_a_none_gradient_skips_the_parameter_and_a_later_first_step_starts_fresh(make):
    rng = np.random.default_rng(2)
    params = {"a": rng.standard_normal(5), "b": rng.standard_normal(5)}
    grads = [{"a": rng.standard_normal(5), "b": rng.standard_normal(5)} for _ in range(3)]
    optimizer = make()
    b0 = params["b"].copy()
    for g in grads[:2]:
        optimizer.step(params, {"a": g["a"], "b": None})
    np.testing.assert_array_equal(params["b"], b0)
    assert all("b" not in arrays for arrays in optimizer.state.values())
    optimizer.step(params, grads[2])  # b's first step: as a fresh optimizer's first step
    fresh, alone = make(), {"b": b0.copy()}
    fresh.step(alone, {"b": grads[2]["b"]})
    if optimizer.clipnorm is None:  # (clipping scales by the norm of a and b together)
        np.testing.assert_array_equal(params["b"], alone["b"])
    assert optimizer.state.get("step", {}).get("b", 1) == 1


def test_clipping_counts_only_the_gradients_that_exist():
    params = {"a": np.zeros(2), "b": np.zeros(2)}
    optimizer = optimizers.SGD(lr=1.0, clipnorm=1.0)
    optimizer.step(params, {"a": np.array([3.0, 4.0]), "b": None})
    assert_close(params["a"], -np.array([3.0, 4.0]) / (5.0 + 1e-6), dtype=np.float64)
    np.testing.assert_array_equal(params["b"], [0.0, 0.0])
