"""Adapters of the recurrent module rows: RNN, GRU, LSTM (one layer, one direction) and
their cells (a sequence of one step), through ``ops.rnn`` / ``gru`` / ``lstm``: torch's
(gates * H, F) weights are handgrad's (F, gates * H); the output sequence (a cell: the
new hidden state) and every input, state and weight gradient are compared."""

from __future__ import annotations

import numpy as np
import torch

from handgrad import ops

from .core import Plan
from .helpers import Unsupported

WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _kind(m):
    name = type(m).__name__.replace("Cell", "").lower()
    return name, name.endswith("lstm")


def _layout(m):
    """(layers, directions, parameter name suffixes in torch's order)."""
    if type(m).__name__.endswith("Cell"):
        return 1, 1, [""]
    dirs = 2 if m.bidirectional else 1
    return m.num_layers, dirs, [f"_l{k}" + ("_reverse" if d else "")
                                for k in range(m.num_layers) for d in range(dirs)]


def recurrent(info, module_input, training):
    ci, fi = module_input.constructor_input, module_input.forward_input
    m = info.module_cls(*ci.args, **ci.kwargs)
    if getattr(m, "proj_size", 0):
        raise Unsupported("proj_size")
    if fi.kwargs:
        raise Unsupported("forward keywords")
    if training and getattr(m, "dropout", 0) and m.num_layers > 1:
        raise Unsupported("random mask")
    x = fi.args[0]
    m = m.to(x.dtype).train(training)
    names = [w + sfx for sfx in _layout(m)[2] for w in WEIGHTS
             if getattr(m, w + sfx, None) is not None]
    hx = fi.args[1] if len(fi.args) > 1 else None
    states = list(hx) if isinstance(hx, tuple) else ([] if hx is None else [hx])
    leaves = [x, *states, *[getattr(m, n) for n in names]]

    def torch_fn(*new):
        xs, rest = new[0], list(new[1:])
        given = [rest.pop(0) for _ in states]
        state = tuple(given) if len(given) == 2 else (given[0] if given else None)
        out = torch.func.functional_call(m, dict(zip(names, rest)), (xs, state))
        return out[0] if isinstance(out, tuple) else out

    return Plan(leaves, torch_fn, lambda *arrays: _run(m, names, len(states), arrays))


def _run(m, names, n_states, arrays):
    kind, lstm = _kind(m)
    layers, dirs, suffixes = _layout(m)
    cell = suffixes == [""]
    x, states, w = arrays[0], list(arrays[1:1 + n_states]), dict(zip(names,
                                                                      arrays[1 + n_states:]))
    unbatched = x.ndim == (1 if cell else 2)
    xb = x[None] if unbatched else x
    if cell:  # (N, F) -> one step; states (N, H) -> one layer
        xs, sts = xb[:, None, :], [(s[None] if unbatched else s)[None] for s in states]
    else:  # (T, N, F) or (N, T, F); states (L*D, N, H) or unbatched (L*D, H)
        xs = x[None] if unbatched else (x if m.batch_first else x.transpose(1, 0, 2))
        sts = [s[:, None] if unbatched else s for s in states]
    keywords = {"nonlinearity": m.nonlinearity} if kind == "rnn" else {}
    caches, inp = [], xs
    for k in range(layers):
        outs = []
        for d in range(dirs):
            sfx = suffixes[k * dirs + d]
            hs = [s[k * dirs + d] for s in sts]
            out = getattr(ops, kind)(inp, w["weight_ih" + sfx].T, w["weight_hh" + sfx].T,
                                     w.get("bias_ih" + sfx), w.get("bias_hh" + sfx), *hs,
                                     reverse=bool(d), **keywords)
            outs.append(out[0])
            caches.append(out[-1])
        inp = np.concatenate(outs, axis=-1)

    def to_torch(a):  # handgrad's (N, T, X) -> torch's layout of the output / input
        if cell:
            a = a[:, 0]
        elif not m.batch_first and not unbatched:
            a = a.transpose(1, 0, 2)
        return a[0] if unbatched else a

    def backward(dy):
        dyh = (dy[None] if unbatched else dy)[:, None, :] if cell else \
            (dy[None] if unbatched else (dy if m.batch_first else dy.transpose(1, 0, 2)))
        dstate = [[None] * (layers * dirs) for _ in range(n_states)]
        dw = {}
        for k in reversed(range(layers)):
            chunks = np.split(dyh, dirs, axis=-1)
            dx = 0
            for d in range(dirs):
                i = k * dirs + d
                g = getattr(ops, kind + "_backward")(chunks[d], caches[i])
                dx = dx + g[0]
                for j in range(n_states):
                    dstate[j][i] = g[1 + j]
                rest = g[3 if lstm else 2:]
                dw.update(zip([n + suffixes[i] for n in WEIGHTS], rest))
            dyh = dx
        ds = [np.stack(d) for d in dstate]
        ds = [(d[0][0] if unbatched else d[0]) if cell else (d[:, 0] if unbatched else d)
              for d in ds]
        return [to_torch(dyh), *ds,
                *[dw[n].T if n.startswith("weight") else dw[n] for n in names]]

    return to_torch(inp), backward, {}


MODULES = {name: recurrent for name in ("RNN", "GRU", "LSTM", "RNNCell", "GRUCell",
                                        "LSTMCell")}
