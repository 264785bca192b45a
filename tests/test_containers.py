"""The container protocol: ``Layer.children()`` and ``walk()``, and everything built on
them in ``Layer`` (prefixed ``named_*``, ``count_params``, ``zero_grad``,
``clear_caches``, ``extra_state`` and ``trainable`` propagation). ``Sequential`` and
``Residual`` only say what their children are."""

import copy

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.model import Sequential

PARAMETERS = ["stem.W", "stem.b", "res.block.fc.W", "res.block.fc.b", "res.block.bn.gamma",
              "res.block.bn.beta", "res.shortcut.W", "res.shortcut.b", "head.W", "head.b"]
BUFFERS = ["res.block.bn.running_mean", "res.block.bn.running_var"]
PATHS = ["", "stem", "res", "res.block", "res.block.fc", "res.block.bn", "res.block.drop",
         "res.shortcut", "relu", "head"]


def nested(seed=0):
    """Sequential > Residual > Sequential: stem, res (block: fc, bn, drop; shortcut:
    proj), relu, head, float64, built for (3,)."""
    inner = Sequential([L.Dense(4, name="fc"), L.BatchNorm(name="bn"),
                        L.Dropout(0.5, seed=1, name="drop")], name="inner")
    res = L.Residual(inner, L.Dense(4, name="proj"), name="res")
    return Sequential([L.Dense(4, name="stem"), res, L.ReLU(name="relu"),
                       L.Dense(2, name="head")], input_shape=(3,), dtype="float64", seed=seed)


def leaves(model):
    return [layer for _, layer in model.walk() if not list(layer.children())]


def batch(seed=0, n=6):
    return np.random.default_rng(seed).standard_normal((n, 3))


def test_children_and_walk_give_the_paths_of_the_nested_layers():
    model = nested()
    res = model["res"]
    assert [name for name, _ in model.children()] == ["stem", "res", "relu", "head"]
    assert [(name, child) for name, child in res.children()] == [
        ("block", res.block), ("shortcut", res.shortcut)]
    identity = L.Residual(L.ReLU())
    assert list(identity.children()) == [("block", identity.block)]  # no shortcut child
    walked = list(model.walk())
    assert [path for path, _ in walked] == PATHS
    assert walked[0][1] is model and walked[3][1] is res.block
    assert walked[7][1] is res.shortcut and walked[4][1] is res.block["fc"]
    assert [path for path, _ in res.walk("res")] == PATHS[2:8]
    assert list(L.Dense(2).children()) == []
    block = L.WaveNetBlock(2)
    assert list(block.walk()) == [("", block)]  # a leaf with its own parameters


def test_prefixed_names_are_the_children_s_arrays():
    model = nested()
    parameters, gradients = model.named_parameters(), model.named_gradients()
    assert list(parameters) == PARAMETERS and list(gradients) == PARAMETERS
    assert list(model.named_buffers()) == BUFFERS
    res = model["res"]
    assert parameters["res.block.fc.W"] is res.block["fc"].parameters["W"]
    assert gradients["res.shortcut.b"] is res.shortcut.gradients["b"]
    assert model.named_buffers()["res.block.bn.running_var"] is \
        res.block["bn"].buffers["running_var"]
    assert list(res.named_parameters()) == [k[len("res."):] for k in PARAMETERS[2:8]]
    for container in (model, res, res.block):  # containers hold no arrays of their own
        assert container.parameters == {} and container.gradients == {}
        assert container.buffers == {}
    sizes = {"stem": 3 * 4 + 4, "fc": 4 * 4 + 4, "bn": 8, "proj": 4 * 4 + 4, "head": 4 * 2 + 2}
    assert model.count_params() == sum(sizes.values())
    assert res.count_params() == sizes["fc"] + sizes["bn"] + sizes["proj"]


def test_an_optimizer_step_updates_the_children_in_place():
    model = nested().compile("sgd", "mse")
    before = {k: v.copy() for k, v in model.named_parameters().items()}
    model.train_step(batch(), np.zeros((6, 2)))
    after = model.named_parameters()
    moved = [k for k in PARAMETERS if np.any(after[k] != before[k])]
    assert set(moved) >= set(PARAMETERS) - {"res.block.fc.b"}  # batch norm cancels its grad
    assert after["res.block.fc.W"] is model["res"].block["fc"].parameters["W"]


def test_trainable_propagates_to_every_child():
    model = nested()
    model.trainable = False
    assert all(not layer.trainable for _, layer in model.walk())
    assert model.named_parameters(trainable_only=True) == {}
    assert model.named_gradients(trainable_only=True) == {}
    model.trainable = True
    model["res"].trainable = False
    assert [path for path, layer in model.walk() if not layer.trainable] == PATHS[2:8]
    assert list(model.named_parameters(trainable_only=True)) == [
        "stem.W", "stem.b", "head.W", "head.b"]
    model["res"].block["fc"].trainable = False
    model["res"].trainable = True
    assert model["res"].block["fc"].trainable  # the container sets every child
    frozen = Sequential([L.Dense(2, name="a")], trainable=False)
    frozen.add(L.Dense(3, name="b"))  # a layer added to a frozen model is frozen
    assert not frozen["b"].trainable
    residual = L.Residual(Sequential([L.Dense(2)]), L.Dense(2), trainable=False)
    assert not residual.block.trainable and not residual.block[0].trainable
    assert not residual.shortcut.trainable


def test_a_frozen_child_accumulates_no_gradient_and_is_left_out():
    model = nested()
    model["res"].block["fc"].trainable = False
    y = model.forward(batch())
    model.backward(np.ones_like(y))
    grads = model.named_gradients()
    assert not np.any(grads["res.block.fc.W"]) and np.any(grads["res.shortcut.W"])
    trainable = model.named_gradients(trainable_only=True)
    assert list(trainable) == [k for k in PARAMETERS if not k.startswith("res.block.fc.")]


def test_zero_grad_and_clear_caches_reach_every_leaf():
    model = nested()
    y = model.forward(batch())
    model.backward(np.ones_like(y))
    assert all(np.any(g) for g in model.named_gradients().values())
    model.zero_grad()
    assert not any(np.any(g) for g in model.named_gradients().values())
    model.forward(batch())
    model["res"].forward(np.ones((2, 4)))  # the residual's own cache too
    cached = [layer for _, layer in model.walk() if layer._caches]
    assert {layer.name for layer in cached} >= {"stem", "res", "fc", "bn", "drop", "proj",
                                                "relu", "head"}
    model.clear_caches()
    assert not any(layer._caches for _, layer in model.walk())
    for layer in leaves(model):
        with pytest.raises(RuntimeError, match="without a matching forward"):
            layer.backward(np.ones((6, 4)))


def test_extra_state_nests_the_children_s_by_name_and_round_trips():
    model = nested()
    state = model.extra_state()
    drop = model["res"].block["drop"]
    assert state == {"res": {"block": {"drop": drop.extra_state()}}}
    assert model["res"].extra_state() == {"block": {"drop": drop.extra_state()}}
    assert L.Dense(2).extra_state() == {}
    saved = copy.deepcopy(state)
    first = model.forward(batch())  # draws from the dropout generator
    twin = nested(seed=0)
    assert twin.extra_state() == saved
    model.load_extra_state(saved)
    assert model.extra_state() == saved
    np.testing.assert_array_equal(model.forward(batch()), first)
    model.load_extra_state({"res": {}})  # missing entries leave the children alone
    assert model.extra_state() != saved


@pytest.mark.parametrize("cls", [Sequential, L.Residual])
def test_containers_only_say_what_their_children_are(cls):
    assert "children" in vars(cls)
    for method in ("named_parameters", "named_gradients", "named_buffers", "count_params",
                   "zero_grad", "clear_caches", "extra_state", "load_extra_state",
                   "trainable", "walk"):
        assert method not in vars(cls), f"{cls.__name__} defines {method} itself"
    assert "children" not in vars(L.WaveNetBlock)


def test_count_params_of_an_unbuilt_model_says_to_build_it():
    model = Sequential([L.Dense(4), L.ReLU(), L.Dense(2)])
    with pytest.raises(ValueError, match=r"Sequential: count_params\(\) needs the parameters.*"
                                         r"call build\(input_shape\), give input_shape"):
        model.count_params()  # was 0
    with pytest.raises(ValueError, match=r"Dense: count_params\(\)"):
        L.Dense(3).count_params()
    assert model.build((3,)).count_params() == 3 * 4 + 4 + 4 * 2 + 2
    assert Sequential([L.Dense(4)], input_shape=(3,)).count_params() == 16
