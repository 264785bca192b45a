"""EmbeddingBag: the cases the op table cannot declare (2-D per-sample weights, max_norm,
empty and all-padding bags, bad input), the layer against ``nn.EmbeddingBag`` with
offsets and per-sample weights, torch weight import/export, save/load and the ONNX export
of fixed-length bags. The op's parity (torch, loop twin, finite differences) is in
tests/test_op_cases.py (``-k embedding_bag``)."""

import numpy as np
import pytest

from handgrad import io, ops
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.ops import reference
from handgrad.testing import assert_close

from tolerances import scatter_bounds

torch = pytest.importorskip("torch")
F = torch.nn.functional
DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])


def bag_bounds(ids, bag_of, dy, rows):
    """(terms, scale) of the table's gradient: the scatter of each id's bag's dy row."""
    return scatter_bounds(ids, np.asarray(dy)[bag_of], rows)


def torch_bag(weight, ids, dy, offsets=None, psw=None, **kwargs):
    tw = torch.tensor(weight, requires_grad=True)
    tp = None if psw is None else torch.tensor(psw, requires_grad=True)
    ty = F.embedding_bag(torch.tensor(ids), tw, None if offsets is None else
                         torch.tensor(offsets), per_sample_weights=tp, **kwargs)
    ty.backward(torch.tensor(dy))
    return ty.detach().numpy(), tw.grad.numpy(), None if tp is None else tp.grad.numpy()


@DTYPES
def test_2d_per_sample_weights_with_padding_match_torch(dtype):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 4)).astype(dtype)
    ids = np.array([[1, 5, 5, 0], [5, 5, 5, 5], [2, 3, 1, 1]])  # bag 1 is all padding
    psw = rng.standard_normal(ids.shape).astype(dtype)
    y, cache = ops.embedding_bag(weight, ids, mode="sum", per_sample_weights=psw,
                                 padding_idx=5)
    dy = rng.standard_normal(y.shape).astype(dtype)
    dweight, dpsw = ops.embedding_bag_backward(dy, cache)
    ty, tdw, tdp = torch_bag(weight, ids, dy, psw=psw, mode="sum", padding_idx=5)
    terms, scale = bag_bounds(ids, np.repeat(np.arange(3), 4), dy, 6)
    assert_close(y, ty, dtype=dtype, terms=4, scale=np.abs(weight).max() * np.abs(psw).max())
    assert np.all(y[1] == 0) and np.all(dweight[5] == 0) and np.all(dpsw[ids == 5] == 0)
    assert_close(dweight, tdw, dtype=dtype, terms=terms, scale=scale * np.abs(psw).max(),
                 what="dweight")
    assert_close(dpsw, tdp, dtype=dtype, terms=4, scale=np.abs(weight).max() * scale,
                 what="dper_sample_weights")
    y_r, cache_r = reference.embedding_bag(weight, ids, None, "sum", psw, 5)
    dw_r, dp_r = reference.embedding_bag_backward(dy, cache_r)
    assert_close(y, y_r, dtype=dtype, terms=4, scale=np.abs(y_r).max())
    assert_close(dpsw, dp_r, dtype=dtype, terms=4, scale=np.abs(dp_r).max())
    assert_close(dweight, dw_r, dtype=dtype, terms=terms, scale=scale * np.abs(psw).max())


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_max_norm_renormalizes_like_torch(mode):
    rng = np.random.default_rng(1)
    weight = 3 * rng.standard_normal((7, 3))
    ids, offsets = np.array([0, 2, 2, 5, 6, 1]), np.array([0, 2, 2])
    dy = rng.standard_normal((3, 3))
    ours = weight.copy()
    y, cache = ops.embedding_bag(ours, ids, offsets, mode, max_norm=1.5, norm_type=3.0)
    dweight = ops.embedding_bag_backward(dy, cache)[0]
    theirs = torch.tensor(weight, requires_grad=True)
    ty = F.embedding_bag(torch.tensor(ids), theirs, torch.tensor(offsets), max_norm=1.5,
                         norm_type=3.0, mode=mode)
    ty.backward(torch.tensor(dy))
    assert_close(ours, theirs.detach().numpy(), terms=3, what="renormalized table")
    assert_close(y, ty.detach().numpy(), terms=6, scale=np.abs(ours).max())
    assert_close(dweight, theirs.grad.numpy(), terms=6, scale=np.abs(dy).max())
    assert np.all(y[1] == 0)  # the empty bag


def test_max_gradient_goes_to_the_first_maximum_per_feature():
    weight = np.array([[1.0, 5.0], [3.0, 2.0], [3.0, 0.0]])
    y, cache = ops.embedding_bag(weight, np.array([[0, 1, 2]]), mode="max")
    np.testing.assert_array_equal(y, [[3.0, 5.0]])
    dweight, none = ops.embedding_bag_backward(np.array([[10.0, 20.0]]), cache)
    assert none is None
    np.testing.assert_array_equal(dweight, [[0, 20], [10, 0], [0, 0]])


def test_bad_input_is_refused_with_the_argument_named():
    w, ids = np.zeros((4, 2)), np.array([0, 1, 2, 3])
    cases = [
        (dict(indices=np.array([0, 4])), ValueError, r"'indices' must be in \[0, 4\).*id 4"),
        (dict(offsets=np.array([1, 2])), ValueError, r"'offsets' must start at 0"),
        (dict(offsets=np.array([0, 3, 2])), ValueError,
         r"'offsets' must be sorted.*offsets\[1\] = 3 > offsets\[2\] = 2"),
        (dict(offsets=np.array([0, 5])), ValueError, r"'offsets' must be <= .* 4"),
        (dict(offsets=np.array([0, 2, 3]), include_last_offset=True), ValueError,
         r"last of 'offsets' must be the number of indices 4"),
        (dict(offsets=None), ValueError, r"1-D 'indices' need 'offsets'"),
        (dict(indices=np.zeros((2, 2), int), offsets=np.array([0])), ValueError,
         r"'offsets' must be None for 2-D"),
        (dict(indices=np.zeros((1, 2, 2), int), offsets=None), ValueError,
         r"'indices' must be 1-D .* or 2-D"),
        (dict(mode="mean", per_sample_weights=np.ones(4)), ValueError,
         r"'per_sample_weights' need mode='sum'; received mode='mean'"),
        (dict(mode="sum", per_sample_weights=np.ones(3)), ValueError,
         r"'per_sample_weights' must have the shape of 'indices' \(4,\)"),
        (dict(mode="median"), ValueError, r"'mode' must be one of"),
        (dict(indices=ids.astype(float)), TypeError, r"'indices' must have an integer dtype"),
        (dict(offsets=np.array([0.0, 2.0])), TypeError,
         r"'offsets' must have an integer dtype .*dtype float64"),
        (dict(offsets=np.array([0, 2, 4]), include_last_offset=1), TypeError,
         r"'include_last_offset' must be a bool; received 1"),
    ]
    for kwargs, error, message in cases:
        args = {"indices": ids, "offsets": np.array([0, 2]), **kwargs}
        with pytest.raises(error, match="embedding_bag: .*" + message):
            ops.embedding_bag(w, **args)
    with pytest.raises(ValueError, match=r"EmbeddingBag: 'mode' must be one of"):
        L.EmbeddingBag(4, 2, mode="avg")
    with pytest.raises(ValueError, match=r"EmbeddingBag.*list of 4"):
        L.EmbeddingBag(4, 2).forward([ids, ids, ids, ids])


@DTYPES
def test_layer_with_offsets_and_weights_matches_nn_embedding_bag(dtype):
    rng = np.random.default_rng(2)
    module = torch.nn.EmbeddingBag(9, 3, mode="sum", include_last_offset=True, padding_idx=0)
    module = module.double() if dtype == np.float64 else module
    layer = L.EmbeddingBag(9, 3, mode="sum", include_last_offset=True, padding_idx=0,
                           dtype=np.dtype(dtype).name)
    model = Sequential([layer], input_shape=(4,))
    io.from_torch(module, model)
    ids, offsets = rng.integers(0, 9, 10), np.array([0, 4, 4, 9, 10])
    psw = rng.standard_normal(10).astype(dtype)
    y = layer.forward([ids, offsets, psw])
    tp = torch.tensor(psw, requires_grad=True)
    ty = module(torch.tensor(ids), torch.tensor(offsets), per_sample_weights=tp)
    dy = rng.standard_normal(y.shape).astype(dtype)
    ty.backward(torch.tensor(dy))
    _, _, dpsw = layer.backward(dy)
    assert y.dtype == dtype and y.shape == (4, 3)
    assert_close(y, ty.detach().numpy(), dtype=dtype, terms=5, scale=3 * np.abs(psw).max())
    assert_close(dpsw, tp.grad.numpy(), dtype=dtype, terms=3, scale=3 * np.abs(dy).max())
    terms, scale = bag_bounds(ids, np.searchsorted(offsets[:-1], np.arange(10), "right") - 1,
                              dy, 9)
    assert_close(layer.gradients["W"], module.weight.grad.numpy(), dtype=dtype, terms=terms,
                 scale=scale * np.abs(psw).max(), what="dW")
    state = io.to_torch_state_dict(model)
    assert list(state) == ["0.weight"] and torch.equal(state["0.weight"], module.weight.data)


def test_model_trains_saves_loads_and_exports_fixed_bags_to_onnx(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(3)
    ids = rng.integers(0, 12, (5, 4))
    for mode in ("sum", "mean", "max"):
        model = Sequential([L.EmbeddingBag(12, 4, mode=mode), L.Dense(2)], seed=0)
        y = model.forward(ids)
        assert y.shape == (5, 2) and model.backward(np.ones_like(y)) is None
        assert np.any(model[0].gradients["W"])
        io.save(model, tmp_path / f"{mode}.safetensors")
        loaded = io.load(tmp_path / f"{mode}.safetensors")
        assert loaded[0].get_config() == model[0].get_config()
        np.testing.assert_array_equal(loaded.predict(ids), model.predict(ids))
        proto = io.export_onnx(model, None)
        onnx.checker.check_model(proto, full_check=True)
        got = ReferenceEvaluator(proto).run(None, {"input": ids})[0]
        assert_close(got, model.predict(ids), dtype=np.float32, terms=8,
                     scale=np.abs(model.predict(ids)).max() + 1)
    padded = Sequential([L.EmbeddingBag(12, 4, padding_idx=0)], input_shape=(4,))
    with pytest.raises(ValueError, match=r"export_onnx: EmbeddingBag.*padding_idx=0"):
        io.export_onnx(padded, None)
