"""Keras's regularizers (L1, L2, L1L2 and their names) on Dense and the convolutions:
the penalty in the loss, the gradients against torch autograd, save/load, bad values.

Keras semantics relied on: ``L1(l1)(w) = l1 * sum|w|``, ``L2(l2)(w) = l2 * sum(w**2)``
(no 1/2), ``L1L2(l1=0.0, l2=0.0)``; the strings "l1", "l2" and "l1_l2" use 0.01. The
penalties of the trainable weights are added to the loss (and logged in ``loss``, also by
``evaluate``); an activity regularizer adds regularizer(output) / batch size.
"""

import numpy as np
import pytest

from handgrad import Sequential, losses, optimizers, regularizers
from handgrad import layers as L
from handgrad.io import load, save
from handgrad.testing import assert_close

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _net(**regs):
    first = {k[6:]: v for k, v in regs.items() if k.startswith("first_")}
    last = {k[5:]: v for k, v in regs.items() if k.startswith("last_")}
    return Sequential([L.Dense(5, **first), L.Tanh(), L.Dense(3, **last)], input_shape=(4,),
                      seed=1, dtype="float64").compile("sgd", "cross_entropy")


def _data(n=16):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 4)), rng.integers(0, 3, n)


REGS = {"first_kernel_regularizer": regularizers.L2(0.05),
        "first_activity_regularizer": regularizers.L1(0.02),
        "last_kernel_regularizer": "l1_l2", "last_bias_regularizer": regularizers.L1(0.3)}


def test_the_loss_holds_the_hand_computed_penalties():
    x, y = _data()
    net, plain = _net(**REGS), _net()
    p = net.named_parameters()
    w0, b0, w1, b1 = (p[k] for k in p)
    h = np.tanh(x @ w0 + b0)
    ce, _ = losses.softmax_cross_entropy(h @ w1 + b1, y)
    pre = x @ w0 + b0  # the first Dense's output, before the Tanh
    penalty = (0.05 * (w0 ** 2).sum() + 0.02 * np.abs(pre).sum() / len(x)
               + 0.01 * np.abs(w1).sum() + 0.01 * (w1 ** 2).sum() + 0.3 * np.abs(b1).sum())
    got = net.evaluate(x, y, batch_size=len(x), return_dict=True)["loss"]
    assert_close(got, ce + penalty, terms=x.size, what="loss with penalties")
    assert_close(plain.evaluate(x, y, return_dict=True)["loss"], ce, terms=x.size, what="none")
    assert penalty > 0.05


def test_one_sgd_step_matches_torch_autograd_of_loss_plus_penalty():
    x, y = _data()
    net = _net(**REGS)
    start = {k: torch.tensor(v.copy(), requires_grad=True)
             for k, v in net.named_parameters().items()}
    history = net.fit(x, y, epochs=1, batch_size=len(x), shuffle=False, verbose=0)
    w0, b0, w1, b1 = start.values()
    pre = torch.tensor(x) @ w0 + b0
    logits = torch.tanh(pre) @ w1 + b1
    loss = (F.cross_entropy(logits, torch.tensor(y)) + 0.05 * (w0 ** 2).sum()
            + 0.02 * pre.abs().sum() / len(x) + 0.01 * w1.abs().sum()
            + 0.01 * (w1 ** 2).sum() + 0.3 * b1.abs().sum())
    loss.backward()
    assert_close(history.history["loss"][0], loss.item(), terms=x.size, what="logged loss")
    lr = net.optimizer.lr
    for (key, value), p in zip(net.named_parameters().items(), start.values()):
        assert_close(value, (p - lr * p.grad).detach().numpy(), terms=x.size, what=key)


@pytest.mark.parametrize("make", [
    lambda reg: L.Conv1D(3, 3, kernel_regularizer=reg, bias_regularizer=reg),
    lambda reg: L.Conv2D(2, 2, kernel_regularizer=reg, activity_regularizer=reg),
])
def test_convolutions_take_regularizers_and_save_them(make, tmp_path):
    rng = np.random.default_rng(2)
    shape = (6, 2) if "Conv1D" in repr(make(None)) else (5, 5, 2)
    net = Sequential([make(regularizers.L1L2(0.01, 0.02)), L.Flatten(), L.Dense(2)],
                     input_shape=shape, seed=0, dtype="float64").compile("sgd", "cross_entropy")
    x, y = rng.standard_normal((8, *shape)), rng.integers(0, 2, 8)
    conv = net.layers[0]
    plain = conv.forward(x, training=False)
    expected = 0.01 * np.abs(conv.parameters["W"]).sum() + 0.02 * (conv.parameters["W"] ** 2).sum()
    if conv.bias_regularizer is not None:
        b = conv.parameters["b"]
        expected += 0.01 * np.abs(b).sum() + 0.02 * (b ** 2).sum()
    if conv.activity_regularizer is not None:
        expected += (0.01 * np.abs(plain).sum() + 0.02 * (plain ** 2).sum()) / len(x)
    before = net.evaluate(x, y, return_dict=True)["loss"]
    conv.kernel_regularizer = conv.bias_regularizer = conv.activity_regularizer = None
    assert_close(before - net.evaluate(x, y, return_dict=True)["loss"], expected,
                 terms=plain.size, scale=before, what="penalty")
    net = Sequential([make("l2"), L.Flatten(), L.Dense(2)], input_shape=shape, seed=0,
                     dtype="float64").compile("sgd", "cross_entropy")
    save(net, tmp_path / "m.safetensors")
    loaded = load(tmp_path / "m.safetensors")
    assert loaded.layers[0].kernel_regularizer == regularizers.L2(0.01)
    assert loaded.evaluate(x, y, return_dict=True) == net.evaluate(x, y, return_dict=True)


def test_l1_drives_weights_to_zero():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 4))
    y = (x[:, 0] > 0).astype(np.int64)  # only input 0 matters

    def trained(reg):
        net = Sequential([L.Dense(2, kernel_regularizer=reg)], input_shape=(4,), seed=0,
                         dtype="float64").compile(optimizers.SGD(lr=0.1), "cross_entropy")
        net.fit(x, y, epochs=30, batch_size=16, rng=0, verbose=0)
        return net.layers[0].parameters["W"]

    free, sparse = trained(None), trained(regularizers.L1(0.05))
    # L1 moves each weight by lr * l1 = 0.005 toward 0 per step (120 steps: 0.6): the
    # useless inputs 1..3 end within a few such steps of 0; input 0 stays useful
    assert np.abs(free[1:]).min() > 0.05
    assert np.abs(sparse[1:]).max() < 0.05
    assert np.abs(sparse[0]).min() > 0.5


@pytest.mark.parametrize("make, error, message", [
    (lambda: regularizers.L1(-0.1), ValueError, r"L1: 'l1' must be a finite number >= 0; "
                                                r"received -0.1"),
    (lambda: regularizers.L2("big"), TypeError, r"L2: 'l2' must be a number >= 0; received"),
    (lambda: regularizers.L1L2(0.1, float("nan")), ValueError, r"L1L2: 'l2' must be a finite"),
    (lambda: L.Dense(3, kernel_regularizer="l3"), ValueError,
     r"Dense: 'kernel_regularizer' must be None, a regularizer or one of \['l1', 'l1_l2', "
     r"'l2'\]; received 'l3'"),
    (lambda: L.Conv2D(3, 3, bias_regularizer=0.01), TypeError,
     r"Conv2D: 'bias_regularizer' must be None, a regularizer"),
])
def test_bad_regularizers_are_refused(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_keras_names_and_defaults():
    assert regularizers.get("D", "r", "l1") == regularizers.L1(0.01)
    assert regularizers.get("D", "r", "L2") == regularizers.L2(0.01)
    assert regularizers.get("D", "r", "l1_l2") == regularizers.L1L2(0.01, 0.01)
    assert regularizers.L1L2().get_config() == {"l1": 0.0, "l2": 0.0}
    w = np.array([-2.0, 0.0, 3.0])
    assert regularizers.L1L2(0.5, 0.25)(w) == 0.5 * 5.0 + 0.25 * 13.0
    np.testing.assert_array_equal(regularizers.L1L2(0.5, 0.25).gradient(w),
                                  [-0.5 - 1.0, 0.0, 0.5 + 1.5])


def test_data_parallel_training_refuses_an_activity_regularizer():
    pytest.importorskip("mpi4py")
    net = Sequential([L.Dense(2, activity_regularizer="l1")], input_shape=(3,), seed=0,
                     dtype="float64").compile("sgd", "cross_entropy")
    with pytest.raises(ValueError, match=r"fit: distributed=True does not take layers with an "
                                         r"activity_regularizer"):
        net.fit(np.zeros((4, 3)), np.zeros(4, np.int64), distributed=True, verbose=0)


def test_embedding_takes_an_embeddings_regularizer(tmp_path):
    rng = np.random.default_rng(4)
    ids, y = rng.integers(0, 6, (10, 3)), rng.integers(0, 2, 10)
    net = Sequential([L.Embedding(6, 4, embeddings_regularizer=regularizers.L2(0.1)),
                      L.Flatten(), L.Dense(2)], input_shape=(3,), seed=0, dtype="float64")
    net.compile("sgd", "cross_entropy")
    table, w, b = (torch.tensor(v.copy(), requires_grad=True)
                   for v in net.named_parameters().values())
    logits = table[torch.tensor(ids)].reshape(10, -1) @ w + b
    loss = F.cross_entropy(logits, torch.tensor(y)) + 0.1 * (table ** 2).sum()
    loss.backward()
    history = net.fit(ids, y, epochs=1, batch_size=10, shuffle=False, verbose=0)
    assert_close(history.history["loss"][0], loss.item(), terms=ids.size, what="loss")
    lr = net.optimizer.lr
    assert_close(net.layers[0].parameters["W"], (table - lr * table.grad).detach().numpy(),
                 terms=ids.size, what="table")
    save(net, tmp_path / "e.safetensors")
    assert load(tmp_path / "e.safetensors").layers[0].embeddings_regularizer == \
        regularizers.L2(0.1)
