"""MatMul, Parameter and Roll (layers/tensor_ops.py): forward and backward against torch
autograd in float64, finite differences, torch names, the ONNX export, bad arguments."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

import handgrad as hg  # noqa: E402
from handgrad import layers as L  # noqa: E402
from handgrad.io import export_onnx, from_torch, to_torch_state_dict  # noqa: E402
from handgrad.testing import assert_close, gradcheck  # noqa: E402

F64 = np.float64


def rand(rng, *shape):
    return rng.standard_normal(shape)


def t(a, grad=False):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


# --------------------------------------------------------------------------- MatMul
@pytest.mark.parametrize("a_shape, b_shape", [((2, 4, 5), (2, 5, 3)),
                                              ((2, 3, 4, 5), (2, 3, 5, 6))])
def test_matmul_matches_torch_autograd(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rand(rng, *a_shape), rand(rng, *b_shape)
    layer = L.MatMul()
    y = layer.forward([a, b])
    ta, tb = t(a, True), t(b, True)
    ty = ta @ tb
    dy = rand(rng, *y.shape)
    ty.backward(t(dy))
    da, db = layer.backward(dy)
    k = a_shape[-1]
    assert_close(y, ty.detach().numpy(), dtype=F64, terms=k, what="y")
    assert_close(da, ta.grad.numpy(), dtype=F64, terms=b_shape[-1], what="da")
    assert_close(db, tb.grad.numpy(), dtype=F64, terms=a_shape[-2], what="db")


def test_matmul_gradcheck():
    rng = np.random.default_rng(1)
    result = gradcheck(L.MatMul(), [rand(rng, 2, 3, 4), rand(rng, 2, 4, 2)], rng=1)
    assert result.passed, result


@pytest.mark.parametrize("shapes, match", [
    ([(2, 3, 4), (2, 5, 2)], r"\(\.\.\., m, k\) and \(\.\.\., k, n\).*\(2, 3, 4\).*\(2, 5, 2\)"),
    ([(2, 3, 4), (2, 2, 4, 2)], "same leading axes"),
    ([(2, 4), (2, 4)], r"\(2, 4\)"),  # per example a vector: no matrix
    ([(2, 3, 4), (2, 4, 2), (2, 2, 2)], "exactly 2 inputs"),
])
def test_matmul_refuses_shapes_that_do_not_multiply(shapes, match):
    with pytest.raises(ValueError, match=match):
        L.MatMul().forward([np.zeros(s) for s in shapes])


# ------------------------------------------------------------------------ Parameter
def _torch_parameter(p, index, batch):
    values = p if index is None else p.reshape(-1)[torch.as_tensor(index)]
    return values.expand(batch, *values.shape)


@pytest.mark.parametrize("shape, index", [
    ((1, 4), None),  # a class token
    ((3, 4), np.array([[0, 1, 1], [11, 5, 0]])),  # a gather with repeats (scatter-adds)
    ((1, 1, 6), np.arange(6).reshape(1, 6)),  # torch's (1, 1, D) token as (1, D) per example
])
def test_parameter_matches_torch_autograd(shape, index):
    rng = np.random.default_rng(2)
    layer = L.Parameter(shape, index, initializer="glorot_uniform", dtype="float64")
    x = rand(rng, 3, 5, 2)
    y = layer.forward(x)
    tp = t(layer.parameters["P"], True)
    ty = _torch_parameter(tp, index, 3)
    dy = rand(rng, *y.shape)
    ty.backward(t(dy))
    dx = layer.backward(dy)
    np.testing.assert_array_equal(y, ty.detach().numpy())  # a copy: exact
    assert dx.shape == x.shape and not np.any(dx)
    repeats = 1 if index is None else int(np.bincount(index.ravel()).max())
    assert_close(layer.gradients["P"], tp.grad.numpy(), dtype=F64, terms=3 * repeats,
                 what="dP")


def test_parameter_gradcheck():
    layer = L.Parameter((2, 3), np.array([[5, 0], [0, 2]]), "glorot_uniform",
                        dtype="float64")
    result = gradcheck(layer, np.zeros((3, 4)), rng=3)
    assert result.passed, result


def test_constant_parameter_is_a_buffer_without_gradient():
    layer = L.Parameter((2, 2), initializer="ones", trainable=False, dtype="float64")
    y = layer.forward(np.zeros((3, 1)))
    assert layer.parameters == {} and list(layer.buffers) == ["P"]
    np.testing.assert_array_equal(y, np.ones((3, 2, 2)))
    assert not np.any(layer.backward(np.ones_like(y)))
    layer.trainable = True  # a container unfreezing its children leaves a constant alone
    layer.forward(np.zeros((3, 1)))
    layer.backward(np.ones_like(y))
    assert layer.gradients == {}


def test_parameter_config_keeps_constant_and_frozen_apart():
    frozen = L.Parameter((2,), initializer="ones")
    frozen.trainable = False
    constant = L.Parameter((2,), trainable=False)
    again = [L.Parameter.from_config(layer.get_config()) for layer in (frozen, constant)]
    assert [(p.constant, p.trainable) for p in again] == [(False, False), (True, False)]
    index = L.Parameter((4,), np.array([[3, 1]]))
    np.testing.assert_array_equal(L.Parameter.from_config(index.get_config()).index, [[3, 1]])


def test_parameter_named_after_a_torch_attribute_loads_and_exports_it():
    """A Parameter layer named ``encoder.pos_embedding`` is torch's entry of that name."""
    x = hg.Input((3, 4))
    token = L.Parameter((1, 1, 4), np.arange(4).reshape(1, 4), name="class_token")(x)
    joined = L.Concatenate(1)([token, x])
    pos = L.Parameter((1, 4, 4), np.arange(16).reshape(4, 4), name="encoder.pos_embedding")
    model = hg.Model(x, L.Dense(2, name="head")(L.Add()([joined, pos(joined)])),
                     dtype="float64")
    model.build((3, 4))
    state = to_torch_state_dict(model, numpy=True)
    assert {k: v.shape for k, v in state.items()} == {
        "class_token": (1, 1, 4), "encoder.pos_embedding": (1, 4, 4),
        "head.weight": (2, 4), "head.bias": (2,)}
    rng = np.random.default_rng(4)
    new = {k: rand(rng, *v.shape) for k, v in state.items()}
    from_torch(new, model)
    np.testing.assert_array_equal(model.named_parameters()["encoder.pos_embedding.P"],
                                  new["encoder.pos_embedding"])
    np.testing.assert_array_equal(model.named_parameters()["class_token.P"],
                                  new["class_token"])


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(shape=()), ValueError, "'shape'.*received \\(\\)"),
    (dict(shape=(2, 0)), ValueError, "'shape'"),
    (dict(shape=(2, 3), index=np.array([0.5])), TypeError, "'index'.*float64"),
    (dict(shape=(2, 3), index=np.array(1)), TypeError, "'index'"),
    (dict(shape=(2, 3), index=np.array([0, 6])), ValueError, r"'index'.*\[0, 6\).*\[0, 6\]"),
    (dict(shape=(2, 3), index=np.array([-1])), ValueError, "'index'"),
    (dict(shape=(2, 3), initializer="nope"), ValueError, "'initializer' 'nope'"),
])
def test_parameter_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        L.Parameter(**kwargs)


def test_parameter_refuses_an_input_of_another_dtype():
    layer = L.Parameter((2,), dtype="float64")
    with pytest.raises(TypeError, match="float32"):
        layer.forward(np.zeros((2, 3), np.float32))


# ----------------------------------------------------------------------------- Roll
@pytest.mark.parametrize("shifts, axes", [(1, 1), ((2, -3), (1, 2)), ((-1, 5), (-1, 2))])
def test_roll_matches_torch_roll(shifts, axes):
    rng = np.random.default_rng(5)
    x = rand(rng, 2, 4, 5, 3)
    layer = L.Roll(shifts, axes)
    y = layer.forward(x)
    tx = t(x, True)
    ty = torch.roll(tx, shifts, axes)
    dy = rand(rng, *y.shape)
    ty.backward(t(dy))
    np.testing.assert_array_equal(y, ty.detach().numpy())
    np.testing.assert_array_equal(layer.backward(dy), tx.grad.numpy())


def test_roll_gradcheck():
    result = gradcheck(L.Roll((1, -2), (1, 2)), np.random.default_rng(6).standard_normal(
        (2, 3, 4, 2)), rng=6)
    assert result.passed, result


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(shifts=(1, 2), axes=(1,)), ValueError, "same length"),
    (dict(shifts=1, axes=0), ValueError, "'axes'.*batch"),
    (dict(shifts=1.5, axes=1), TypeError, "'shifts'.*1.5"),
    (dict(shifts=1, axes="1"), TypeError, "'axes'"),
    (dict(shifts=(), axes=()), TypeError, "'shifts'"),
])
def test_roll_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        L.Roll(**kwargs)


@pytest.mark.parametrize("axes", [(3,), (1, -2)])
def test_roll_refuses_axes_the_input_does_not_have(axes):
    with pytest.raises(ValueError, match=r"'axes'.*3-D input"):
        L.Roll((1,) * len(axes), axes).forward(np.zeros((2, 3, 4)))


# ---------------------------------------------------------------------------- ONNX
def test_onnx_export_matches_predict():
    """A token joined to the sequence, a gathered table, attention scores by MatMul and
    a shifted window, run by onnx's reference evaluator."""
    x = hg.Input((3, 4))
    rolled = L.Roll((1, -1), (1, 2))(x)
    token = L.Parameter((1, 4), initializer="glorot_uniform")(x)
    joined = L.Concatenate(1)([token, rolled])
    table = L.Parameter((5,), np.array([[0, 1, 2, 3], [4, 0, 1, 2], [3, 4, 0, 1],
                                        [2, 3, 4, 0]]), "glorot_uniform")(x)
    scores = L.Add()([L.MatMul()([joined, L.Permute((2, 1))(joined)]), table])
    model = hg.Model(x, L.MatMul()([scores, joined]), dtype="float64", seed=0)
    xs = np.random.default_rng(7).standard_normal((2, 3, 4))
    proto = export_onnx(model, None)
    onnx.checker.check_model(proto, full_check=True)
    got = ReferenceEvaluator(proto).run(None, {model.input_names[0]: xs})[0]
    assert_close(got, model.predict(xs), dtype=F64, terms=16, scale=float(
        np.abs(model.predict(xs)).max()) + 1, what="output")


def test_parameters_round_trip_through_export_and_load_onnx():
    """export_onnx writes a Parameter as its initializer, named after the layer, broadcast
    over the batch by Expand (gathered first where its index is more than a reshape):
    load_onnx gives back the Parameters with their names, shapes, indices and values."""
    x = hg.Input((3, 4))
    token = L.Parameter((1, 1, 4), np.arange(4).reshape(1, 4), "glorot_uniform",
                        name="class_token")(x)
    joined = L.Concatenate(1)([token, x])
    pos = L.Parameter((4, 4), initializer="glorot_uniform", name="encoder.pos_embedding")
    table = L.Parameter((5,), np.array([[0, 1, 2, 3], [4, 0, 1, 2], [3, 4, 0, 1],
                                        [2, 3, 4, 0]]), "glorot_uniform", name="bias_table")
    scores = L.Add()([L.MatMul()([joined, L.Permute((2, 1))(joined)]), table(joined)])
    out = L.MatMul()([scores, L.Add()([joined, pos(joined)])])
    model = hg.Model(x, out, dtype="float64", seed=0)
    back = hg.io.load_onnx(export_onnx(model, None))
    ours = {layer.name: layer for layer in model.layers if isinstance(layer, L.Parameter)}
    theirs = {layer.name: layer for layer in back.layers if isinstance(layer, L.Parameter)}
    assert sorted(theirs) == sorted(ours) == ["bias_table", "class_token",
                                              "encoder.pos_embedding"]
    for name, layer in ours.items():
        assert theirs[name].shape == layer.shape and theirs[name].trainable
        assert (theirs[name].index is None) == (layer.index is None), name
        if layer.index is not None:
            np.testing.assert_array_equal(theirs[name].index, layer.index)
        np.testing.assert_array_equal(theirs[name].tensor, layer.tensor)
    xs = np.random.default_rng(8).standard_normal((2, 3, 4))
    expected = model.predict(xs)
    assert_close(back.predict(xs), expected, dtype=F64, terms=16,
                 scale=float(np.abs(expected).max()) + 1, what="output")
