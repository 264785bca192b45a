"""Embedding: the kernel against ``F.embedding`` (with ``padding_idx``), the loop twin,
finite differences and ``np.add.at`` (an independent scatter-add oracle); the layer
against ``nn.Embedding`` over training steps; and the layer contract of
tests/test_layers_contract.py adapted to integer ids (the generic contract feeds float
batches, so ``layer_cases.INTEGER_INPUT_CASES`` is checked here instead): lazy build and
shapes, finite differences, config round trip, frozen layer, evaluation mode, shared
use, cache misuse and dtypes. The table needs no layout conversion: it is (V, D) in
both libraries.
"""

import copy
import json

import numpy as np
import pytest

from handgrad import io, ops
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.ops import reference
from handgrad.testing import (
    INTEGER_INPUT_CASES,
    assert_close,
    assert_gradient_close,
    numeric_gradient,
)

from tolerances import mean_bound, scatter_bounds, std_bound

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
# (ids shape, V, D, padding_idx)
CASES = [((5,), 7, 3, None), ((3, 4), 6, 2, 0), ((2, 3, 2), 4, 5, -1), ((40,), 3, 4, 1),
         ((0, 3), 5, 2, None), ((), 5, 3, None)]
IDS = [f"{'x'.join(map(str, s)) or 'scalar'}-V{v}-D{d}-pad{p}" for s, v, d, p in CASES]
table = pytest.mark.parametrize("shape, vocabulary, dim, padding_idx", CASES, ids=IDS)


def draw(shape, vocabulary, dim, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocabulary, shape)
    if ids.size > 2:
        ids.reshape(-1)[:2] = ids.reshape(-1)[-1]  # repeated ids
    return ids, rng.standard_normal((vocabulary, dim)).astype(dtype)


def run(module, ids, weight, padding_idx, seed=1):
    y, cache = module.embedding(ids, weight, padding_idx)
    dy = np.random.default_rng(seed).standard_normal(y.shape).astype(weight.dtype)
    return y, dy, module.embedding_backward(dy, cache)


@DTYPES
@table
def test_matches_torch(shape, vocabulary, dim, padding_idx, dtype):
    ids, weight = draw(shape, vocabulary, dim, dtype)
    y, dy, dweight = run(ops, ids, weight, padding_idx)
    tw = torch.tensor(weight, requires_grad=True)
    ty = F.embedding(torch.tensor(ids), tw, padding_idx=padding_idx)
    ty.backward(torch.tensor(dy))
    assert y.shape == (*shape, dim) and y.dtype == dtype and dweight.dtype == dtype
    np.testing.assert_array_equal(y, ty.detach().numpy())  # a gather is exact
    terms, scale = scatter_bounds(ids, dy, vocabulary)
    assert_close(dweight, tw.grad.numpy(), dtype=dtype, terms=terms, scale=scale,
                 what="dweight")


@table
def test_matches_loop_twin_and_add_at(shape, vocabulary, dim, padding_idx):
    ids, weight = draw(shape, vocabulary, dim, seed=2)
    y, dy, dweight = run(ops, ids, weight, padding_idx)
    y_r, _, dweight_r = run(reference, ids, weight, padding_idx)
    np.testing.assert_array_equal(y, y_r)
    terms, scale = scatter_bounds(ids, dy, vocabulary)
    assert_close(dweight, dweight_r, terms=terms, scale=scale, what="loop twin")
    oracle = np.zeros_like(weight)
    np.add.at(oracle, ids.reshape(-1), dy.reshape(-1, dim))
    if padding_idx is not None:
        oracle[padding_idx] = 0
    assert_close(dweight, oracle, terms=terms, scale=scale, what="np.add.at")


@table
def test_backward_matches_finite_differences(shape, vocabulary, dim, padding_idx):
    ids, weight = draw(shape, vocabulary, dim, seed=3)
    _, dy, dweight = run(ops, ids, weight, padding_idx)
    numeric, error = numeric_gradient(lambda: float(np.sum(ops.embedding(ids, weight)[0] * dy)),
                                      weight, with_error=True)
    if padding_idx is not None:  # the padding row is excluded from learning by definition
        numeric[padding_idx] = 0
    assert_gradient_close(dweight, numeric, error, what="dweight")


def test_padding_and_unused_rows_get_exactly_zero_gradient():
    ids = np.array([[2, 0, 0, 3], [0, 2, 2, 0]])
    weight = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    y, cache = ops.embedding(ids, weight, padding_idx=0)
    np.testing.assert_array_equal(y[0, 1], weight[0])  # the forward reads the row, as torch
    dweight = ops.embedding_backward(np.ones_like(y) * 3, cache)
    assert np.all(dweight[[0, 1, 4, 5]] == 0)
    np.testing.assert_array_equal(dweight[2], np.full(4, 9, np.float32))
    np.testing.assert_array_equal(dweight[3], np.full(4, 3, np.float32))


def test_heavy_duplicates_in_float32_stay_accurate():
    """Thousands of padding-like repeats: the pairwise scatter matches a float64 sum
    within the pairwise bound, ceil(log2 n) roundings of the sum of |terms| (Higham, 4.2),
    where a sequential sum's bound grows with n."""
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 50, (64, 100))
    ids[:, 60:] = 7
    weight = rng.standard_normal((50, 16)).astype(np.float32)
    y, cache = ops.embedding(ids, weight)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dweight = ops.embedding_backward(dy, cache)
    exact = np.zeros((50, 16))
    np.add.at(exact, ids.reshape(-1), dy.reshape(-1, 16).astype(np.float64))
    assert dweight.dtype == np.float32
    count, scale = scatter_bounds(ids, dy, 50)
    depth = int(np.ceil(np.log2(count)))
    assert_close(dweight, exact, dtype=np.float32, terms=depth**2, scale=scale,
                 what="float32 scatter")


@pytest.mark.parametrize("int_dtype", [np.int32, np.int64, np.uint8, np.int16])
def test_non_contiguous_ids_weight_dy_and_any_integer_dtype(int_dtype):
    ids, weight = draw((4, 6), 5, 3, seed=5)
    y, dy, dweight = run(ops, ids, weight, 2)
    ids_view = np.repeat(ids.astype(int_dtype), 2, axis=1)[:, ::2]
    weight_big = np.zeros((5, 6))
    weight_big[:, ::2] = weight
    dy_view = np.ascontiguousarray(np.swapaxes(dy, 0, 1)).swapaxes(0, 1)
    assert not ids_view.flags.c_contiguous and not dy_view.flags.c_contiguous
    y2, cache = ops.embedding(ids_view, weight_big[:, ::2], 2)
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_array_equal(ops.embedding_backward(dy_view, cache), dweight)


W = np.zeros((5, 3))
ERRORS = [
    (lambda: ops.embedding(np.array([[1, 5]]), W), ValueError,
     r"embedding: 'ids' must be in \[0, 5\).*received id 5 at index \(0, 1\)"),
    (lambda: ops.embedding(np.array([0, -1, 9]), W), ValueError,
     r"received id -1 at index \(1,\) \(2 out of range\)"),
    (lambda: ops.embedding(np.array([0.0, 1.0]), W), TypeError,
     "'ids' must have an integer dtype.*float64"),
    (lambda: ops.embedding(np.array([True]), W), TypeError, "integer dtype"),
    (lambda: ops.embedding("3", W), TypeError, "'ids' must be an integer array"),
    (lambda: ops.embedding([1, 2], np.zeros(5)), ValueError, "'weight' must be a 2-D array"),
    (lambda: ops.embedding([1, 2], np.zeros((5, 3), int)), TypeError, "'weight' must have dtype"),
    (lambda: ops.embedding([1], W, padding_idx=5), ValueError,
     r"'padding_idx' must be in \[-5, 5\).*received 5"),
    (lambda: ops.embedding([1], W, padding_idx=1.0), TypeError, "'padding_idx' must be an int"),
    (lambda: ops.embedding_backward(np.zeros((2, 3)), ops.embedding([1], W)[1]), ValueError,
     r"'dy' must have the forward output's shape \(1, 3\)"),
    (lambda: ops.embedding_backward(np.zeros((1, 3), np.float32), ops.embedding([1], W)[1]),
     TypeError, "'dy' must have the forward dtype float64"),
    (lambda: ops.embedding_backward(np.zeros((1, 3)), None), TypeError,
     "embedding_backward: 'cache' must be the cache returned by embedding"),
]


@pytest.mark.parametrize("index", range(len(ERRORS)))
def test_bad_input_raises_a_helpful_error(index):
    call, error, pattern = ERRORS[index]
    with pytest.raises(error, match=pattern):
        call()


# -------------------------------------------------------------------- the layer
@DTYPES
def test_layer_matches_torch_module_over_steps(dtype):
    layer = L.Embedding(9, 4, padding_idx=2, dtype=dtype, seed=0)
    module = torch.nn.Embedding(9, 4, padding_idx=2).to(
        torch.float64 if dtype == np.float64 else torch.float32)
    rng = np.random.default_rng(1)
    layer.build((5,))
    assert np.all(layer.parameters["W"][2] == 0)
    with torch.no_grad():
        module.weight.copy_(torch.tensor(layer.parameters["W"]))
    seen_ids, seen_dy = [], []  # the gradients accumulate over the steps
    for _ in range(3):
        ids = rng.integers(0, 9, (3, 5))
        y, ty = layer.forward(ids), module(torch.tensor(ids))
        np.testing.assert_array_equal(y, ty.detach().numpy())
        dy = rng.standard_normal(y.shape).astype(dtype)
        assert layer.backward(dy) is None
        ty.backward(torch.tensor(dy))
        seen_ids.append(ids)
        seen_dy.append(dy)
        terms, scale = scatter_bounds(np.stack(seen_ids), np.stack(seen_dy), 9)
        assert_close(layer.gradients["W"], module.weight.grad.numpy(), dtype=dtype,
                     terms=terms, scale=scale, what="dW")
    assert np.all(layer.gradients["W"][2] == 0)


def test_default_initialization_is_standard_normal_with_a_zero_padding_row():
    W = L.Embedding(2000, 50, padding_idx=-1, seed=3).build((4,)).parameters["W"]
    assert W.dtype == np.float32 and W.shape == (2000, 50)
    assert np.all(W[-1] == 0)
    n = W[:-1].size  # N(0, 1) draws
    assert abs(W[:-1].mean()) <= mean_bound(1.0, n)
    assert abs(W[:-1].std() - 1) <= std_bound(1.0, n)


CONTRACT = [(name, seed) for name in INTEGER_INPUT_CASES for seed in (0, 1, 2)]
contract = pytest.mark.parametrize("name, seed", CONTRACT,
                                   ids=[f"{n}-{s}" for n, s in CONTRACT])


def make(name, seed):
    layer, shape = INTEGER_INPUT_CASES[name](np.random.default_rng(seed))
    return layer, shape


def id_batch(layer, shape, seed, n=2):
    return np.random.default_rng(1000 + seed).integers(0, layer.num_embeddings, (n, *shape))


@contract
def test_contract_build_shapes_and_finite_differences(name, seed):
    layer, shape = make(name, seed)
    assert not layer.built
    ids = id_batch(layer, shape, seed)
    y = layer.forward(ids)
    assert layer.built and layer.input_shape == shape and layer.output_shape(shape) == y.shape[1:]
    assert set(layer.gradients) == {"W"} and not np.any(layer.gradients["W"])
    dy = np.random.default_rng(seed).standard_normal(y.shape)
    assert layer.backward(dy) is None
    numeric, error = numeric_gradient(lambda: float(np.sum(layer.forward(ids, training=False)
                                                           * dy)),
                                      layer.parameters["W"], with_error=True)
    if layer.padding_idx is not None:
        numeric[layer.padding_idx] = 0
    assert_gradient_close(layer.gradients["W"], numeric, error, what="dW")


def kernel_gradient(layer, ids, dy):
    """The table's gradient from the layer's kernel pair, called directly."""
    W = layer.parameters["W"]
    if isinstance(layer, L.EmbeddingBag):
        cache = ops.embedding_bag(W, ids, mode=layer.mode, padding_idx=layer.padding_idx)[1]
        return ops.embedding_bag_backward(dy, cache)[0]
    return ops.embedding_backward(dy, ops.embedding(ids, W, layer.padding_idx)[1])


@contract
def test_contract_config_frozen_eval_and_shared_use(name, seed):
    layer, shape = make(name, seed)
    config = layer.get_config()
    clone = type(layer).from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config
    ids1, ids2 = id_batch(layer, shape, seed), id_batch(layer, shape, seed + 50, n=3)
    y1 = layer.forward(ids1)
    clone.build(shape)
    clone.parameters["W"][...] = layer.parameters["W"]
    np.testing.assert_array_equal(clone.forward(ids1, training=False), y1)
    frozen = type(layer).from_config({**config, "trainable": False})
    frozen.build(shape)
    frozen.parameters["W"][...] = layer.parameters["W"]
    frozen.forward(ids1)
    assert frozen.backward(np.ones_like(y1)) is None and not np.any(frozen.gradients["W"])
    y2 = layer.forward(ids2)  # shared use: two forwards, then two backwards, latest first
    dy1, dy2 = np.cos(y1), np.sin(y2)
    layer.backward(dy2)
    layer.backward(dy1)
    with pytest.raises(RuntimeError, match=rf"{name}.*backward\(\) called without"):
        layer.backward(dy1)
    expected = kernel_gradient(layer, ids1, dy1) + kernel_gradient(layer, ids2, dy2)
    # 0 + g2 + g1 == g1 + g2 exactly: a backward adds its kernel's gradient once
    np.testing.assert_array_equal(layer.gradients["W"], expected)
    layer.forward(ids1, training=False)
    with pytest.raises(RuntimeError, match="without a matching forward"):
        layer.backward(dy1)


@contract
def test_contract_dtypes(name, seed):
    layer64, shape = make(name, seed)
    config = {k: v for k, v in layer64.get_config().items() if k != "dtype"}
    layer = type(layer64).from_config(config)
    ids = id_batch(layer64, shape, seed)
    y = layer.forward(ids)
    assert layer.parameters["W"].dtype == np.float32 and y.dtype == np.float32
    layer.backward(np.ones_like(y))
    assert layer.gradients["W"].dtype == np.float32
    assert layer64.forward(ids).dtype == np.float64


def test_layer_rejects_float_or_out_of_range_ids_and_bad_config():
    layer = L.Embedding(4, 2)
    with pytest.raises(TypeError, match="Embedding: 'ids' must have an integer dtype"):
        layer.forward(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"Embedding: 'ids' must be in \[0, 4\).*received id 4"):
        layer.forward(np.array([[0, 4]]))
    with pytest.raises(ValueError, match="batch axis"):
        layer.forward(np.int64(1))
    with pytest.raises(ValueError, match="'num_embeddings' must be an int >= 1"):
        L.Embedding(0, 2)
    with pytest.raises(TypeError, match="'embedding_dim' must be an int"):
        L.Embedding(3, 2.5)
    with pytest.raises(ValueError, match=r"Embedding: 'padding_idx' must be in \[-3, 3\)"):
        L.Embedding(3, 2, padding_idx=3)


def test_embedding_model_trains_summarizes_and_round_trips(tmp_path):
    model = Sequential([L.Embedding(10, 4, padding_idx=0), L.Flatten(), L.Dense(2)], seed=0)
    ids = np.random.default_rng(0).integers(0, 10, (8, 3))
    assert "(None, 3, 4)" in model.summary(input_shape=(3,), print_fn=None)
    y = model.forward(ids)
    assert model.backward(np.ones_like(y)) is None
    assert np.all(model[0].gradients["W"][0] == 0)
    path = tmp_path / "embedding.safetensors"
    io.save(model, path)
    loaded = io.load(path)
    np.testing.assert_array_equal(loaded.forward(ids, training=False),
                                  model.forward(ids, training=False))
    assert copy.deepcopy(model[0]).get_config() == model[0].get_config()
