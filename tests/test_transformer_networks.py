"""Two transformer networks ported from torch as plain handgrad graph models (no custom
layer), weights imported by name: a Transformer encoder classifier and a small GPT with
tied input/output weights and causal attention. Logits, loss and the gradient of every
parameter match torch in float32 and float64, within the case's condition measured on
the float64 model."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import handgrad.layers as L
from handgrad import Input, Model, losses
from handgrad.io import from_torch, to_torch_state_dict
from handgrad.testing import assert_close

from tolerances import condition_bounds

torch = pytest.importorskip("torch")
nn = torch.nn

V, E, H, FF, T, N, C = 7, 4, 2, 6, 5, 3, 3


class TorchClassifier(nn.Module):
    """Embedding + learned positions -> TransformerEncoder -> mean over time -> Linear."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, E), nn.Embedding(T, E)
        layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(E, C)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.head(self.encoder(x).mean(dim=1))


class TorchGPT(nn.Module):
    """Token + position embeddings -> pre-norm causal blocks with a final LayerNorm ->
    the token table as the output projection (tied)."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, E), nn.Embedding(T, E)
        layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E),
                                            enable_nested_tensor=False)
        self.head = nn.Linear(E, V)
        self.head.weight = self.tok.weight

    def forward(self, ids):
        steps = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(steps))
        mask = nn.Transformer.generate_square_subsequent_mask(steps, dtype=x.dtype)
        return self.head(self.blocks(x, mask=mask, is_causal=True))


def classifier(dtype):
    ids, positions = Input((T,), dtype=np.int64), Input((T,), dtype=np.int64)
    x = L.Add()([L.Embedding(V, E, name="tok")(ids), L.Embedding(T, E, name="pos")(positions)])
    layer = L.TransformerEncoderLayer(E, H, FF, dropout=0.0)
    h = L.TransformerEncoder(layer, 2, name="encoder")(x)
    logits = L.Dense(C, name="head")(L.GlobalAvgPool1D()(h))
    return Model([ids, positions], logits, dtype=dtype, seed=0)


def gpt(dtype):
    ids, positions = Input((T,), dtype=np.int64), Input((T,), dtype=np.int64)
    tok = L.Embedding(V, E, name="tok")
    x = L.Add()([tok(ids), L.Embedding(T, E, name="pos")(positions)])
    layer = L.TransformerEncoderLayer(E, H, FF, dropout=0.0, activation="gelu",
                                      norm_first=True, causal=True)
    h = L.TransformerEncoder(layer, 2, norm=L.LayerNorm(E), name="blocks")(x)
    return Model([ids, positions], L.TiedDense(tok, name="head")(h), dtype=dtype, seed=0)


NETWORKS = {"classifier": (TorchClassifier, classifier, (N,), C),
            "gpt": (TorchGPT, gpt, (N, T), V)}


def case(name):
    rng = np.random.default_rng(11)
    _, _, label_shape, classes = NETWORKS[name]
    return rng.integers(0, V, (N, T)), rng.integers(0, classes, label_shape)


def twins(name, dtype):
    make_torch, make_ours, _, _ = NETWORKS[name]
    torch.manual_seed(1)
    net = make_torch().to(torch.float64 if dtype == np.float64 else torch.float32)
    with torch.no_grad():  # varied norms and biases, so that their gradients are checked
        for p in net.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn_like(p))
    model = make_ours(dtype)
    model.build([(T,), (T,)])
    return net, from_torch(net, model)


def run_ours(model, ids, labels):
    model.zero_grad()
    positions = np.broadcast_to(np.arange(T), ids.shape).copy()
    logits = model.forward([ids, positions], training=True)
    loss, dlogits = losses.softmax_cross_entropy(logits, labels)
    model.backward(dlogits)
    named = copy.deepcopy(model)  # the gradients under torch's names
    for key, value in named.named_parameters().items():
        value[...] = model.named_gradients()[key]
    return {"logits": logits, "loss": np.array(loss),
            **to_torch_state_dict(named, numpy=True)}


def run_torch(net, ids, labels):
    net.zero_grad()
    logits = net(torch.tensor(ids))
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       torch.tensor(labels).reshape(-1))
    loss.backward()
    return {"logits": logits.detach().numpy(), "loss": loss.detach().numpy(),
            **{key: p.grad.numpy() for key, p in net.named_parameters()}}


BOUNDS = {}


def bounds(name):
    """{result: (terms, scale)}: each result's condition on the float64 model with
    respect to every weight."""
    if name not in BOUNDS:
        _, model = twins(name, np.float64)
        ids, labels = case(name)
        BOUNDS[name] = condition_bounds(lambda: run_ours(model, ids, labels),
                                        list(model.named_parameters().values()))
    return BOUNDS[name]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_network_matches_torch(name, dtype):
    net, model = twins(name, dtype)
    ids, labels = case(name)
    expected, actual = run_torch(net, ids, labels), run_ours(model, ids, labels)
    assert set(expected) <= set(actual)  # every torch parameter (the tied one once)
    assert len(expected) == len(model.named_parameters()) + 2
    for key, (terms, scale) in bounds(name).items():
        if key in expected:
            assert_close(actual[key], expected[key], dtype=dtype, terms=terms, scale=scale,
                         what=key)


def test_the_gpt_is_causal():
    """Changing the last token changes no earlier logit, and does change the last."""
    _, model = twins("gpt", np.float64)
    ids, _ = case("gpt")
    positions = np.broadcast_to(np.arange(T), ids.shape).copy()
    other = ids.copy()
    other[:, -1] = (other[:, -1] + 1) % V
    a, b = (model.forward([i, positions], training=False) for i in (ids, other))
    assert np.array_equal(a[:, :-1], b[:, :-1]) and not np.allclose(a[:, -1], b[:, -1])
