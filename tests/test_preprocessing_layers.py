"""Keras's preprocessing layers Rescaling, Normalization (adapt) and CategoryEncoding against
NumPy references of the Keras semantics written down here (the float contract, finite
differences included, runs in test_layers_contract.py for Rescaling and Normalization).

Keras semantics relied on:
- Rescaling: y = x * scale + offset (uint8 images are cast to floats first).
- Normalization(axis=-1): adapt() takes per-feature mean and population variance over every
  axis but ``axis`` (the batch included); y = (x - mean) / max(sqrt(var), epsilon) with
  epsilon = 1e-7 (backend.epsilon()); invert=True gives mean + x * max(sqrt(var), epsilon).
- CategoryEncoding: "multi_hot" marks the tokens present in each example, "count" counts
  them, "one_hot" encodes each id (a new last axis unless the last axis has size 1).
"""

import json

import numpy as np
import pytest

from handgrad import io
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import assert_close

RNG = np.random.default_rng(25)


def test_rescaling_is_the_affine_map_and_takes_uint8_images():
    images = RNG.integers(0, 256, (2, 3, 3, 1)).astype(np.uint8)
    y = L.Rescaling(1 / 127.5, offset=-1.0).forward(images, training=False)
    assert y.dtype == np.float32
    assert_close(y, images.astype(np.float64) / 127.5 - 1.0, dtype=np.float32)
    layer = L.Rescaling(0.5, 2.0)
    x = RNG.standard_normal((4, 3))
    layer.forward(x)
    np.testing.assert_array_equal(layer.backward(np.ones_like(x)), np.full_like(x, 0.5))


@pytest.mark.parametrize(("axis", "shape", "reduce"), [
    (-1, (40, 3), (0,)), (-1, (10, 5, 3), (0, 1)), ((1, 2), (30, 2, 3, 2), (0, 3)),
    (None, (20, 4), (0, 1)), (1, (10, 4, 2), (0, 2))])
def test_normalization_adapt_takes_per_feature_statistics(axis, shape, reduce):
    x = RNG.normal(3.0, 2.0, shape) * np.arange(1, shape[-1] + 1)
    layer = L.Normalization(axis=axis, dtype="float64").adapt(x)
    mean = x.mean(axis=reduce, keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=reduce, keepdims=True))
    y = layer.forward(x, training=False)
    assert_close(y, (x - mean) / std, dtype=np.float64)
    assert_close(y.mean(axis=reduce), np.zeros(y.mean(axis=reduce).shape), dtype=np.float64,
                 scale=10.0)
    back = L.Normalization(axis=axis, invert=True, dtype="float64").adapt(x)
    assert_close(back.forward(y, training=False), x, dtype=np.float64, scale=10.0)


def test_normalization_floors_the_standard_deviation_at_keras_epsilon():
    x = np.column_stack([np.full(6, 2.0), np.arange(6.0)])
    layer = L.Normalization(mean=[1.0, 0.0], variance=[0.0, 4.0], dtype="float64")
    y = layer.forward(x)
    np.testing.assert_array_equal(y[:, 0], (x[:, 0] - 1.0) / 1e-7)
    dx = layer.backward(np.ones_like(x))
    np.testing.assert_array_equal(dx, np.tile([1e7, 0.5], (6, 1)))


def test_normalization_errors_name_the_argument():
    with pytest.raises(ValueError, match="both 'mean' and 'variance'"):
        L.Normalization(mean=[0.0])
    with pytest.raises(ValueError, match="batch axis"):
        L.Normalization(axis=0)
    with pytest.raises(ValueError, match="'variance' must be >= 0"):
        L.Normalization(mean=0.0, variance=-1.0)
    with pytest.raises(RuntimeError, match="adapt"):
        L.Normalization().forward(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="overwrite"):
        L.Normalization(mean=0.0, variance=1.0).adapt(np.zeros((2, 3)))
    adapted = L.Normalization().adapt(np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"features \(3,\)"):
        adapted.forward(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="does not broadcast"):
        L.Normalization(mean=[0.0, 1.0], variance=[1.0, 1.0]).forward(np.zeros((2, 3)))


def test_adapted_normalization_survives_save_and_load(tmp_path):
    x = RNG.normal(5.0, 3.0, (50, 4)).astype(np.float32)
    model = Sequential([L.Normalization(), L.Dense(2)], seed=0)
    model.layers[0].adapt(x)
    model.build((4,))
    path = tmp_path / "model"
    io.save(model, path)
    loaded = io.load(path)
    np.testing.assert_array_equal(loaded.forward(x, training=False),
                                  model.forward(x, training=False))
    assert loaded.layers[0].adapted
    config = L.Normalization(mean=[1.0, 2.0], variance=[3.0, 4.0], invert=True).get_config()
    clone = L.Normalization.from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config


def reference_encoding(ids, num_tokens, mode):
    ids = np.asarray(ids)
    if mode == "one_hot" and ids.ndim == 2 and ids.shape[1] != 1:
        return np.array([[[float(t == k) for k in range(num_tokens)] for t in row]
                         for row in ids])
    rows = ids.reshape(len(ids), -1)
    counts = np.array([[float(list(row).count(k)) for k in range(num_tokens)] for row in rows])
    return counts if mode == "count" else np.minimum(counts, 1.0)


@pytest.mark.parametrize("mode", ["multi_hot", "count", "one_hot"])
@pytest.mark.parametrize("shape", [(5,), (5, 1), (5, 3)])
def test_category_encoding_matches_the_keras_modes(mode, shape):
    ids = RNG.integers(0, 4, shape)
    layer = L.CategoryEncoding(4, output_mode=mode)
    y = layer.forward(ids)
    expected = reference_encoding(ids, 4, mode)
    assert y.dtype == np.float32 and y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)
    assert layer.output_shape(shape[1:]) == y.shape[1:]
    assert layer.backward(np.ones_like(y)) is None  # integer ids: no dx
    with pytest.raises(RuntimeError, match="backward"):
        layer.backward(np.ones_like(y))


def test_category_encoding_errors_and_config():
    layer = L.CategoryEncoding(3, output_mode="count", dtype="float64")
    with pytest.raises(ValueError, match=r"\[0, 3\).*received 3"):
        layer.forward(np.array([[0, 3]]))
    with pytest.raises(ValueError, match=r"received -1"):
        layer.forward(np.array([-1, 0]))
    with pytest.raises(TypeError, match="integer array"):
        layer.forward(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="output_mode"):
        L.CategoryEncoding(3, output_mode="tf_idf")
    clone = L.CategoryEncoding.from_config(json.loads(json.dumps(layer.get_config())))
    assert clone.get_config() == layer.get_config()
    assert clone.forward(np.array([[1, 1]]), training=False).dtype == np.float64
