"""Weight tying: ``TiedDense`` reuses an ``Embedding``'s table as its output projection
(logits = h @ E.T + b), against PyTorch's tied ``lm_head.weight = embedding.weight``."""

from __future__ import annotations

import numpy as np
import pytest

from handgrad import Input, Model, optimizers
from handgrad import layers as L
from handgrad.io import export_onnx, from_torch, load, save, to_torch_state_dict
from handgrad.model import Sequential
from handgrad.testing import assert_close

from tolerances_composite import UPDATE_ROUNDINGS, Trajectory, network_bounds

torch = pytest.importorskip("torch")

V, D, N, T, STEPS = 13, 6, 4, 5, 5
# The table's gradient sums N * T terms from each of its two uses every step.
STEP_TERMS = UPDATE_ROUNDINGS + 2 * N * T


class TorchLM(torch.nn.Module):
    """Embedding -> Linear -> Tanh -> Linear whose weight is the embedding's."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Embedding(V, D), torch.nn.Linear(D, D),
                                       torch.nn.Tanh(), torch.nn.Linear(D, V))
        self.net[3].weight = self.net[0].weight  # tied

    def forward(self, ids):
        return self.net(ids)


def tied_lm(dtype="float64", seed=0):
    embedding = L.Embedding(V, D)
    model = Sequential([embedding, L.Dense(D), L.Tanh(), L.TiedDense(embedding)],
                       dtype=dtype, seed=seed)
    return model.build((T,))


def data(seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, V, (N, T)), rng.integers(0, V, (N, T))


def twins():
    torch.manual_seed(0)
    net = TorchLM().double()
    return from_torch(net, tied_lm()), net


def test_tied_model_trains_for_5_adam_steps_as_torch_does():
    model, net = twins()
    x, y = data()
    forward_terms, forward_scale = network_bounds(model, x)
    model.compile(optimizers.Adam(lr=0.01), "cross_entropy", metrics=())
    torch_opt = torch.optim.Adam(net.parameters(), lr=0.01)
    assert len(list(net.parameters())) == 4  # torch lists the tied table once too
    trajectory = Trajectory([p.detach().numpy() for p in net.parameters()])
    for step in range(STEPS):
        ours = model.train_step(x, y)["loss"]
        torch_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)).reshape(-1, V),
                                                 torch.from_numpy(y).reshape(-1))
        loss.backward()
        torch_opt.step()
        trajectory.step([p.detach().numpy() for p in net.parameters()])
        assert_close(ours, loss.item(), dtype=np.float64,
                     terms=forward_terms + step * STEP_TERMS,
                     scale=max(forward_scale, loss.item()), what=f"loss at step {step + 1}")
    assert len(model.optimizer.state["step"]) == 4  # one Adam state for the table
    params = model.named_parameters()
    theirs = net.state_dict()
    final = {"embedding_0.W": theirs["net.0.weight"], "dense_1.W": theirs["net.1.weight"].T,
             "dense_1.b": theirs["net.1.bias"], "tied_dense_3.b": theirs["net.3.bias"]}
    assert sorted(params) == sorted(final)
    for key, expected in final.items():
        assert_close(params[key], expected.numpy(), dtype=np.float64,
                     terms=STEPS * STEP_TERMS, scale=trajectory.scale, what=key)


def test_the_table_gradient_sums_both_uses():
    model, net = twins()
    x, _ = data(2)
    dy = np.random.default_rng(3).standard_normal((N, T, V))
    model.zero_grad()
    model.forward(x)
    model.backward(dy)
    net(torch.from_numpy(x)).backward(torch.from_numpy(dy))
    grads = model.named_gradients()
    assert sorted(grads) == ["dense_1.W", "dense_1.b", "embedding_0.W", "tied_dense_3.b"]
    table = net.net[0].weight.grad.numpy()
    # head: sum_nt dy h (|h| <= 1); lookup: sum_nt (dy E)(1 - h^2) W^T, D terms each
    size_e, size_w = np.abs(model[0].parameters["W"]).max(), np.abs(model[1].parameters["W"])
    scale = float(np.abs(dy).sum(axis=(0, 1)).max()) * (1.0 + D * D * size_e * size_w.max())
    assert_close(grads["embedding_0.W"], table, dtype=np.float64, terms=2 * N * T * D,
                 scale=scale, what="dE")
    head_only = np.einsum("ntv,ntd->vd", dy, np.tanh(model.layers[1].forward(
        model.layers[0].forward(x, training=False), training=False)))
    assert not np.allclose(grads["embedding_0.W"], head_only)  # the lookup's part is in


def test_a_frozen_embedding_gets_no_gradient_from_the_head():
    model = tied_lm()
    model[0].trainable = False
    x, _ = data()
    model.zero_grad()
    model.forward(x)
    model.backward(np.ones((N, T, V)))
    assert not np.any(model[0].gradients["W"]) and np.any(model[3].gradients["b"])


def test_save_and_load_keep_the_tie(tmp_path):
    model = tied_lm()
    model.compile("adam", "cross_entropy", metrics=())
    x, y = data()
    model.train_step(x, y)
    save(model, tmp_path / "lm.hg")
    loaded = load(tmp_path / "lm.hg")
    assert loaded[3].embedding is loaded[0]
    assert sorted(loaded.named_parameters()) == sorted(model.named_parameters())
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    for net in (model, loaded):
        net.train_step(x, y)
    np.testing.assert_array_equal(loaded[0].parameters["W"], model[0].parameters["W"])


def test_graph_model_config_keeps_the_tie():
    ids = Input((T,), dtype="int64")
    embedding = L.Embedding(V, D, name="tokens")
    logits = L.TiedDense(embedding, name="head")(L.Tanh()(embedding(ids)))
    model = Model(ids, logits, dtype="float64", seed=0)
    twin = Model.from_config(model.get_config())
    assert twin.get_layer("head").embedding is twin.get_layer("tokens")
    assert sorted(twin.named_parameters()) == ["head.b", "tokens.W"]


def test_to_torch_state_dict_loads_into_the_tied_torch_model():
    model = tied_lm()
    state = to_torch_state_dict(model)
    assert sorted(state) == ["0.weight", "1.bias", "1.weight", "3.bias", "3.weight"]
    np.testing.assert_array_equal(state["3.weight"].numpy(), state["0.weight"].numpy())
    net = TorchLM().double()
    net.net.load_state_dict(state)
    x, _ = data()
    np.testing.assert_allclose(net(torch.from_numpy(x)).detach().numpy(), model.predict(x),
                               rtol=0, atol=1e-12)


def test_from_torch_refuses_an_untied_torch_model_and_accepts_the_table_once():
    torch.manual_seed(0)
    net = TorchLM().double()
    untied = {k: v.clone() for k, v in net.net.state_dict().items()}
    untied["3.weight"] += 1.0
    with pytest.raises(ValueError, match=r"mismatched shapes \['3.weight: differs from "
                                         r"0.weight, which it is tied to .*not tied"):
        from_torch(untied, tied_lm())
    once = {k: v for k, v in net.net.state_dict().items() if k != "3.weight"}
    model = from_torch(once, tied_lm())
    np.testing.assert_array_equal(model[0].parameters["W"], net.net[0].weight.detach().numpy())


def test_onnx_export_shares_the_table():
    ref = pytest.importorskip("onnx.reference")
    model = tied_lm()
    proto = export_onnx(model, None)
    tables = [t for t in proto.graph.initializer if tuple(t.dims) == (V, D)]
    assert len(tables) == 1  # Gather and the tied MatMul read one initializer
    x, _ = data()
    got = ref.ReferenceEvaluator(proto).run(None, {"input": x.astype(np.int64)})[0]
    np.testing.assert_allclose(got, model.predict(x), rtol=0, atol=1e-12)


def test_bad_ties_are_refused():
    with pytest.raises(TypeError, match=r"TiedDense: 'embedding' must be an Embedding layer "
                                        r"\(or its name\); received 3"):
        L.TiedDense(3)
    with pytest.raises(TypeError, match=r"TiedDense: 'use_bias' must be a bool"):
        L.TiedDense(L.Embedding(3, 2), use_bias=1)
    embedding = L.Embedding(V, D)
    with pytest.raises(ValueError, match=r"TiedDense 'tied_dense_2': expects inputs \(N, ..., "
                                         r"6\) \(the embedding_dim of the tied Embedding "
                                         r"'embedding_0'\); received per-example shape \(5, 4\)"):
        Sequential([embedding, L.Dense(4), L.TiedDense(embedding)]).build((5,))
    with pytest.raises(ValueError, match=r"its Embedding has no name"):
        L.TiedDense(L.Embedding(V, D)).get_config()
    with pytest.raises(ValueError, match=r"its Embedding 'nowhere' is not linked"):
        Sequential([L.Embedding(V, D), L.TiedDense("nowhere")]).build((T,))
