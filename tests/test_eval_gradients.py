"""``forward(x, training=False, grad=True)``: evaluation behaviour (batch-norm running
statistics, no dropout) with the caches kept for ``backward``, so input gradients of a
model in evaluation mode (saliency maps, adversarial examples, frozen batch norm) can be
computed. A Conv-BatchNorm-ReLU-Dropout-pool-Dense model equals torch's ``model.eval()``
autograd in float64 (output, input gradient, every parameter gradient), within the case's
measured condition; containers pass ``grad`` to what they call."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.model import Sequential

from optional_torch import needs_torch, torch
from tolerances import assert_outputs_close, condition_bounds
from tolerances_composite import LAYER_ROUNDINGS


def conv_bn_model():
    model = Sequential([L.Conv2D(3, 3, padding=1, name="conv"), L.BatchNorm(name="bn"),
                        L.ReLU(), L.Dropout(0.5, seed=3), L.MaxPool2D(2), L.Flatten(),
                        L.Dense(4, name="dense")], seed=0, dtype="float64",
                       input_shape=(6, 6, 2))
    rng = np.random.default_rng(7)  # running statistics unlike a batch's
    model["bn"].buffers["running_mean"][...] = rng.standard_normal(3)
    model["bn"].buffers["running_var"][...] = rng.uniform(0.5, 2.0, 3)
    model["bn"].parameters["gamma"][...] = rng.uniform(0.5, 1.5, 3)
    return model


def run_ours(model, x, dy):
    model.zero_grad()
    y = model.forward(x, training=False, grad=True)
    dx = model.backward(dy)
    return {"y": y, "dx": dx, **{k: g.copy() for k, g in model.named_gradients().items()}}


def run_torch(model, x, dy):
    nn = torch.nn
    conv, bn, dense = nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.Linear(27, 4)
    twin = nn.Sequential(conv, bn, nn.ReLU(), nn.Dropout(0.5), nn.MaxPool2d(2)).double()
    dense = dense.double()
    p, b = model.named_parameters(), model.named_buffers()
    with torch.no_grad():
        conv.weight.copy_(torch.tensor(p["conv.W"].transpose(3, 2, 0, 1).copy()))
        conv.bias.copy_(torch.tensor(p["conv.b"]))
        bn.weight.copy_(torch.tensor(p["bn.gamma"]))
        bn.bias.copy_(torch.tensor(p["bn.beta"]))
        bn.running_mean.copy_(torch.tensor(b["bn.running_mean"]))
        bn.running_var.copy_(torch.tensor(b["bn.running_var"]))
        dense.weight.copy_(torch.tensor(p["dense.W"].T.copy()))
        dense.bias.copy_(torch.tensor(p["dense.b"]))
    twin.eval()
    tx = torch.tensor(x.transpose(0, 3, 1, 2).copy(), requires_grad=True)
    y = dense(twin(tx).permute(0, 2, 3, 1).flatten(1))  # channels-last flatten, as ours
    y.backward(torch.tensor(dy))
    return {"y": y.detach().numpy(), "dx": tx.grad.numpy().transpose(0, 2, 3, 1),
            "conv.W": conv.weight.grad.numpy().transpose(2, 3, 1, 0),
            "conv.b": conv.bias.grad.numpy(), "bn.gamma": bn.weight.grad.numpy(),
            "bn.beta": bn.bias.grad.numpy(), "dense.W": dense.weight.grad.numpy().T,
            "dense.b": dense.bias.grad.numpy()}


@needs_torch
def test_evaluation_mode_gradients_equal_torch_eval_autograd_in_float64():
    rng = np.random.default_rng(0)
    model = conv_bn_model()
    x, dy = rng.standard_normal((2, 6, 6, 2)), rng.standard_normal((2, 4))
    statistics = {k: v.copy() for k, v in model.named_buffers().items()}
    ours = run_ours(model, x, dy)
    for key, value in model.named_buffers().items():  # evaluation: left as they were
        np.testing.assert_array_equal(value, statistics[key], err_msg=key)
    theirs = run_torch(model, x, dy)
    bounds = condition_bounds(lambda: run_ours(model, x, dy), [
        x, dy, *model.named_parameters().values(), *model.named_buffers().values()])
    roundings = LAYER_ROUNDINGS * len(model.layers)
    bounds = {k: (terms + roundings, scale) for k, (terms, scale) in bounds.items()}
    assert_outputs_close(ours, theirs, bounds, np.float64)


def mode_free_graph():
    """Residual, a nested Sequential, a graph Model called twice, a merge and attention:
    layers that compute the same in training and evaluation."""
    u = hg.Input((4, 6), name="u")
    inner_in = hg.Input((4, 6), name="inner_in")
    inner = hg.Model(inner_in, L.Dense(6, name="proj")(inner_in), name="inner",
                     dtype="float64", seed=2)
    block = L.Residual(Sequential([L.Conv1D(6, 3, padding="same"), L.Tanh()]), name="res")
    h = block(u)
    att = L.MultiHeadAttention(6, 2, name="att")([h, inner(u)])
    both = L.Concatenate(name="cat")([inner(att), h])
    return hg.Model(u, L.Dense(2, name="out")(L.Flatten(name="flat")(both)), dtype="float64",
                    seed=1)


def test_containers_keep_their_caches_in_evaluation_mode_with_grad():
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((3, 4, 6)), rng.standard_normal((3, 2))
    model = mode_free_graph()
    want = run_train(model, x, dy)
    got = run_ours(model, x, dy)
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    assert all(not layer._caches for _, layer in model.walk())  # each consumed


def run_train(model, x, dy):
    model.zero_grad()
    y = model.forward(x, training=True)
    dx = model.backward(dy)
    return {"y": y, "dx": dx, **{k: g.copy() for k, g in model.named_gradients().items()}}


def test_training_without_grad_updates_statistics_and_keeps_no_cache():
    model = conv_bn_model()
    x = np.random.default_rng(4).standard_normal((2, 6, 6, 2))
    mean = model["bn"].buffers["running_mean"].copy()
    model.forward(x, training=True, grad=False)
    assert not np.array_equal(model["bn"].buffers["running_mean"], mean)
    assert all(not layer._caches for _, layer in model.walk())
    with pytest.raises(RuntimeError, match="without a matching forward"):
        model.backward(np.ones((2, 4)))


@pytest.mark.parametrize("layer, x", [
    (L.Embedding(5, 3), np.array([[0, 4, 2]])),
    (L.GRU(3, dtype="float64"), np.ones((1, 2, 4))),
    (L.MultiHeadAttention(4, 2, dropout=0.5, dtype="float64"), np.ones((1, 2, 4))),
    (L.Dropout(0.5), np.ones((1, 4))),
], ids=["embedding", "gru", "attention", "dropout"])
def test_layers_with_their_own_forward_take_grad(layer, x):
    y = layer.forward(x, training=False, grad=True)
    assert len(layer._caches) == 1
    layer.backward(np.ones_like(y))
    layer.forward(x, training=True, grad=False)
    assert not layer._caches


def test_a_merge_takes_grad():
    cat = L.Concatenate()
    y = cat.forward([np.ones((1, 2)), np.ones((1, 3))], training=False, grad=True)
    assert [d.shape for d in cat.backward(np.ones_like(y))] == [(1, 2), (1, 3)]


@pytest.mark.parametrize("make", [lambda: L.Dense(2), conv_bn_model, mode_free_graph],
                         ids=["layer", "sequential", "graph"])
def test_grad_must_be_a_bool(make):
    model = make()
    x = np.ones((1, 4, 6)) if isinstance(model, hg.Model) else np.ones((1, 6, 6, 2))
    with pytest.raises(TypeError, match=r"'grad' must be a bool or None .*received"):
        model.forward(x if not isinstance(model, L.Dense) else np.ones((1, 3)), grad=1)
