"""SparseEvolution (Sparse Evolutionary Training): the layer against torch's Linear with the
masked weight, masked weights under optimizers, evolve's pruning and regrowth, the fit
callback on a toy task, save/load, torch and ONNX export, and bad arguments."""

import numpy as np
import pytest

from handgrad import io, optimizers
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.training import SparseEvolutionCallback

from tolerances import assert_entries_close, linear_op_bounds

torch = pytest.importorskip("torch")
DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])


def built(out=6, n_in=9, epsilon=1.0, seed=0, dtype="float64", **kwargs):
    layer = L.SparseEvolution(out, epsilon=epsilon, seed=seed, dtype=dtype, **kwargs)
    return layer.build((n_in,))


@DTYPES
def test_forward_backward_match_torch_linear_with_the_masked_weight(dtype):
    rng = np.random.default_rng(0)
    layer = built(7, 11, epsilon=1.5, dtype=np.dtype(dtype).name)
    mask = layer.buffers["mask"]
    assert 0 < layer.connections < mask.size  # sparse, not empty
    x = rng.standard_normal((5, 3, 11)).astype(dtype)
    y = layer.forward(x)
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = layer.backward(dy)
    masked = layer.parameters["W"] * mask
    tw = torch.tensor(masked.T.copy(), requires_grad=True)
    tb = torch.tensor(layer.parameters["b"], requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.linear(tx, tw, tb)
    ty.backward(torch.tensor(dy))
    bounds = linear_op_bounds("linear", [x, masked, layer.parameters["b"]], dy)
    pairs = [(y, ty.detach().numpy()), (dx, tx.grad.numpy()),
             (layer.gradients["W"], tw.grad.numpy().T * mask),  # torch's, masked
             (layer.gradients["b"], tb.grad.numpy())]
    for (actual, expected), (terms, scale) in zip(pairs, bounds):
        assert actual.dtype == dtype
        assert_entries_close(actual, expected, dtype=dtype, terms=terms, scale=scale)
    assert np.all(layer.gradients["W"][mask == 0] == 0)
    assert np.any(tw.grad.numpy().T[mask == 0] != 0)  # the dense gradient is not zero there


def test_density_is_epsilon_times_fan_sum_over_size_capped_at_one():
    layer = built(6, 9, epsilon=1.0)
    assert layer.density == pytest.approx(15 / 54)
    assert layer.connections == round(15 / 54 * 54)
    full = built(6, 9, epsilon=10.0)
    assert full.density == 1.0 and full.connections == 54
    assert np.all(built(6, 9, epsilon=1.0, seed=3).buffers["mask"] ==
                  built(6, 9, epsilon=1.0, seed=3).buffers["mask"])
    assert np.any(built(6, 9, seed=3).buffers["mask"] != built(6, 9, seed=4).buffers["mask"])


def train_steps(layer, optimizer, x, steps, evolve=None):
    params, grads = layer.parameters, layer.gradients
    for _ in range(steps):
        layer.zero_grad()
        y = layer.forward(x)
        layer.backward(y - 1.0)
        optimizer.step(params, grads)
        if evolve is not None:
            layer.evolve(evolve)


@pytest.mark.parametrize("make", [
    lambda: optimizers.SGD(0.1, momentum=0.9, weight_decay=0.01),
    lambda: optimizers.Adam(0.05, weight_decay=0.01),
    lambda: optimizers.AdamW(0.05, weight_decay=0.1)], ids=["sgd", "adam", "adamw"])
def test_masked_weights_stay_zero_and_optimizer_drift_is_cleared(make):
    x = np.random.default_rng(1).standard_normal((8, 9))
    layer = built()
    off = layer.buffers["mask"] == 0
    train_steps(layer, make(), x, 5)  # a fixed mask: no gradient, no state, no move
    assert np.all(layer.parameters["W"][off] == 0)
    # after evolve removes connections, their momentum / moments move them on the next
    # step (the optimizer can); the next forward clears that before it is used
    optimizer = make()
    train_steps(layer, optimizer, x, 3, evolve=0.5)
    layer.zero_grad()
    layer.backward(layer.forward(x) - 1.0)
    optimizer.step(layer.parameters, layer.gradients)
    off = layer.buffers["mask"] == 0
    assert np.any(layer.parameters["W"][off] != 0)
    drifted = layer.parameters["W"].copy()
    y = layer.forward(x, training=False)
    assert np.all(layer.parameters["W"][off] == 0)
    np.testing.assert_array_equal(y, x @ (drifted * layer.buffers["mask"]) +
                                  layer.parameters["b"])


def test_evolve_removes_the_weakest_of_each_sign_and_grows_at_empty_places():
    layer = built(8, 10, epsilon=2.0)
    w, mask = layer.parameters["W"], layer.buffers["mask"]
    before_w, before_mask = w.copy(), mask.copy()
    active = np.flatnonzero(before_mask)
    values = before_w.reshape(-1)[active]
    positive, negative = active[values >= 0], active[values < 0]
    zeta = 0.3
    expected = set(positive[np.argsort(values[values >= 0], kind="stable")][
        :int(zeta * positive.size)])
    expected |= set(negative[np.argsort(-values[values < 0], kind="stable")][
        :int(zeta * negative.size)])
    replaced = layer.evolve(zeta)
    assert replaced == len(expected) > 0
    assert layer.connections == active.size
    now = set(np.flatnonzero(mask))
    kept = set(active) - expected
    assert kept <= now  # the others stay, with their weights
    np.testing.assert_array_equal(w.reshape(-1)[sorted(kept)],
                                  before_w.reshape(-1)[sorted(kept)])
    grown = now - kept
    assert len(grown) == replaced and not grown & kept  # at places empty after removal
    bound = 1 / np.sqrt(10)  # torch_default's bound for the layer's fan-in
    assert all(0 < abs(w.flat[i]) <= bound for i in grown)
    assert np.all(w[mask == 0] == 0)
    assert layer.evolve(0.0) == 0 and np.array_equal(mask.reshape(-1)[sorted(now)], [1] *
                                                     len(now))


def test_evolve_is_reproducible_from_the_seed():
    runs = []
    for seed in (5, 5, 6):
        layer = built(seed=seed)
        for _ in range(3):
            layer.evolve(0.4)
        runs.append((layer.buffers["mask"].copy(), layer.parameters["W"].copy()))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert np.any(runs[0][0] != runs[2][0])


def blobs(rng, n):
    labels = rng.integers(0, 2, n)
    x = rng.standard_normal((n, 20)) + np.where(labels[:, None] == 1, 1.0, -1.0)
    return x.astype(np.float32), labels


def test_fit_with_the_callback_learns_two_blobs_and_keeps_the_connection_count():
    rng = np.random.default_rng(0)
    x, y = blobs(rng, 400)
    x_test, y_test = blobs(rng, 200)
    model = Sequential([L.SparseEvolution(16, epsilon=2.0), L.ReLU(),
                        L.SparseEvolution(2, epsilon=2.0)], seed=0, input_shape=(20,))
    counts = [layer.connections for layer in (model[0], model[2])]
    assert counts[0] < 20 * 16
    callback = SparseEvolutionCallback(zeta=0.3)
    model.compile("adam", loss="cross_entropy", metrics=["accuracy"])
    model.fit(x, y, epochs=6, batch_size=32, rng=0, verbose=0, callbacks=[callback])
    accuracy = np.mean(model.predict(x_test).argmax(-1) == y_test)
    assert accuracy >= 0.95
    assert len(callback.replaced) == 6 and callback.replaced[0]["sparse_evolution_0"] > 0
    assert [layer.connections for layer in (model[0], model[2])] == counts
    for layer in (model[0], model[2]):
        assert np.all(layer.parameters["W"][layer.buffers["mask"] == 0] == 0)


def test_save_load_round_trips_the_mask_and_the_evolution_stream(tmp_path):
    model = Sequential([L.SparseEvolution(5, epsilon=1.0)], seed=2, input_shape=(7,))
    model[0].evolve(0.5)
    io.save(model, tmp_path / "sparse.safetensors")
    loaded = io.load(tmp_path / "sparse.safetensors")
    assert loaded[0].get_config() == model[0].get_config()
    np.testing.assert_array_equal(loaded[0].buffers["mask"], model[0].buffers["mask"])
    x = np.random.default_rng(0).standard_normal((4, 7)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    assert loaded[0].evolve(0.5) == model[0].evolve(0.5)
    np.testing.assert_array_equal(loaded[0].buffers["mask"], model[0].buffers["mask"])
    np.testing.assert_array_equal(loaded[0].parameters["W"], model[0].parameters["W"])


def test_torch_linear_import_keeps_the_mask_and_export_writes_the_masked_weight():
    module = torch.nn.Linear(9, 6).double()
    model = Sequential([L.SparseEvolution(6, epsilon=1.0, dtype="float64")], seed=0,
                       input_shape=(9,))
    layer, mask = model[0], model[0].buffers["mask"].copy()
    io.from_torch(module, model)
    np.testing.assert_array_equal(layer.buffers["mask"], mask)
    x = np.random.default_rng(0).standard_normal((4, 9))
    weight = module.weight.detach().numpy().T * mask
    expected = torch.nn.functional.linear(torch.tensor(x), torch.tensor(weight.T),
                                          module.bias.detach()).numpy()
    (terms, scale), *_ = linear_op_bounds("linear", [x, weight, layer.parameters["b"]],
                                          np.ones((4, 6)))
    assert_entries_close(model.predict(x), expected, dtype=np.float64, terms=terms,
                         scale=scale)
    layer.parameters["W"][mask == 0] = 3.0  # as an optimizer's state could leave it
    state = io.to_torch_state_dict(model)
    np.testing.assert_array_equal(state["0.weight"].numpy(), weight.T)
    np.testing.assert_array_equal(state["0.bias"].numpy(), module.bias.detach().numpy())


def test_onnx_export_is_a_matmul_with_the_masked_weight():
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    model = Sequential([L.SparseEvolution(4, epsilon=1.0), L.ReLU()], seed=0,
                       input_shape=(8,))
    layer = model[0]
    layer.parameters["W"][layer.buffers["mask"] == 0] = 5.0  # drift off the mask
    proto = io.export_onnx(model, None)
    onnx.checker.check_model(proto, full_check=True)
    assert "MatMul" in [node.op_type for node in proto.graph.node]
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    got = ReferenceEvaluator(proto).run(None, {"input": x})[0]
    (terms, scale), *_ = linear_op_bounds("linear", [x, layer.export_weight(),
                                                       layer.parameters["b"]],
                                          np.ones((3, 4)))
    assert_entries_close(got, model.predict(x), dtype=np.float32, terms=terms, scale=scale)


def test_bad_arguments_are_refused_with_the_argument_named():
    for epsilon in (0, -1.0):
        with pytest.raises(ValueError, match=r"SparseEvolution: 'epsilon' must be .*> 0"):
            L.SparseEvolution(4, epsilon=epsilon)
    with pytest.raises(TypeError, match="'epsilon'"):
        L.SparseEvolution(4, epsilon="dense")
    layer = built()
    for zeta in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"evolve: 'zeta' must be .*>= 0 and < 1"):
            layer.evolve(zeta)
    with pytest.raises(ValueError, match=r"SparseEvolutionCallback: 'zeta'"):
        SparseEvolutionCallback(zeta=1.0)
    with pytest.raises(RuntimeError, match="built"):
        L.SparseEvolution(4).evolve()
    with pytest.raises(RuntimeError, match="density depends on F_in"):
        _ = L.SparseEvolution(4).density
    for shape in ((), (0,)):
        with pytest.raises(ValueError, match=r"SparseEvolution: expects inputs \(N, \.\.\."):
            L.SparseEvolution(4).build(shape)
