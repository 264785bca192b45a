"""The layer contract for ``Sequential``: summary, parameter names, a gradient check
through whole stacks (2-D and 1-D), nesting, train/eval and name errors."""

import json

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import gradcheck
from test_layers_contract import summary_rows


def cnn_2d(**kwargs):
    return Sequential([
        L.Conv2D(4, 3, padding="same", name="conv"),
        L.ReLU(name="relu"),
        L.MaxPool2D(2, name="pool"),
        L.Flatten(name="flat"),
        L.Dropout(0.3, seed=2, name="drop"),
        L.Dense(3, name="fc"),
    ], **kwargs)


def cnn_1d(**kwargs):
    return Sequential([
        L.Conv1D(3, 3, stride=2, padding="causal", name="conv"),
        L.Tanh(name="tanh"),
        L.AvgPool1D(2, padding=1, count_include_pad=False, name="pool"),
        L.Flatten(name="flat"),
        L.Dense(2, name="fc"),
    ], **kwargs)


# Per-example shapes and parameter counts worked out by hand from the configs above.
CNN_2D = {"input": (6, 6, 2), "shapes": {"conv": (6, 6, 4), "relu": (6, 6, 4),
          "pool": (3, 3, 4), "flat": (36,), "drop": (36,), "fc": (3,)},
          "params": {"conv": 3 * 3 * 2 * 4 + 4, "fc": 36 * 3 + 3}}
CNN_1D = {"input": (9, 2), "shapes": {"conv": (5, 3), "tanh": (5, 3), "pool": (3, 3),
          "flat": (9,), "fc": (2,)},
          "params": {"conv": 3 * 2 * 3 + 3, "fc": 9 * 2 + 2}}
MODELS = [pytest.param(cnn_2d, CNN_2D, id="2d"), pytest.param(cnn_1d, CNN_1D, id="1d")]


def batch(shape, n=2, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(dtype)


@pytest.mark.parametrize(("factory", "expected"), MODELS)
def test_summary_lists_layers_shapes_params_and_totals(factory, expected):
    model = factory(name="net")
    text = model.summary(input_shape=expected["input"], print_fn=None)
    rows = summary_rows(text)
    assert list(rows) == list(expected["shapes"])
    for layer in model:
        cls, shape, params = rows[layer.name]
        assert cls == type(layer).__name__
        assert shape == (None, *expected["shapes"][layer.name])
        assert params == expected["params"].get(layer.name, 0)
    total = sum(expected["params"].values())
    assert "Model: net" in text
    assert f"Total params: {total:,}" in text
    assert f"Trainable params: {total:,}" in text
    assert "Non-trainable params: 0" in text
    y = model.forward(batch(expected["input"], dtype=np.float32))
    assert y.shape[1:] == expected["shapes"]["fc"]
    assert model.output_shape(expected["input"]) == y.shape[1:]

    model["conv"].trainable = False
    text = model.summary(print_fn=None)
    frozen = expected["params"]["conv"]
    assert f"Trainable params: {total - frozen:,}" in text
    assert f"Non-trainable params: {frozen:,}" in text


def test_summary_of_an_unbuilt_model_needs_an_input_shape():
    with pytest.raises(ValueError, match="input_shape"):
        cnn_2d().summary(print_fn=None)


@pytest.mark.parametrize(("factory", "expected"), MODELS)
def test_named_parameters_are_the_layers_own_arrays(factory, expected):
    model = factory(input_shape=expected["input"])
    named = model.named_parameters()
    assert set(named) == {"conv.W", "conv.b", "fc.W", "fc.b"}
    for key, value in named.items():
        layer, param = key.split(".")
        assert value is model[layer].parameters[param]
    assert set(model.named_gradients()) == set(named)
    assert model.count_params() == sum(expected["params"].values())


def test_unnamed_layers_get_class_and_index_names():
    model = Sequential([L.Conv2D(2, 3), L.MaxPool2D(2), L.Flatten(), L.Dense(3)],
                       input_shape=(6, 6, 1))
    assert [layer.name for layer in model] == ["conv2d_0", "max_pool2d_1", "flatten_2",
                                               "dense_3"]
    assert set(model.named_parameters()) == {"conv2d_0.W", "conv2d_0.b", "dense_3.W",
                                             "dense_3.b"}


@pytest.mark.parametrize(("factory", "expected"), MODELS)
def test_gradcheck_through_the_whole_stack(factory, expected):
    model = factory(dtype="float64", seed=4)
    result = gradcheck(model, batch(expected["input"], n=3), rng=1)
    assert set(result.errors) == {"x", "conv.W", "conv.b", "fc.W", "fc.b"}
    assert result.passed, result.errors


def test_backward_is_the_reversed_chain():
    model = cnn_2d(dtype="float64", seed=0)
    x = batch(CNN_2D["input"])
    y = model.forward(x)
    dy = np.random.default_rng(5).standard_normal(y.shape)
    dx = model.backward(dy)
    grads = {k: g.copy() for k, g in model.named_gradients().items()}
    model.zero_grad()
    model.load_extra_state({"drop": {"rng": np.random.default_rng(2).bit_generator.state}})
    h = x
    for layer in model:
        h = layer.forward(h)
    np.testing.assert_array_equal(h, y)
    g = dy
    for layer in reversed(model.layers):
        g = layer.backward(g)
    np.testing.assert_array_equal(g, dx)
    for key, value in model.named_gradients().items():
        np.testing.assert_array_equal(value, grads[key])


def test_nested_sequential_parameter_names_and_gradients():
    block = Sequential([L.Dense(4, name="d1"), L.ReLU(name="act")], name="block")
    model = Sequential([block, L.Dense(2, name="head")], dtype="float64", seed=0)
    x = batch((3,), n=4)
    model.forward(x, training=False)
    expected = {"block.d1.W", "block.d1.b", "head.W", "head.b"}
    assert set(model.named_parameters()) == expected
    assert set(model.named_gradients()) == expected
    assert model.named_parameters()["block.d1.W"] is block["d1"].parameters["W"]
    result = gradcheck(model, x, rng=0)
    assert set(result.errors) == {"x", *expected}
    assert result.passed, result.errors


def test_train_and_eval_switch():
    model = Sequential([L.Dense(8, name="fc"), L.Dropout(0.5, seed=0, name="drop")],
                       dtype="float64", seed=1)
    x = batch((4,), n=16)
    assert model.training
    assert model.eval() is model and not model.training
    y1, y2 = model.forward(x), model.forward(x)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, model["fc"].forward(x, training=False))
    with pytest.raises(RuntimeError):  # evaluation keeps no cache
        model.backward(np.ones_like(y1))
    assert model.train() is model and model.training
    y = model.forward(x)
    zeros = y == 0
    assert zeros.any() and not zeros.all()
    np.testing.assert_array_equal(y[~zeros], 2 * y1[~zeros])  # x 1 / (1 - 0.5): exact
    dx = model.backward(np.random.default_rng(0).standard_normal(y.shape))
    assert dx.shape == x.shape
    np.testing.assert_array_equal(model.forward(x, training=False), y1)  # explicit override


def check_frozen(model):
    assert all(not layer.trainable for layer in model)
    x = batch(CNN_2D["input"])
    y = model.forward(x)
    dx = model.backward(np.random.default_rng(0).standard_normal(y.shape))
    assert np.any(dx)
    for key, grad in model.named_gradients().items():
        assert np.all(grad == 0), key
    assert model.named_parameters(trainable_only=True) == {}


def test_freezing_a_model_freezes_its_layers():
    model = cnn_2d(dtype="float64")
    model.trainable = False
    check_frozen(model)


def test_model_constructed_frozen_freezes_its_layers():
    check_frozen(cnn_2d(dtype="float64", trainable=False))


def test_sequential_config_round_trip():
    model = cnn_2d(dtype="float64", input_shape=CNN_2D["input"], name="net")
    config = model.get_config()
    clone = Sequential.from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config
    for key, value in model.named_parameters().items():
        clone.named_parameters()[key][...] = value
    x = batch(CNN_2D["input"])
    np.testing.assert_array_equal(clone.forward(x), model.forward(x))


def test_duplicate_layer_names_are_rejected():
    with pytest.raises(ValueError, match=r"'fc'.*unique"):
        Sequential([L.Dense(2, name="fc"), L.Dense(3, name="fc")])
    model = Sequential([L.Dense(2, name="fc")])
    with pytest.raises(ValueError, match="'fc'"):
        model.add(L.ReLU(name="fc"))
    dense = L.Dense(3)
    model.add(dense)
    with pytest.raises(ValueError, match="already in the model"):
        model.add(dense)
    assert len(model) == 2


def test_sequential_bad_arguments():
    with pytest.raises(TypeError, match=r"'layers'.*Dense"):
        Sequential(L.Dense(2))
    with pytest.raises(TypeError, match=r"'layer'.*str"):
        Sequential([L.Dense(2), "relu"])
    with pytest.raises(ValueError, match="without layers"):
        Sequential().build((3,))
    with pytest.raises(ValueError, match="unknown layer class 'Nope'"):
        Sequential.from_config({"layers": [{"class": "Nope", "config": {}}]})
    with pytest.raises(KeyError, match="'missing'"):
        Sequential([L.Dense(2, name="fc")])["missing"]
