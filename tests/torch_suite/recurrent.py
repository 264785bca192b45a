"""Adapters of the recurrent module rows: RNN, GRU, LSTM (stacked, bidirectional, an
LSTM's ``proj_size``) and their cells run through handgrad's layers (``RNN``/``GRU``/
``LSTM``, ``RNNCell``/``GRUCell``/``LSTMCell``) with the module's weights imported by
``from_torch`` (``layers.layer_plan``). torch's ``batch_first=False`` (T, N, F) is
transposed to the layer's (N, T, F), unbatched inputs and states get a batch axis of
one; the output sequence (a cell: the new hidden state) and every input, state and
parameter gradient (by torch name) are compared."""

from __future__ import annotations

import numpy as np

from handgrad import layers as hl

from .helpers import Unsupported
from .layers import layer_plan, load


def _pack(states):
    return tuple(states) if len(states) == 2 else (states[0] if states else None)


def _unpack(state):
    return list(state) if isinstance(state, tuple) else [state]


def _build(m, cell):
    kind = type(m).__name__.replace("Cell", "")
    keywords = {"nonlinearity": m.nonlinearity} if kind == "RNN" else {}
    if cell:
        return lambda dtype: getattr(hl, kind + "Cell")(m.hidden_size, m.bias, dtype=dtype,
                                                        **keywords)
    if getattr(m, "proj_size", 0):
        keywords["proj_size"] = m.proj_size
    return lambda dtype: getattr(hl, kind)(m.hidden_size, m.num_layers,
                                           bidirectional=m.bidirectional, bias=m.bias,
                                           dtype=dtype, **keywords)


def recurrent(info, module_input, training):
    ci, fi = module_input.constructor_input, module_input.forward_input
    m = info.module_cls(*ci.args, **ci.kwargs).train(training)
    if fi.kwargs:
        raise Unsupported("forward keywords")
    if training and getattr(m, "dropout", 0) and m.num_layers > 1:
        raise Unsupported("random mask")
    cell = type(m).__name__.endswith("Cell")
    x = fi.args[0]
    hx = fi.args[1] if len(fi.args) > 1 else None
    states = [] if hx is None else _unpack(hx)
    unbatched = x.dim() == (1 if cell else 2)
    batch_first = cell or m.batch_first

    def call(mod, xs, *given):
        out = mod(xs, _pack(given))
        return out[0] if isinstance(out, tuple) else out

    def to_layer(a):  # torch's x -> (N, T, F) (a cell: (N, F))
        if unbatched:
            return a[None]
        return a if batch_first else np.swapaxes(a, 0, 1)

    def from_layer(a):
        if unbatched:
            return a[0]
        return a if batch_first else np.swapaxes(a, 0, 1)

    def state_to_layer(s):  # cells (N, H); layers (L*D, N, H)
        return s if not unbatched else (s[None] if cell else s[:, None])

    def state_back(s):
        return s if not unbatched else (s[0] if cell else s[:, 0])

    def run(layer, state, xa, *sa):
        xs = to_layer(xa)
        load(layer, state, xs.shape[1:], xa.dtype)
        given = _pack([state_to_layer(s) for s in sa])
        if cell:
            y = layer.forward(xs, training=training, state=given, grad=True)
        else:
            y = layer.forward_with_state(xs, training=training, initial_state=given,
                                         grad=True)[0]

        def back(dy):
            dx, d_state = layer.backward_with_state(to_layer(dy))
            d_states = [] if d_state is None else _unpack(d_state)
            return [from_layer(dx), *[state_back(d) for d in d_states]]

        return from_layer(y), back

    state_axis = None if unbatched else (0 if cell else 1)
    axes = [None if unbatched else (0 if batch_first else 1)] + [state_axis] * len(states)
    return layer_plan(m, [x, *states], call, _build(m, cell), run, axes)


MODULES = {name: recurrent for name in ("RNN", "GRU", "LSTM", "RNNCell", "GRUCell",
                                        "LSTMCell")}
