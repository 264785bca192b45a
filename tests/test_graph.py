"""Graph models (``handgrad.Input``/``handgrad.Model``): forward equals the same layers
called by hand, backward equals central finite differences (float64) for every input and
every parameter, on graphs with two inputs and two outputs, a shared layer, fan-out,
merges, nested models, ``None`` output gradients, an Input that is an output and
cross-attention; re-entrancy and threads; gradcheck on graphs. detect_anomaly, errors
and structure: test_graph_errors.py; against torch: test_graph_torch.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import assert_close, finite_max, gradcheck

from graph_cases import F64, assert_matches_finite_differences, branching, inner_block, randn


def by_hand(model, xa, xb, dy1, dy2):
    """``branching`` run layer by layer on arrays, forward then backward in reverse."""
    get = model.get_layer
    ha = get("tanh").forward(get("shared").forward(xa))
    hb = get("shared").forward(xb)
    s = get("add").forward([ha, hb])
    p = get("mul").forward([s, hb])
    c = get("cat").forward([p, xa])
    ys = [get("logits").forward(c), get("score").forward(s)]
    dp, da_cat = get("cat").backward(get("logits").backward(dy1))
    ds_mul, dhb_mul = get("mul").backward(dp)
    ds = ds_mul + get("score").backward(dy2)
    dha, dhb_add = get("add").backward(ds)
    dxb = get("shared").backward(dhb_mul + dhb_add)  # the latest call first
    dxa = get("shared").backward(get("tanh").backward(dha)) + da_cat
    return ys, [dxa, dxb]


def test_forward_and_backward_equal_the_layers_called_by_hand():
    model = branching()
    xa, xb = randn(3, 4, seed=1), randn(3, 4, seed=2)
    dy1, dy2 = randn(3, 3, seed=3), randn(3, 1, seed=4)
    model.zero_grad()
    ys = model.forward([xa, xb])
    dxs = model.backward([dy1, dy2])
    ours = {k: g.copy() for k, g in model.named_gradients().items()}
    model.zero_grad()
    hand_ys, hand_dxs = by_hand(model, xa, xb, dy1, dy2)
    for got, want in zip(ys + dxs, hand_ys + hand_dxs):
        np.testing.assert_array_equal(got, want)  # the same operations on the same arrays
    for key, grad in model.named_gradients().items():
        np.testing.assert_array_equal(ours[key], grad, err_msg=key)
    for layer in model.layers:
        assert layer._caches == []
    assert model._caches == []


def test_shared_layer_parameters_appear_once_and_its_gradients_add():
    model = branching()
    assert list(model.named_parameters()) == [
        "shared.W", "shared.b", "logits.W", "logits.b", "score.W", "score.b"]
    assert model.named_parameters()["shared.W"] is model.get_layer("shared").parameters["W"]
    assert [node.layer.name for node in model.nodes].count("shared") == 2
    assert model.count_params() == 4 * 4 + 4 + 8 * 3 + 3 + 4 + 1


@pytest.mark.parametrize("dys", ["both", "first", "second"])
def test_two_input_two_output_graph_matches_finite_differences(dys):
    model = branching()
    dy1, dy2 = randn(2, 3, seed=5), randn(2, 1, seed=6)
    dys = {"both": [dy1, dy2], "first": [dy1, None], "second": [None, dy2]}[dys]
    assert_matches_finite_differences(model, [randn(2, 4, seed=7), randn(2, 4, seed=8)], dys)


def test_none_for_every_output_gives_zero_gradients_and_consumes_the_caches():
    model = branching()
    model.zero_grad()
    model.forward([randn(2, 4), randn(2, 4, seed=1)])
    dxa, dxb = model.backward([None, None])
    assert not dxa.any() and not dxb.any() and dxa.shape == (2, 4)
    assert not any(g.any() for g in model.named_gradients().values())
    assert all(layer._caches == [] for layer in model.layers)


def test_an_input_that_is_an_output_gets_its_output_gradient():
    a, b = hg.Input((3,), name="a"), hg.Input((2,), name="b")
    model = hg.Model([a, b], [a, L.Dense(2, name="d")(L.Concatenate()([a, b])), b],
                     dtype=F64, seed=0)
    assert model.output_names == ["a", "d", "b"]
    xa, xb = randn(2, 3), randn(2, 2, seed=1)
    ya, _, yb = model.forward([xa, xb])
    np.testing.assert_array_equal(ya, xa)
    np.testing.assert_array_equal(yb, xb)
    dxs = assert_matches_finite_differences(
        model, [xa, xb], [randn(2, 3, seed=2), randn(2, 2, seed=3), None])
    model.forward([xa, xb])
    dya = randn(2, 3, seed=4)
    np.testing.assert_array_equal(model.backward([dya, None, None])[0], dya)
    assert dxs[1].shape == (2, 2)


def test_a_model_called_twice_inside_another_model():
    block = inner_block("block")
    a, b = hg.Input((4,), name="a"), hg.Input((4,), name="b")
    ya, yb = block(a), block(b)
    model = hg.Model([a, b], [L.Multiply(name="mul")([ya, yb]), L.Dense(2, name="head")(ya)],
                     dtype=F64, seed=0)
    assert list(model.named_parameters())[:2] == ["block.hid.W", "block.hid.b"]
    assert len(model.named_parameters()) == 6  # the block's 4 once, the head's 2
    xa, xb = randn(2, 4, seed=1), randn(2, 4, seed=2)
    want_a, want_b = block.forward(xa, training=False), block.forward(xb, training=False)
    got = model.forward([xa, xb], training=False)
    np.testing.assert_array_equal(got[0], want_a * want_b)
    np.testing.assert_array_equal(got[1], model.get_layer("head").forward(want_a, False))
    assert_matches_finite_differences(model, [xa, xb], [randn(2, 4, seed=3), None])
    assert_matches_finite_differences(model, [xa, xb], [randn(2, 4, seed=4),
                                                        randn(2, 2, seed=5)])


def test_a_model_as_a_step_of_sequential():
    block = inner_block("block")
    model = Sequential([L.Dense(4, name="stem"), block, L.Dense(2, name="head")],
                       dtype=F64, seed=0, input_shape=(3,))
    assert model.output_shape((3,)) == (2,)
    assert "block.hid.W" in model.named_parameters()
    x = randn(2, 3)
    want = model["head"].forward(block.forward(model["stem"].forward(x, False), False), False)
    np.testing.assert_array_equal(model.forward(x, training=False), want)
    assert_matches_finite_differences(model, [x], [randn(2, 2, seed=1)])


def test_model_in_sequential_refuses_another_input_shape():
    with pytest.raises(ValueError, match=r"takes per-example input shape\(s\) \(4,\).*\(5,\)"):
        Sequential([L.Dense(5), inner_block("block")], input_shape=(3,), dtype=F64)


def test_cross_attention_and_a_recurrent_layer_in_a_graph():
    q, kv = hg.Input((3, 4), name="q"), hg.Input((5, 4), name="kv")
    mha = L.MultiHeadAttention(4, 2, name="mha")
    ctx = L.LSTM(4, name="lstm")(kv)
    y1 = mha([q, ctx])           # cross-attention (key = value)
    y2 = mha(y1)                 # the same layer, self-attention
    y3 = L.MultiHeadAttention(4, 1, packed=False, name="sep")([y2, ctx, kv])
    model = hg.Model([q, kv], [y3, L.GlobalAvgPool1D(name="pool")(y1)], dtype=F64, seed=0)
    xq, xkv = randn(2, 3, 4, seed=1), randn(2, 5, 4, seed=2)
    hand = mha.forward(xq, False, key=model.get_layer("lstm").forward(xkv, False),
                       value=model.get_layer("lstm").forward(xkv, False))
    np.testing.assert_array_equal(model.forward([xq, xkv], training=False)[1],
                                  hand.mean(axis=1))
    assert_matches_finite_differences(model, [xq, xkv], [randn(2, 3, 4, seed=3),
                                                         randn(2, 4, seed=4)])


def test_integer_inputs_get_no_gradient():
    ids, feats = hg.Input((5,), name="ids", dtype="int64"), hg.Input((5, 3), name="feats")
    h = L.Concatenate()([L.Embedding(7, 3, name="emb")(ids), feats])
    model = hg.Model([ids, feats], L.GlobalAvgPool1D()(L.Dense(2, name="d")(h)), dtype=F64,
                     seed=0)
    x = [np.random.default_rng(0).integers(0, 7, (2, 5)), randn(2, 5, 3)]
    dids, dfeats = assert_matches_finite_differences(model, x, [randn(2, 2, seed=1)])
    assert dids is None and dfeats.shape == (2, 5, 3)


# ---------------------------------------------------------------- re-entrancy
def test_a_model_called_twice_inside_one_forward_accumulates_both_calls():
    model = branching()
    xs = [[randn(2, 4, seed=i), randn(2, 4, seed=i + 10)] for i in range(2)]
    dys = [[randn(2, 3, seed=i + 20), randn(2, 1, seed=i + 30)] for i in range(2)]
    dxs, total, size = [], {}, {}
    for x, dy in zip(xs, dys):
        model.zero_grad()
        model.forward(x)
        dxs.append(model.backward(dy))
        for key, grad in model.named_gradients().items():
            total[key] = total.get(key, 0) + grad
            size[key] = size.get(key, 0) + np.abs(grad)
    inputs = [hg.Input((4,), name=name) for name in ("a0", "b0", "a1", "b1")]
    outer = hg.Model(inputs, [*model(inputs[:2]), *model(inputs[2:])], dtype=F64)
    model.zero_grad()
    outer.forward([*xs[0], *xs[1]])
    got = outer.backward([*dys[0], *dys[1]])  # the shared model's later call first
    for g, want in zip(got, [*dxs[0], *dxs[1]]):
        np.testing.assert_array_equal(g, want)
    for key, grad in model.named_gradients().items():  # 2 calls x (up to) 2 shared uses
        assert_close(grad, total[key], dtype=F64, terms=4, scale=finite_max(size[key]),
                     what=key)


def test_a_new_outermost_forward_releases_the_unconsumed_one():
    model = branching()
    xs = [[randn(2, 4, seed=i), randn(2, 4, seed=i + 10)] for i in range(2)]
    dy = [randn(2, 3, seed=20), randn(2, 1, seed=30)]
    model.forward(xs[0])
    model.forward(xs[1])  # the first forward was never backpropagated: dropped
    assert len(model.get_layer("shared")._caches) == 2  # its two calls in one forward
    model.backward(dy)
    assert all(not layer._caches for _, layer in model.walk())
    with pytest.raises(RuntimeError, match="without a matching forward"):
        model.backward(dy)


def test_threads_running_inference_on_one_model_agree_with_serial_runs():
    model = branching()
    xs = [[randn(4, 4, seed=i), randn(4, 4, seed=i + 50)] for i in range(6)]
    want = [model.forward(x, training=False) for x in xs]
    got = [None] * len(xs)

    def run(i):
        for _ in range(20):
            got[i] = model.forward(xs[i], training=False)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)
    assert model._caches == []


# ---------------------------------------------------------------- gradcheck
def test_gradcheck_reports_every_input_and_parameter_of_a_graph():
    model = branching()
    x = [randn(2, 4, seed=1), randn(2, 4, seed=2)]
    result = gradcheck(model, x, rng=0)
    assert result.passed, result.errors
    assert set(result.errors) == {"x[0]", "x[1]", *model.named_parameters()}
    by_name = gradcheck(model, {"b": x[1], "a": x[0]}, rng=0)
    assert by_name.passed and set(by_name.errors) == {"a", "b", *model.named_parameters()}
    assert by_name.errors["b"] == result.errors["x[1]"]


class WrongGradient(L.Layer):
    """y = 2 x whose backward forgets the factor 2."""

    def _forward(self, x, training):
        return 2 * x, None

    def _backward(self, dy, cache):
        return dy, {}


def test_gradcheck_finds_a_wrong_backward_in_one_branch():
    a, b = hg.Input((3,), name="a"), hg.Input((3,), name="b")
    y = L.Add()([WrongGradient(name="wrong")(a), L.Dense(3, name="d")(b)])
    result = gradcheck(hg.Model([a, b], y, dtype=F64, seed=0),
                       [randn(2, 3), randn(2, 3, seed=1)], rng=0)
    assert not result.passed
    failed = {k for k, e in result.errors.items() if e > result.bounds[k]}
    assert failed == {"x[0]"}


def test_gradcheck_refuses_float32_parameters():
    with pytest.raises(TypeError, match="float64"):
        gradcheck(branching(dtype="float32"), [randn(2, 4), randn(2, 4)])
    with pytest.raises(ValueError, match=r"input names \['a', 'b'\].*\['a', 'c'\]"):
        gradcheck(branching(), {"a": randn(2, 4), "c": randn(2, 4)})


def test_gradcheck_takes_a_list_for_a_layer_with_several_inputs():
    result = gradcheck(L.MultiHeadAttention(4, 2), [randn(2, 3, 4), randn(2, 5, 4, seed=1)],
                       rng=0)
    assert result.passed and set(result.errors) == {"x[0]", "x[1]", "W_in", "b_in", "W_out",
                                                    "b_out"}
    assert gradcheck(L.Multiply(), [randn(2, 3), randn(2, 3, seed=1)], rng=0).passed
