"""Keras's reshaping layers: Permute, RepeatVector, Cropping1D/2D/3D (the gradients,
config round trip and save/load run in the layer contract from ``LAYER_CASES``).

Keras semantics relied on: ``Permute(dims)`` numbers the per-example axes from 1 and
output axis i is input axis dims[i-1]; ``RepeatVector(n)`` maps (N, F) to (N, n, F);
``Cropping2D(((top, bottom), (left, right)))`` removes rows and columns of (N, H, W, C),
an int crops every side by it and ``(a, b)`` crops a from both ends of H and b of W;
``Cropping1D`` defaults to (1, 1), ``Cropping3D`` to 1 on every side.
"""

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from handgrad import layers as L
from handgrad.io import export_onnx
from handgrad.model import Sequential
from handgrad.testing import assert_close, gradcheck

from tolerances_composite import network_bounds

RNG = np.random.default_rng(0)


def test_permute_moves_each_entry_as_keras_numbers_axes():
    x = RNG.standard_normal((2, 3, 4, 5))
    y = L.Permute((3, 1, 2)).forward(x)
    assert y.shape == (2, 5, 3, 4)
    for n, a, b, c in np.ndindex(*x.shape):
        assert y[n, c, a, b] == x[n, a, b, c]


def test_repeat_vector_copies_the_vector_n_times_and_sums_the_gradient():
    x = RNG.standard_normal((2, 3))
    layer = L.RepeatVector(4)
    y = layer.forward(x)
    assert y.shape == (2, 4, 3) and all(np.array_equal(y[:, t], x) for t in range(4))
    dy = RNG.standard_normal(y.shape)
    np.testing.assert_array_equal(layer.backward(dy), dy[:, 0] + dy[:, 1] + dy[:, 2] + dy[:, 3])


@pytest.mark.parametrize(("cls", "cropping", "pairs"), [
    (L.Cropping1D, 2, ((2, 2),)), (L.Cropping1D, (0, 3), ((0, 3),)),
    (L.Cropping1D, None, ((1, 1),)),
    (L.Cropping2D, 1, ((1, 1), (1, 1))), (L.Cropping2D, (1, 2), ((1, 1), (2, 2))),
    (L.Cropping2D, ((0, 1), (2, 0)), ((0, 1), (2, 0))), (L.Cropping2D, None, ((0, 0),) * 2),
    (L.Cropping3D, ((1, 0), 1, (0, 2)), ((1, 0), (1, 1), (0, 2))),
    (L.Cropping3D, None, ((1, 1),) * 3)])
def test_cropping_spellings_remove_the_named_rows(cls, cropping, pairs):
    layer = cls() if cropping is None else cls(cropping)
    assert layer.pairs == pairs
    x = RNG.standard_normal((2, *(6,) * cls.rank, 3))
    y = layer.forward(x)
    expected = x
    for axis, (before, after) in enumerate(pairs, 1):  # an independent route: np.take
        expected = np.take(expected, np.arange(before, 6 - after), axis=axis)
    np.testing.assert_array_equal(y, expected)
    dy = RNG.standard_normal(y.shape)
    dx = layer.backward(dy)
    assert dx.shape == x.shape and dx.sum() == pytest.approx(dy.sum())
    assert gradcheck(cls() if cropping is None else cls(cropping), x, rng=0).passed


@pytest.mark.parametrize(("make", "match"), [
    (lambda: L.Permute((1, 1)), r"'dims' must be a permutation of 1..k.*\(1, 1\)"),
    (lambda: L.Permute((0, 1)), r"'dims' must be a permutation"),
    (lambda: L.Permute(2), r"'dims' must be a permutation.*int"),
    (lambda: L.RepeatVector(0), r"'n'"),
    (lambda: L.Cropping2D((1, 2, 3)), r"'cropping' must be .* tuple of 2 pairs"),
    (lambda: L.Cropping1D(-1), r"'cropping' must be an int >= 0"),
    (lambda: L.Cropping3D(((1, 1), (1, 1))), r"tuple of 3 ints"),
])
def test_bad_configs_are_refused_by_name(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_shapes_that_do_not_fit_are_refused_by_name():
    with pytest.raises(ValueError, match=r"'dims' \(2, 1\) permutes 2 axes.*\(2, 3, 4\)"):
        L.Permute((2, 1)).forward(np.zeros((1, 2, 3, 4)))
    with pytest.raises(ValueError, match=r"'x' must be \(N, F\)"):
        L.RepeatVector(2).forward(np.zeros((1, 2, 3)))
    with pytest.raises(ValueError, match=r"cropping \(2, 2\) leaves nothing of spatial axis 1"):
        L.Cropping1D(2).forward(np.zeros((1, 4, 3)))
    with pytest.raises(ValueError, match=r"2 spatial axes"):
        L.Cropping2D(1).forward(np.zeros((1, 4, 3)))


@pytest.mark.parametrize(("layers", "shape"), [
    ([L.Permute((2, 1)), L.Dense(3), L.Permute((2, 1))], (4, 5)),
    ([L.Dense(3), L.RepeatVector(4), L.Dense(2)], (5,)),
    ([L.Cropping1D((1, 2))], (7, 3)),
    ([L.Conv2D(3, 3, padding="same"), L.Cropping2D(((1, 0), (0, 2))), L.Conv2D(2, 1)],
     (6, 7, 2)),
    ([L.Cropping3D(((1, 0), (0, 1), 1))], (4, 4, 4, 2)),
])
def test_onnx_forms_match_predict(layers, shape):
    model = Sequential(layers, seed=0)
    model.build(shape)
    x = RNG.standard_normal((2, *shape)).astype(np.float32)
    proto = export_onnx(model, None)
    onnx.checker.check_model(proto, full_check=True)
    got = ReferenceEvaluator(proto).run(None, {"input": x})[0]
    terms, scale = network_bounds(model, x)
    assert_close(got, model.predict(x), dtype=np.float32, terms=terms, scale=scale)
