"""EmbeddingBag called in a graph Model on [ids, per_sample_weights] (fixed-length bags
with weights) against ``nn.EmbeddingBag``: outputs, the table's gradient and the weights'
gradient; bad calls."""

import numpy as np
import pytest

import handgrad as hg
from handgrad import io
from handgrad import layers as L

from tolerances import scatter_bounds

torch = pytest.importorskip("torch")
DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])


def weighted_bags(dtype, mode="sum", **kwargs):
    ids, weights = hg.Input((4,), name="ids", dtype="int64"), hg.Input((4,), name="weights")
    bag = L.EmbeddingBag(9, 3, mode=mode, name="bag", **kwargs)
    return hg.Model([ids, weights], bag([ids, weights]), dtype=np.dtype(dtype).name, seed=0)


@DTYPES
def test_graph_call_with_per_sample_weights_matches_nn_embedding_bag(dtype):
    rng = np.random.default_rng(0)
    module = torch.nn.EmbeddingBag(9, 3, mode="sum", padding_idx=2)
    module = module.double() if dtype == np.float64 else module
    model = weighted_bags(dtype, padding_idx=2)
    io.from_torch(module, model, prefixes={"bag": ""})
    ids = rng.integers(0, 9, (5, 4))
    ids[1, 0] = 2  # a padding id
    psw = rng.standard_normal((5, 4)).astype(dtype)
    y = model.forward([ids, psw])
    dy = rng.standard_normal(y.shape).astype(dtype)
    dids, dpsw = model.backward(dy)
    tp = torch.tensor(psw, requires_grad=True)
    ty = module(torch.tensor(ids), per_sample_weights=tp)
    ty.backward(torch.tensor(dy))
    table = model.get_layer("bag").parameters["W"]
    assert y.dtype == dtype and y.shape == (5, 3) and dids is None
    bound = np.abs(table).max() * np.abs(psw).max()
    hg.testing.assert_close(y, ty.detach().numpy(), dtype=dtype, terms=4, scale=4 * bound)
    hg.testing.assert_close(dpsw, tp.grad.numpy(), dtype=dtype, terms=3,
                            scale=3 * np.abs(table).max() * np.abs(dy).max())
    assert np.all(dpsw[ids == 2] == 0)
    terms, scale = scatter_bounds(ids, dy[np.repeat(np.arange(5), 4)], 9)
    hg.testing.assert_close(model.get_layer("bag").gradients["W"], module.weight.grad.numpy(),
                            dtype=dtype, terms=terms, scale=scale * np.abs(psw).max(),
                            what="dW")


def test_graph_calls_on_ids_alone_still_work_and_bad_calls_are_refused():
    ids = hg.Input((4,), dtype="int64")
    model = hg.Model(ids, L.EmbeddingBag(9, 3, mode="max")(ids), seed=0)
    x = np.random.default_rng(1).integers(0, 9, (2, 4))
    y = model.forward(x)
    assert y.shape == (2, 3) and model.backward(np.ones_like(y)) is None
    with pytest.raises(ValueError, match="mode"):
        weighted_bags(np.float32, mode="mean")
    ids, short = hg.Input((4,), dtype="int64"), hg.Input((3,))
    with pytest.raises(ValueError, match=r"both of shape \(N, L\)"):
        L.EmbeddingBag(9, 3, mode="sum")([ids, short])
    with pytest.raises(ValueError, match="ids or \\[ids, per_sample_weights\\]"):
        L.EmbeddingBag(9, 3, mode="sum")([ids, hg.Input((4,)), hg.Input((4,))])


def test_graph_call_with_per_sample_weights_exports_to_onnx():
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    model = weighted_bags(np.float32)
    rng = np.random.default_rng(4)
    ids, psw = rng.integers(0, 9, (3, 4)), rng.standard_normal((3, 4)).astype(np.float32)
    proto = io.export_onnx(model, None)
    onnx.checker.check_model(proto, full_check=True)
    names = [i.name for i in proto.graph.input]
    got = ReferenceEvaluator(proto).run(None, dict(zip(names, [ids, psw])))[0]
    expected = model.predict([ids, psw])
    table = model.get_layer("bag").parameters["W"]
    hg.testing.assert_close(got, expected, dtype=np.float32, terms=4,
                            scale=4 * np.abs(table).max() * np.abs(psw).max())
    with pytest.raises(ValueError, match="padding_idx=0"):
        io.export_onnx(weighted_bags(np.float32, padding_idx=0), None)
