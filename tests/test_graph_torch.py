"""A graph ``Model`` against the equivalent ``torch.nn.Module``: two inputs, two outputs,
a shared layer, fan-out, Add/Multiply/Concatenate, cross-attention and a nested model
called twice. handgrad's weights are copied into torch; the outputs, both input
gradients and every parameter gradient are compared (float64 and float32, with and
without a gradient from the second output), within tolerances measured on the case in
float64 (the componentwise condition of every result, as for single layers)."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L

from tolerances import assert_outputs_close, condition_bounds
from tolerances_composite import LAYER_ROUNDINGS

torch = pytest.importorskip("torch")
nn = torch.nn
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}


def graph(dtype):
    seq, ctx = hg.Input((6, 4), name="seq"), hg.Input((5, 4), name="ctx")
    u = hg.Input((4,), name="u")
    proj = hg.Model(u, L.Dense(4, name="out")(L.Tanh(name="act")(L.Dense(4, name="hid")(u))),
                    name="proj", dtype=dtype, seed=1)
    shared = L.Dense(4, name="shared")
    h = L.ReLU(name="relu")(L.Conv1D(4, 3, padding="same", name="conv")(seq))
    hs, cs = shared(h), shared(ctx)
    attended = L.MultiHeadAttention(4, 2, name="att")([hs, cs])
    gated = L.Multiply(name="gate")([L.Add(name="add")([attended, h]),
                                     L.Sigmoid(name="sig")(hs)])
    pooled = L.GlobalAvgPool1D(name="pool")(gated)
    both = L.Concatenate(name="cat")([proj(pooled), proj(L.GlobalAvgPool1D(name="cpool")(cs))])
    return hg.Model([seq, ctx], [L.Dense(3, name="logits")(both),
                                 L.Dense(1, name="score")(pooled)], dtype=dtype, seed=0)


class Twin(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3, padding=1)
        self.shared = nn.Linear(4, 4)
        self.att = nn.MultiheadAttention(4, 2, batch_first=True)
        self.hid, self.out = nn.Linear(4, 4), nn.Linear(4, 4)
        self.logits, self.score = nn.Linear(8, 3), nn.Linear(4, 1)

    def proj(self, u):
        return self.out(torch.tanh(self.hid(u)))

    def forward(self, seq, ctx):
        h = torch.relu(self.conv(seq.transpose(1, 2)).transpose(1, 2))
        hs, cs = self.shared(h), self.shared(ctx)
        attended = self.att(hs, cs, cs, need_weights=False)[0]
        pooled = ((attended + h) * torch.sigmoid(hs)).mean(dim=1)
        both = torch.cat([self.proj(pooled), self.proj(cs.mean(dim=1))], dim=-1)
        return self.logits(both), self.score(pooled)


# handgrad parameter -> torch parameter; "T" transposes a matrix, "conv" maps (K, C_in,
# C_out) to (C_out, C_in, K); both are their own inverses, so they map gradients back.
PARAMETERS = {"conv.W": ("conv.weight", "conv"), "conv.b": ("conv.bias", None),
              "att.W_in": ("att.in_proj_weight", "T"), "att.b_in": ("att.in_proj_bias", None),
              "att.W_out": ("att.out_proj.weight", "T"),
              "att.b_out": ("att.out_proj.bias", None)}
for _name in ("shared", "logits", "score", "proj.hid", "proj.out"):
    _torch = _name.removeprefix("proj.")
    PARAMETERS[f"{_name}.W"] = (f"{_torch}.weight", "T")
    PARAMETERS[f"{_name}.b"] = (f"{_torch}.bias", None)


def relayout(array, how):
    return {"T": lambda a: a.T, "conv": lambda a: a.transpose(2, 1, 0), None: lambda a: a}[
        how](array)


def run_ours(model, xs, dys):
    model.zero_grad()
    ys = model.forward(xs)
    dxs = model.backward(dys)
    return {"y0": ys[0], "y1": ys[1], "dseq": dxs[0], "dctx": dxs[1],
            **{k: g.copy() for k, g in model.named_gradients().items()}}


def run_torch(model, xs, dys, dtype):
    twin = Twin().to(TORCH_DTYPE[dtype])
    params = dict(twin.named_parameters())
    assert sorted(params) == sorted(name for name, _ in PARAMETERS.values())
    with torch.no_grad():
        for key, value in model.named_parameters().items():
            name, how = PARAMETERS[key]
            params[name].copy_(torch.tensor(np.ascontiguousarray(relayout(value, how))))
    seq, ctx = (torch.tensor(x, requires_grad=True) for x in xs)
    ys = twin(seq, ctx)
    torch.autograd.backward([y for y, dy in zip(ys, dys) if dy is not None],
                            [torch.tensor(dy) for dy in dys if dy is not None])
    result = {"y0": ys[0].detach().numpy(), "y1": ys[1].detach().numpy(),
              "dseq": seq.grad.numpy(), "dctx": ctx.grad.numpy()}
    for key, (name, how) in PARAMETERS.items():
        grad = params[name].grad
        grad = np.zeros(params[name].shape, dtype) if grad is None else grad.numpy()
        result[key] = relayout(grad, how)  # none: the output it feeds got no gradient
    return result


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("outputs", ["both", "logits only"])
def test_graph_matches_its_torch_twin(dtype, outputs):
    rng = np.random.default_rng(0)
    model = graph(dtype)
    assert sorted(model.named_parameters()) == sorted(PARAMETERS)
    xs = [rng.standard_normal((2, 6, 4)).astype(dtype), rng.standard_normal((2, 5, 4))
          .astype(dtype)]
    dys = [rng.standard_normal((2, 3)).astype(dtype), rng.standard_normal((2, 1)).astype(dtype)]
    if outputs == "logits only":
        dys[1] = None
    ours = run_ours(model, xs, dys)
    theirs = run_torch(model, xs, dys, dtype)
    assert all(value.dtype == dtype for value in ours.values())

    reference = graph(np.float64)  # the same case in float64: its condition, measured
    for key, value in reference.named_parameters().items():
        value[...] = model.named_parameters()[key]
    wide = [x.astype(np.float64) for x in xs]
    wide_dys = [None if dy is None else dy.astype(np.float64) for dy in dys]
    bounds = condition_bounds(lambda: run_ours(reference, wide, wide_dys), [
        *wide, *(dy for dy in wide_dys if dy is not None),
        *reference.named_parameters().values()])
    roundings = LAYER_ROUNDINGS * len(model.nodes)  # each call rounds on the way
    bounds = {k: (terms + roundings, scale) for k, (terms, scale) in bounds.items()}
    assert_outputs_close(ours, theirs, bounds, dtype)
    if outputs == "logits only":
        assert not ours["score.W"].any() and not theirs["score.W"].any()
