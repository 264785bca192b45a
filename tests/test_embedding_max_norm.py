"""Embedding ``max_norm`` / ``norm_type`` against ``nn.Embedding``: each forward rescales
IN PLACE the looked-up rows whose norm exceeds ``max_norm`` (torch's
``embedding_renorm_``), and the gradient is the lookup's on the rescaled table. Checked
for the output, the table after the forward (repeated ids rescale once), the gradient,
with ``padding_idx``; argument checks; config, save/load, torch import and ONNX refusal.
"""

import re

import numpy as np
import pytest

from handgrad import io
from handgrad import layers as L
from handgrad.io.onnx.export import export_onnx
from handgrad.model import Sequential
from handgrad.ops.embedding import embedding_renorm_
from handgrad.testing import assert_close

from tolerances import scatter_bounds

torch = pytest.importorskip("torch")

DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
# (max_norm, norm_type, padding_idx)
SETTINGS = [(1.0, 2.0, None), (1.5, 1.0, 2), (0.7, 3.0, -1), (1.2, float("inf"), None)]
settings = pytest.mark.parametrize("max_norm, norm_type, padding_idx", SETTINGS,
                                   ids=[f"max{m}-p{p}-pad{i}" for m, p, i in SETTINGS])


def _pair(dtype, max_norm, norm_type, padding_idx, vocabulary=9, dim=4):
    layer = L.Embedding(vocabulary, dim, padding_idx=padding_idx, max_norm=max_norm,
                        norm_type=norm_type, dtype=dtype, seed=0).build((5,))
    module = torch.nn.Embedding(vocabulary, dim, padding_idx=padding_idx, max_norm=max_norm,
                                norm_type=norm_type).to(
        torch.float64 if dtype == np.float64 else torch.float32)
    with torch.no_grad():
        module.weight.copy_(torch.tensor(layer.parameters["W"]))
    return layer, module


@DTYPES
@settings
def test_layer_matches_torch_over_steps(dtype, max_norm, norm_type, padding_idx):
    layer, module = _pair(dtype, max_norm, norm_type, padding_idx)
    before = layer.parameters["W"].copy()
    rng = np.random.default_rng(1)
    all_ids, all_dy = [], []  # the gradient accumulates over the steps: compared at the end
    for _ in range(3):
        ids = rng.integers(0, 6, (3, 5))  # ids repeat; rows 6..8 are never looked up
        dy = rng.standard_normal((*ids.shape, 4)).astype(dtype)
        all_ids.append(ids)
        all_dy.append(dy)
        y, ty = layer.forward(ids), module(torch.tensor(ids))
        assert_close(y, ty.detach().numpy(), dtype=dtype, what="y")
        assert_close(layer.parameters["W"], module.weight.detach().numpy(), dtype=dtype,
                     what="W after forward")
        assert layer.backward(dy) is None
        ty.backward(torch.tensor(dy))
    terms, scale = scatter_bounds(np.stack(all_ids), np.stack(all_dy), 9)
    assert_close(layer.gradients["W"], module.weight.grad.numpy(), dtype=dtype, terms=terms,
                 scale=scale, what="dW")
    W = layer.parameters["W"]
    norms = np.linalg.norm(W[:6], ord=norm_type, axis=1)
    assert np.all(norms <= max_norm * (1 + 1e-5))  # the looked-up rows were rescaled
    assert np.any(np.linalg.norm(before[:6], ord=norm_type, axis=1) > max_norm)
    np.testing.assert_array_equal(W[6:], before[6:])  # rows not looked up are untouched


@DTYPES
def test_renorm_rescales_each_row_once_and_only_rows_over_the_bound(dtype):
    W = np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]], dtype=dtype)
    expected = W.copy()
    expected[0] *= dtype(1.0 / (5.0 + 1e-7))
    ids = np.array([0, 0, 0, 1])
    assert embedding_renorm_(W, ids, 1.0) is W  # in place
    assert_close(W, expected, dtype=dtype, what="W")
    tw = torch.tensor(np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]], dtype=dtype))
    torch.embedding_renorm_(tw, torch.tensor(ids), 1.0, 2.0)
    assert_close(W, tw.numpy(), dtype=dtype, what="W vs torch")


def test_evaluation_forward_also_renormalizes_as_torch():
    layer, module = _pair(np.float64, 1.0, 2.0, None)
    ids = np.array([[0, 1, 1, 3]])
    y = layer.forward(ids, training=False)
    ty = module(torch.tensor(ids))
    assert_close(y, ty.detach().numpy(), dtype=np.float64)
    assert_close(layer.parameters["W"], module.weight.detach().numpy(), dtype=np.float64)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"max_norm": 0}, ValueError, "'max_norm' must be a finite number > 0; received 0"),
    ({"max_norm": -1.5}, ValueError, "received -1.5"),
    ({"max_norm": float("inf")}, ValueError, "'max_norm'"),
    ({"max_norm": float("nan")}, ValueError, "'max_norm'"),
    ({"max_norm": "1"}, TypeError, "'max_norm' must be a positive number or None"),
    ({"max_norm": True}, TypeError, "'max_norm'"),
    ({"max_norm": 1.0, "norm_type": 0}, ValueError, "'norm_type' must be a number > 0"),
    ({"max_norm": 1.0, "norm_type": -2.0}, ValueError, "'norm_type'"),
    ({"max_norm": 1.0, "norm_type": None}, TypeError, "'norm_type' must be a positive number"),
])
def test_bad_arguments_are_refused(kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        L.Embedding(5, 3, **kwargs)


def test_renorm_op_checks_its_arguments():
    W = np.ones((3, 2))
    with pytest.raises(TypeError, match="'max_norm' must be a positive number"):
        embedding_renorm_(W, [0], None)
    with pytest.raises(ValueError, match="'ids' must be in"):
        embedding_renorm_(W, [3], 1.0)


def test_config_save_load_and_torch_import_keep_max_norm(tmp_path):
    model = Sequential([L.Embedding(7, 3, max_norm=0.5, norm_type=1.0), L.Dense(2)], seed=0)
    ids = np.array([[1, 2, 2, 5]])
    model.build(ids.shape[1:])
    config = model.layers[0].get_config()
    assert config["max_norm"] == 0.5 and config["norm_type"] == 1.0
    path = tmp_path / "m.npz"
    io.save(model, path)
    loaded = io.load(path)
    assert loaded.layers[0].max_norm == 0.5 and loaded.layers[0].norm_type == 1.0
    np.testing.assert_array_equal(loaded.predict(ids), model.predict(ids))
    module = torch.nn.Sequential(torch.nn.Embedding(7, 3, max_norm=0.5, norm_type=1.0),
                                 torch.nn.Linear(3, 2)).double()
    io.from_torch(module, model)
    np.testing.assert_array_equal(model.layers[0].parameters["W"],
                                  module[0].weight.detach().numpy())


def test_onnx_export_refuses_max_norm():
    pytest.importorskip("onnx")
    model = Sequential([L.Embedding(7, 3, max_norm=0.5)], seed=0)
    model.build((4,))
    with pytest.raises(ValueError, match="max_norm"):
        export_onnx(model, None)
