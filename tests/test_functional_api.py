"""Keras's functional API habits on graph Models (Keras itself is not a dependency; the
semantics relied on are written beside each test):

- ``keras.layers.add([a, b])`` (and concatenate, subtract, multiply, average, maximum,
  minimum) is the merge layer made and called at once; ``a + b``, ``a - b`` and ``a * b``
  on symbolic tensors build the same merges.
- ``Subtract`` takes exactly two inputs; ``Maximum``/``Minimum`` fold the inputs pairwise
  (``max(max(x1, x2), x3)``) and a tie sends the gradient to the earlier input (TF's
  maximum gradient goes to x where x >= y).
- ``Input((None, F))`` is a sequence of any length: the model accepts batches of
  different T.
- ``Model(inputs, {"a": ya, "b": yb})`` returns a dict from predict, takes losses and
  targets keyed by those names.
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.testing import gradcheck


def randn(seed, *shape, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


MERGES = {  # layer, its functional helper, the NumPy reference of the forward
    "Subtract": (L.Subtract, L.subtract, lambda a: a[0] - a[1]),
    "Average": (L.Average, L.average, lambda a: sum(a) / len(a)),
    "Maximum": (L.Maximum, L.maximum, lambda a: np.maximum.reduce(np.broadcast_arrays(*a))),
    "Minimum": (L.Minimum, L.minimum, lambda a: np.minimum.reduce(np.broadcast_arrays(*a))),
    "Add": (L.Add, L.add, lambda a: sum(a)),
    "Multiply": (L.Multiply, L.multiply, lambda a: a[0] * a[1]),
}


@pytest.mark.parametrize("name", list(MERGES))
def test_merge_layers_forward_and_gradcheck_with_broadcasting(name):
    cls, helper, reference = MERGES[name]
    xs = [randn(0, 2, 3, 4), randn(1, 2, 1, 4)]
    np.testing.assert_array_equal(cls().forward(xs, training=False), reference(xs))
    np.testing.assert_array_equal(helper(xs), reference(xs))  # on arrays: inference
    assert gradcheck(cls(), xs, rng=0).passed
    if name not in ("Subtract", "Multiply"):
        three = [randn(2, 2, 3), randn(3, 2, 3), randn(4, 2, 1)]
        np.testing.assert_allclose(cls().forward(three, training=False), reference(three),
                                   rtol=np.finfo(np.float64).eps * 4)
        assert gradcheck(cls(), three, rng=0).passed


def test_maximum_tie_sends_the_gradient_to_the_earliest_input():
    a, b, c = np.array([[1.0, 2.0]]), np.array([[1.0, 3.0]]), np.array([[1.0, 3.0]])
    layer = L.Maximum()
    layer.forward([a, b, c])
    da, db, dc = layer.backward(np.array([[5.0, 7.0]]))
    np.testing.assert_array_equal(da, [[5.0, 0.0]])
    np.testing.assert_array_equal(db, [[0.0, 7.0]])
    np.testing.assert_array_equal(dc, [[0.0, 0.0]])
    layer = L.Minimum()
    layer.forward([c, a])
    dc, da = layer.backward(np.array([[5.0, 7.0]]))
    np.testing.assert_array_equal(dc, [[5.0, 0.0]])
    np.testing.assert_array_equal(da, [[0.0, 7.0]])


def test_merge_errors():
    with pytest.raises(ValueError, match="takes exactly 2 inputs; received 3"):
        L.Subtract().forward([randn(0, 2, 3)] * 3)
    with pytest.raises(TypeError, match="'inputs' must be a list"):
        L.add(randn(0, 2, 3))
    with pytest.raises(TypeError, match=r"'\+' on a symbolic tensor takes another symbolic"):
        hg.Input((3,)) + 1.0


def twin_models(build):
    """The two-input Model whose output ``build(a, b)`` makes (seeded: same weights)."""
    a, b = hg.Input((4,), name="a"), hg.Input((4,), name="b")
    return hg.Model([a, b], build(a, b), seed=0)


@pytest.mark.parametrize("op, cls", [("+", L.Add), ("-", L.Subtract), ("*", L.Multiply)])
def test_operators_on_symbolic_tensors_build_the_merge_layers(op, cls):
    dense = L.Dense(4, name="d")

    def with_operator(a, b):
        h = dense(a)
        return {"+": h + b, "-": h - b, "*": h * b}[op]

    def with_layer(a, b):
        return cls()([dense(a), b])

    xa, xb = randn(0, 3, 4, dtype=np.float32), randn(1, 3, 4, dtype=np.float32)
    first = twin_models(with_operator)
    assert isinstance(first.layers[-1], cls)
    second = twin_models(with_layer)
    np.testing.assert_array_equal(first.predict([xa, xb]), second.predict([xa, xb]))
    concatenated = hg.Model(first.inputs, L.concatenate(first.inputs, axis=-1))
    np.testing.assert_array_equal(concatenated.predict([xa, xb]), np.concatenate([xa, xb], -1))


def test_variable_length_input_predicts_for_two_lengths(tmp_path):
    seq = hg.Input((None, 3), name="seq")
    h = L.Dense(6, name="proj")(seq)  # Dense on (N, T, F)
    h = L.Conv1D(4, 3, padding="same", name="conv")(h)
    h = L.LSTM(5, return_sequences=True, name="lstm")(h)
    assert h.shape == (None, 5)
    pooled = L.GlobalAvgPool1D(name="pool")(h)
    model = hg.Model(seq, L.Dense(2, name="head")(pooled), seed=0)
    for t in (4, 11):
        x = randn(t, 2, t, 3, dtype=np.float32)
        got = model.predict(x)
        # the same layers, run one by one on this length
        want = x
        for name in ("proj", "conv", "lstm", "pool", "head"):
            want = model.get_layer(name).forward(want, training=False)
        np.testing.assert_array_equal(got, want)
    model.compile("adam", "mse")
    model.fit(randn(0, 8, 6, 3, dtype=np.float32), randn(1, 8, 2, dtype=np.float32),
              epochs=1, batch_size=4, verbose=0)
    model.save(tmp_path / "v.safetensors")
    x = randn(5, 3, 7, 3, dtype=np.float32)
    np.testing.assert_array_equal(hg.load_model(tmp_path / "v.safetensors").predict(x),
                                  model.predict(x))
    with pytest.raises(ValueError, match=r"'x' must have shape \(N, None, 3\)"):
        model.predict(randn(0, 2, 5, 4, dtype=np.float32))


def test_a_layer_that_needs_a_fixed_length_says_so():
    seq = hg.Input((None, 3))
    with pytest.raises(ValueError, match="Dense needs a fixed size on the axes that are "
                                         "None"):
        L.Dense(2)(L.Flatten()(seq))


def test_dict_outputs_predict_compile_and_fit_by_name(tmp_path):
    x = randn(0, 64, 5, dtype=np.float32)
    y = {"cls": (x[:, 0] > 0).astype(np.int64), "reg": x[:, 1:2] * 2}
    inputs = hg.Input((5,))
    trunk = L.Tanh()(L.Dense(8)(inputs))
    model = hg.Model(inputs, {"reg": L.Dense(1, name="r")(trunk),
                              "cls": L.Dense(2, name="c")(trunk)}, seed=0)
    assert model.output_names == ["reg", "cls"]
    model.compile("adam", loss={"cls": "cross_entropy", "reg": "mse"},
                  metrics={"cls": ["accuracy"]})
    before = model.evaluate(x, y, return_dict=True)
    history = model.fit(x, y, epochs=5, batch_size=16, verbose=0, rng=0)
    assert {"loss", "cls_loss", "reg_loss", "cls_accuracy"} <= set(history.history)
    after = model.evaluate(x, y, return_dict=True)
    assert after["loss"] < before["loss"]
    out = model.predict(x)
    assert list(out) == ["reg", "cls"] and out["cls"].shape == (64, 2)
    np.testing.assert_array_equal(model(x)["reg"], out["reg"])
    model.save(tmp_path / "d.safetensors")
    loaded = hg.load_model(tmp_path / "d.safetensors")
    np.testing.assert_array_equal(loaded.predict(x)["cls"], out["cls"])
    with pytest.raises(TypeError, match="must map names"):
        hg.Model(inputs, {1: trunk})
