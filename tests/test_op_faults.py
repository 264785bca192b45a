"""Op-level faults and edge cases.

- Every ``*_backward`` of ``handgrad.ops`` and ``handgrad.ops.reference`` (found by
  name, so a new op cannot slip through) refuses ``None``, a non-cache object and the
  cache of another op with a TypeError naming itself and the forward it expects.
- Every normalization refuses ``eps <= 0``, as ``torch`` does for batch norm.
- Empty batches and features (without torch; ``test_op_empty_axes.py`` compares every
  op family with torch on each empty axis).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close, finite_max

from optional_torch import F, needs_torch, torch


# ------------------------------------------------------------------ 1. caches
def _public_backwards():
    found = []
    for module in (ops, reference):
        for name in sorted(dir(module)):
            if name.endswith("_backward") and callable(getattr(module, name)):
                found.append(pytest.param(module, name, id=f"{module.__name__}.{name}"))
    return found


BACKWARDS = _public_backwards()


def _cache_of(op):
    """A genuine cache of ``op``, to feed to the backward of another op."""
    if op == "relu":
        return ops.relu(np.ones(3))[1]
    return ops.linear(np.ones((2, 3)), np.ones((3, 4)))[1]


def test_the_backward_list_is_complete():
    found = {module: {p.values[1] for p in BACKWARDS if p.values[0] is module}
             for module in (ops, reference)}
    assert {"conv2d_backward", "lstm_backward", "relu_backward"} <= found[ops]
    assert {"conv2d_backward", "lstm_backward"} <= found[reference] <= found[ops]
    for module, names in found.items():
        for name in names:
            assert callable(getattr(module, name.removesuffix("_backward")))


@pytest.mark.parametrize("module, name", BACKWARDS)
@pytest.mark.parametrize("bad", ["None", "int", "dict", "other op"])
def test_every_backward_refuses_a_wrong_cache(module, name, bad):
    forward = name.removesuffix("_backward")
    other = "linear" if forward == "relu" else "relu"
    cache, received = {"None": (None, "None"), "int": (1, "1 (int)"), "dict": ({}, "{} (dict)"),
                       "other op": (_cache_of(other), f"the cache of {other}")}[bad]
    with pytest.raises(TypeError) as info:
        getattr(module, name)(np.zeros(3), cache)
    assert str(info.value) == (f"{name}: 'cache' must be the cache returned by {forward}; "
                               f"received {received}")


X3, X4 = np.ones((2, 6, 3)), np.ones((2, 6, 6, 3))
SEQ, W2 = np.ones((2, 4, 3)), np.ones((3, 3, 3, 4))
SIBLINGS = {  # caches of the same class from a sibling op: only ``cache.op`` tells them apart
    "max_pool2d<-avg_pool2d": (ops.max_pool2d_backward, lambda: ops.avg_pool2d(X4, 2)),
    "avg_pool1d<-max_pool1d": (ops.avg_pool1d_backward, lambda: ops.max_pool1d(X3, 2)),
    "max_pool2d<-max_pool1d": (ops.max_pool2d_backward, lambda: ops.max_pool1d(X3, 2)),
    "global_max_pool<-global_avg_pool": (ops.global_max_pool_backward,
                                         lambda: ops.global_avg_pool(X4)),
    "conv_transpose2d<-conv2d": (ops.conv_transpose2d_backward, lambda: ops.conv2d(X4, W2)),
    "batch_norm<-layer_norm": (ops.batch_norm_backward, lambda: ops.layer_norm(X4, 3)),
    "instance_norm<-group_norm": (ops.instance_norm_backward, lambda: ops.group_norm(X4, 3)),
    "lstm<-gru": (ops.lstm_backward, lambda: ops.gru(SEQ, np.ones((3, 6)), np.ones((2, 6)))),
    "softmax<-log_softmax": (ops.softmax_backward, lambda: ops.log_softmax(X3)),
    "loop max_pool2d<-avg_pool2d": (reference.max_pool2d_backward,
                                    lambda: reference.avg_pool2d(X4, 2)),
    "loop batch_norm<-layer_norm": (reference.batch_norm_backward,
                                    lambda: reference.layer_norm(X4, 3)),
    "loop gru<-rnn": (reference.gru_backward,
                      lambda: reference.rnn(SEQ, np.ones((3, 2)), np.ones((2, 2)))),
}


@pytest.mark.parametrize("key", list(SIBLINGS))
def test_backward_refuses_the_cache_of_a_sibling_op(key):
    backward, forward = SIBLINGS[key]
    expected, given = (part.removeprefix("loop ") for part in key.split("<-"))
    with pytest.raises(TypeError, match=rf"^{backward.__name__}: 'cache' must be the cache "
                                        rf"returned by {expected}; received the cache of "
                                        rf"{given}$"):
        backward(np.zeros(3), forward()[-1])


@pytest.mark.parametrize("backward, forward", [
    (reference.max_pool2d_backward, lambda: ops.max_pool2d(X4, 2)),
    (ops.batch_norm_backward, lambda: reference.batch_norm(X4)),
    (reference.lstm_backward, lambda: ops.lstm(SEQ, np.ones((3, 8)), np.ones((2, 8)))),
    (ops.scaled_dot_product_attention_backward,
     lambda: reference.scaled_dot_product_attention(SEQ, SEQ, SEQ)),
], ids=["pool", "norm", "lstm", "attention"])
def test_the_other_implementations_cache_is_named(backward, forward):
    with pytest.raises(TypeError, match=r"from another implementation .*expected a "):
        backward(np.zeros(3), forward()[-1])


def test_shared_caches_work_across_implementations():
    """conv and embedding twins keep the same data, so their caches are interchangeable."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 5, 5, 3)), rng.standard_normal((3, 3, 3, 4))
    y, cache = reference.conv2d(x, w, padding=1)
    dy = rng.standard_normal(y.shape)
    for ours, twin in zip(ops.conv2d_backward(dy, cache), reference.conv2d_backward(dy, cache)):
        assert_close(ours, twin, terms=36, scale=finite_max(x) * finite_max(dy) * 9)
    table, ids = rng.standard_normal((5, 3)), np.array([[0, 4, 4], [1, 0, 2]])
    y, cache = ops.embedding(ids, table)
    dy = rng.standard_normal(y.shape)
    assert_close(reference.embedding_backward(dy, cache), ops.embedding_backward(dy, cache),
                 terms=ids.size, scale=np.abs(dy).sum())


# ------------------------------------------------------------ 2. eps must be > 0
NORMS = {
    "batch_norm": lambda eps: ops.batch_norm(X4, eps=eps),
    "batch_norm-eval": lambda eps: ops.batch_norm(X4, None, None, np.zeros(3), np.ones(3),
                                                  training=False, eps=eps),
    "instance_norm": lambda eps: ops.instance_norm(X4, eps=eps),
    "layer_norm": lambda eps: ops.layer_norm(X4, 3, eps=eps),
    "group_norm": lambda eps: ops.group_norm(X4, 3, eps=eps),
    "loop batch_norm": lambda eps: reference.batch_norm(X4, eps=eps),
    "loop layer_norm": lambda eps: reference.layer_norm(X4, 3, eps=eps),
    "BatchNorm": lambda eps: L.BatchNorm(eps=eps),
    "InstanceNorm": lambda eps: L.InstanceNorm(eps=eps),
    "LayerNorm": lambda eps: L.LayerNorm(eps=eps),
    "GroupNorm": lambda eps: L.GroupNorm(3, eps=eps),
}


@pytest.mark.parametrize("eps", [0.0, -1e-5, 0])
@pytest.mark.parametrize("key", list(NORMS))
def test_every_normalization_refuses_eps_not_positive(key, eps):
    owner = key.removeprefix("loop ").removesuffix("-eval")
    with pytest.raises(ValueError, match=rf"^{owner}: 'eps' must be a finite real number > 0; "
                                         rf"received {eps!r} "):
        NORMS[key](eps)


@pytest.mark.parametrize("key", [k for k in NORMS if k[0].islower() and "eval" not in k])
def test_a_constant_channel_normalizes_to_zero(key):
    """With eps > 0 a constant group of the input's statistics gives xhat = 0 (with
    eps = 0 it was 0 / 0 = NaN)."""
    y, _ = NORMS[key](1e-5)
    np.testing.assert_array_equal(y, np.zeros_like(y))


@needs_torch
def test_torch_refuses_eps_zero_in_batch_norm_training_too():
    with pytest.raises(ValueError, match="eps must be positive"):
        F.batch_norm(torch.ones(4, 3), None, None, training=True, eps=0.0)


# ---------------------------------------------- 3. empty batches and features
@pytest.mark.parametrize("module", [ops, reference], ids=["ops", "loops"])
@pytest.mark.parametrize("name, call", [
    ("batch_norm", lambda m, x, g, b: m.batch_norm(x, g, b, np.zeros(4), np.ones(4))),
    ("instance_norm", lambda m, x, g, b: m.instance_norm(x, g, b)),
    ("layer_norm", lambda m, x, g, b: m.layer_norm(x, 4, g, b)),
    ("group_norm", lambda m, x, g, b: m.group_norm(x, 2, g, b)),
])
def test_norms_of_an_empty_batch(module, name, call):
    """N = 0: an empty y and dx, zero dgamma and dbeta (PyTorch's answer), running
    statistics unchanged."""
    x = np.zeros((0, 3, 4))
    y, cache = call(module, x, np.ones(4), np.ones(4))
    dx, dgamma, dbeta = getattr(module, name + "_backward")(np.zeros((0, 3, 4)), cache)
    assert y.shape == dx.shape == x.shape
    np.testing.assert_array_equal(dgamma, np.zeros(4))
    np.testing.assert_array_equal(dbeta, np.zeros(4))
    running_mean, running_var = np.full(4, 0.5), np.full(4, 2.0)
    module.batch_norm(x, running_mean=running_mean, running_var=running_var)
    np.testing.assert_array_equal(running_mean, np.full(4, 0.5))
    np.testing.assert_array_equal(running_var, np.full(4, 2.0))


def test_linear_with_zero_input_features_is_the_bias():
    rng = np.random.default_rng(1)
    b, dy = rng.standard_normal(4), rng.standard_normal((3, 4))
    y, cache = ops.linear(np.zeros((3, 0)), np.zeros((0, 4)), b)
    np.testing.assert_array_equal(y, np.broadcast_to(b, (3, 4)))
    dx, dw, db = ops.linear_backward(dy, cache)
    assert dx.shape == (3, 0) and dw.shape == (0, 4)
    assert_close(db, dy.sum(axis=0), terms=3, scale=np.abs(dy).sum(axis=0).max())
    y, cache = ops.linear(np.ones((3, 5)), np.ones((5, 0)), np.zeros(0))
    dx, dw, db = ops.linear_backward(np.zeros((3, 0)), cache)
    assert y.shape == (3, 0) and dw.shape == (5, 0) and db.shape == (0,)
    np.testing.assert_array_equal(dx, np.zeros((3, 5)))


@pytest.mark.parametrize("call, shape", [
    (lambda x: ops.max_pool2d(x, 2), (2, 6, 6, 0)),
    (lambda x: ops.avg_pool1d(x, 2), (2, 6, 0)),
    (lambda x: reference.max_pool1d(x, 2), (2, 6, 0)),
    (lambda x: ops.global_avg_pool(x), (2, 6, 6, 0)),
    (lambda x: reference.global_max_pool(x), (2, 6, 0)),
    (lambda x: ops.max_pool2d(x, 2, padding=1), (2, 0, 6, 3)),
    (lambda x: ops.conv2d(x, np.ones((3, 3, 3, 2)), padding=2), (2, 0, 6, 3)),
])
def test_pooling_and_convolution_refuse_empty_axes(call, shape):
    with pytest.raises(ValueError, match=r"'x' \(N, .*C\) must not have an empty axis \(only "
                                         r"N may be 0\); received an array of shape "
                                         + re.escape(str(shape)) + "$"):
        call(np.ones(shape))

