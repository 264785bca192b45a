"""Graph models: detect_anomaly names the node (the call of a shared layer, nested
graphs), each activation is checked once; every construction, forward and backward error
is clear; output names, frozen layers and the config round trip."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.inspect import AnomalyError, detect_anomaly
from handgrad.model import Sequential
from test_debug import spy_on_checks

from graph_cases import F64, branching, inner_block, randn


# ------------------------------------------------------------ detect_anomaly
class Reciprocal(L.Layer):
    """y = 1 / x; dx = -dy / x^2 (inf where x = 0)."""

    def _forward(self, x, training):
        with np.errstate(divide="ignore"):
            return 1.0 / x, x

    def _backward(self, dy, x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return -dy / (x * x), {}


class Double(L.Layer):
    """y = 2 x, overriding ``forward`` (so the graph reports it, as it does recurrent and
    attention layers); its backward is Layer.backward's."""

    def forward(self, x, training=True):
        self.ensure_built(x.shape[1:])
        if training:
            self._caches.append(None)
        with np.errstate(over="ignore"):
            return 2 * x

    def _forward(self, x, training):
        return 2 * x, None

    def _backward(self, dy, cache):
        return 2 * dy, {}


def anomalous(name="net"):
    """``recip`` called on ``a`` (finite) then on ``b`` (which may hold a zero)."""
    a, b = hg.Input((3,), name="a"), hg.Input((3,), name="b")
    recip = Reciprocal(name="recip")
    y = L.Add(name="add")([recip(L.Dense(3, name="d")(a)), Double(name="double")(recip(b))])
    return hg.Model([a, b], y, dtype=F64, seed=0, name=name)


def test_detect_anomaly_names_the_call_of_a_shared_layer_forward_and_backward():
    model = anomalous()
    xb = np.ones((2, 3))
    xb[1, 2] = 0.0
    with pytest.raises(AnomalyError) as info, detect_anomaly(model):
        model.forward([np.ones((2, 3)), xb])
    error = info.value
    assert error.layer is model.get_layer("recip") and error.pass_name == "forward"
    assert error.call == "recip[1]" and error.node is model.nodes[-3]
    assert ("at node 2 'recip[1]' of Model 'net', the 2nd of 2 calls of the shared "
            "Reciprocal 'recip', called on 'b'") in str(error)
    model.clear_caches()

    xb = np.ones((2, 3))
    model.forward([np.ones((2, 3)), xb])
    xb[0, 0] = 0.0  # the backward of the second call divides by it
    with pytest.raises(AnomalyError) as info, detect_anomaly(model):
        model.backward(np.ones((2, 3)))
    assert info.value.pass_name == "backward" and info.value.call == "recip[1]"
    assert "1 inf values in its dx" in str(info.value)


def test_detect_anomaly_reports_layers_overriding_forward_and_nested_nodes():
    inner = anomalous("inner")
    a, b = hg.Input((3,), name="a"), hg.Input((3,), name="b")
    outer = hg.Model([a, b], L.Tanh(name="tanh")(inner([a, b])), name="outer")
    with detect_anomaly(outer):
        outer.forward([np.ones((2, 3)), np.full((2, 3), 1e300)], training=False)
    with pytest.raises(AnomalyError) as info, detect_anomaly(outer):
        # 1 / 1e-308 is finite; doubling it overflows, in the layer overriding forward
        outer.forward([np.ones((2, 3)), np.full((2, 3), 1e-308)], training=False)
    error = info.value
    assert error.layer is inner.get_layer("double") and error.path == "inner.double"
    assert "6 inf values in its output" in str(error)
    assert "at node 3 'double' of Model 'inner', called on 'recip[1]'" in str(error)
    assert "; at node 0 'inner' of Model 'outer', called on 'a', 'b'" in str(error)
    assert error.node is inner.nodes[3] and error.call == "double"


def test_each_activation_of_a_graph_is_checked_once(monkeypatch):
    model = anomalous()
    x, dy = [np.ones((2, 3)), np.ones((2, 3))], np.ones((2, 3))
    calls = spy_on_checks(monkeypatch)
    with detect_anomaly(model):
        model.forward(x)
        model.backward(dy)
    forward = [name for name, p in calls if p == "forward"]
    assert sorted(forward) == ["add", "d", "double", "recip", "recip"]
    assert len([c for c in calls if c[1] == "backward"]) == 5
    chain = Sequential([L.Dense(4, name="pre"), inner_block("block"), Double(name="dbl")],
                       dtype=F64, seed=0, input_shape=(3,))
    calls.clear()
    with detect_anomaly(chain):
        chain.forward(np.ones((2, 3)))
        chain.backward(np.ones((2, 4)))
    assert [n for n, p in calls if p == "forward"] == ["pre", "hid", "act", "out", "dbl"]
    assert [n for n, p in calls if p == "backward"] == ["dbl", "out", "act", "hid", "pre"]


# ------------------------------------------------------------------- errors
def test_graph_construction_errors():
    a, b = hg.Input((4,), name="a"), hg.Input((4,), name="b")
    y = L.Add()([L.Dense(3)(a), L.Dense(3)(b)])
    with pytest.raises(ValueError, match=r"depends on SymbolicTensor 'b'.*not in 'inputs'"):
        hg.Model(a, y)
    with pytest.raises(TypeError, match=r"'outputs' must be a tensor.*array of shape \(3,\)"):
        hg.Model(a, np.ones(3))
    with pytest.raises(TypeError, match=r"'inputs' must be a tensor.*received 'a' \(str\)"):
        hg.Model("a", y)
    with pytest.raises(ValueError, match="two layers are named 'd'"):
        hg.Model(a, L.Dense(2, name="d")(L.Dense(2, name="d")(a)))
    with pytest.raises(ValueError, match="Inputs' names must be unique"):
        hg.Model([a, hg.Input((4,), name="a")], L.Dense(2)(a))
    with pytest.raises(ValueError, match=r"must be handgrad\.Input tensors, not the outputs"):
        hg.Model(y, L.Dense(2)(y))
    with pytest.raises(ValueError, match="the same Input appears twice"):
        hg.Model([a, a, b], y)
    with pytest.raises(TypeError, match=r"received an array of shape \(2, 4\).*use "
                                        r"Dense.forward\(x\)"):
        L.Dense(3)(np.ones((2, 4)))
    # a model called on arrays is inference (Keras's model(x)); mixing arrays into a graph
    # call is refused
    with pytest.raises(TypeError, match=r"received \[an array.*, an array of shape \(2, 4\).*use "
                                        r"Model.forward\(x\)"):
        branching()([a, np.ones((2, 4))])
    with pytest.raises(ValueError, match=r"Add cannot be called.*needs at least 2 inputs"):
        L.Add()([a])
    with pytest.raises(ValueError, match=r"Concatenate.*\(4,\), \(2, 2\).*must match"):
        L.Concatenate()([a, hg.Input((2, 2))])
    with pytest.raises(ValueError, match=r"Dense.*cannot be called.*takes one input tensor"):
        L.Dense(2)([a, b])
    with pytest.raises(TypeError, match=r"'shape' must be a tuple of ints.*received 4"):
        hg.Input(4)


@pytest.mark.parametrize("x, message", [
    (lambda xa, xb: [xa], r"'x' must hold 2 entries \(one per input: \['a', 'b'\]\); "
                          r"received 1"),
    (lambda xa, xb: xa, r"'x' must hold 2 entries"),
    (lambda xa, xb: [xa, np.ones((2, 5))], r"input 'b' must have shape \(N, 4\); received "
                                           r"an array of shape \(2, 5\)"),
    (lambda xa, xb: [xa, np.ones((3, 4))], "same batch size; input 'b' has 3, the first has 2"),
    (lambda xa, xb: {"a": xa, "c": xb}, r"keys must be \['a', 'b'\]; missing \['b'\], "
                                         r"unexpected \['c'\]"),
    (lambda xa, xb: [xa, None], r"input 'b' must have shape \(N, 4\); received None"),
])
def test_forward_input_errors(x, message):
    with pytest.raises(ValueError, match=message):
        branching().forward(x(np.ones((2, 4)), np.ones((2, 4))))


def test_forward_dtype_error_names_the_layer():
    with pytest.raises(TypeError, match="'shared': input dtype float32 does not match"):
        branching().forward([np.ones((2, 4), np.float32), np.ones((2, 4), np.float32)])


@pytest.mark.parametrize("dy, message", [
    ([np.ones((2, 3))], r"'dy' must hold 2 entries \(one per output: \['logits', "
                        r"'score'\]\); received 1"),
    ([np.ones((2, 4)), None], r"gradient of output 'logits' must have shape \(2, 3\); "
                              r"received an array of shape \(2, 4\)"),
    ({"logits": np.ones((2, 3))}, r"missing \['score'\]"),
])
def test_backward_errors_leave_the_forward_for_a_correct_backward(dy, message):
    model = branching()
    model.forward([np.ones((2, 4)), np.ones((2, 4))])
    with pytest.raises(ValueError, match=message):
        model.backward(dy)
    model.backward([np.ones((2, 3)), None])  # the cache is still there
    with pytest.raises(RuntimeError, match=r"backward\(\) called without a matching "
                                           r"forward\(x, training=True\)"):
        model.backward([np.ones((2, 3)), None])


def test_backward_after_an_inference_forward_is_refused():
    model = branching()
    model.forward([np.ones((2, 4)), np.ones((2, 4))], training=False)
    with pytest.raises(RuntimeError, match="without a matching forward"):
        model.backward({"logits": np.ones((2, 3)), "score": None})


# -------------------------------------------------------------- structure
def test_outputs_of_one_shared_layer_get_distinct_names():
    a, b = hg.Input((3,), name="a"), hg.Input((3,), name="b")
    head = L.Dense(2, name="head")
    model = hg.Model([a, b], [head(a), head(b)], dtype=F64, seed=0)
    assert model.output_names == ["head", "head_1"]
    ya, yb = model.forward({"a": randn(2, 3), "b": randn(2, 3, seed=1)}, training=False)
    np.testing.assert_array_equal(ya, head.forward(randn(2, 3), training=False))
    np.testing.assert_array_equal(yb, head.forward(randn(2, 3, seed=1), training=False))


def test_a_frozen_layer_stays_frozen_in_a_trainable_model():
    block = inner_block("block")
    block.trainable = False
    a = hg.Input((4,), name="a")
    model = hg.Model(a, L.Dense(2, name="head")(block(a)), dtype=F64, seed=0)
    assert model.trainable and not block.trainable
    assert set(model.named_parameters(trainable_only=True)) == {"head.W", "head.b"}
    model.forward(randn(2, 4))
    model.backward(np.ones((2, 2)))
    assert not any(g.any() for g in block.named_gradients().values())
    frozen = hg.Model(a, L.Dense(2, name="top")(a), trainable=False)
    assert not frozen.get_layer("top").trainable


def test_config_round_trip_rebuilds_the_same_graph():
    block = inner_block("block")
    a, b = hg.Input((4,), name="a"), hg.Input((4,), name="b")
    shared = L.Dense(4, name="shared")
    y = L.Concatenate(name="cat")([block(shared(a)), block(shared(b)), a])
    model = hg.Model([a, b], [y, L.Dense(1, name="score")(y)], dtype=F64, seed=0)
    twin = hg.Model.from_config(model.get_config())
    assert [n.layer.name for n in twin.nodes] == [n.layer.name for n in model.nodes]
    assert list(twin.named_parameters()) == list(model.named_parameters())
    for key, value in model.named_parameters().items():
        twin.named_parameters()[key][...] = value
    x = [randn(2, 4), randn(2, 4, seed=1)]
    for got, want in zip(twin.forward(x, training=False), model.forward(x, training=False)):
        np.testing.assert_array_equal(got, want)


def test_a_nested_model_without_dtype_takes_the_outer_dtype_and_keeps_its_weights():
    def inner_model():
        x = hg.Input((4,))
        return hg.Model(x, L.Dense(3)(L.Tanh()(L.Dense(5)(x))))

    def outer_model(inner):
        y = hg.Input((4,))
        return hg.Model(y, L.Dense(2)(inner(y)), dtype="float64", seed=0)

    inner = inner_model()
    kept = {k: v.copy() for k, v in inner.named_parameters().items()}
    outer = outer_model(inner)
    assert all(p.dtype == np.float64 for p in outer.named_parameters().values())
    for key, value in inner.named_parameters().items():  # the values are its own
        np.testing.assert_array_equal(value, kept[key].astype(np.float64), err_msg=key)
    inside_sequential = Sequential([inner_model(), L.Dense(2)], seed=1, dtype="float64")
    assert inside_sequential.predict(np.zeros((2, 4))).dtype == np.float64


def test_a_loaded_model_nested_in_sequential_keeps_its_weights():
    """Pretrained weights loaded into a Model made without a seed survive being wrapped in
    Sequential([...]) (they were silently re-initialized)."""
    x = hg.Input((4,))
    backbone = hg.Model(x, L.Dense(3, name="fc")(x), name="backbone")
    loaded = {k: np.full_like(v, 0.5) for k, v in backbone.named_parameters().items()}
    for key, value in loaded.items():  # as io.load_weights does
        backbone.named_parameters()[key][...] = value
    model = Sequential([backbone, L.Dense(2)], seed=0, input_shape=(4,))  # builds it
    for key, value in loaded.items():
        np.testing.assert_array_equal(model.named_parameters()[f"backbone.{key}"], value)
    np.testing.assert_array_equal(backbone.predict(np.ones((1, 4), np.float32)), 0.5 * 4 + 0.5)


def test_a_nested_model_keeps_what_it_set_or_learned():
    x = hg.Input((4,))
    own = hg.Model(x, L.Dense(3)(x), dtype="float64", seed=5)
    kept = {k: v.copy() for k, v in own.named_parameters().items()}
    y = hg.Input((4,))
    hg.Model(y, own(y), dtype="float64", seed=0)
    assert all(np.array_equal(kept[k], v) for k, v in own.named_parameters().items())
    x = hg.Input((4,))
    trained = hg.Model(x, L.Dense(3)(x), dtype="float64")
    trained.forward(np.zeros((1, 4)), training=True)  # it has trained (a training forward)
    trained.clear_caches()
    kept = {k: v.copy() for k, v in trained.named_parameters().items()}
    y = hg.Input((4,))
    hg.Model(y, trained(y), dtype="float64", seed=0)
    assert all(np.array_equal(kept[k], v) for k, v in trained.named_parameters().items())
