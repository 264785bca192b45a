"""The ONNX forms of the recurrent layers and cells: one ONNX RNN/LSTM/GRU node per
stacked layer (both directions in one node), time major inside, torch's gate blocks
reordered to ONNX's (LSTM i, f, g, o -> i, o, f, c; GRU r, z, n -> z, r, h with
``linear_before_reset=1``, torch's GRU).

In a graph ``Model`` a layer called on ``[x, h0(, c0)]`` feeds the states (N, L*D, H),
rows ``k*D`` to ``(k+1)*D`` for stacked layer ``k``, as ONNX's ``initial_h``/``initial_c``
(D, N, H); with ``return_state`` the nodes' ``Y_h``/``Y_c`` joined over the layers are
the outputs h_n/c_n (N, L*D, H). A cell (``RNNCell``, ``LSTMCell``, ``GRUCell``) is the
same node on a length-1 sequence: x (N, F) -> (1, N, F), states (N, H) -> (1, N, H).
torch's LSTM ``proj_size`` has no ONNX counterpart and is refused by name.
"""

from __future__ import annotations

import numpy as np

_GATE_ORDER = {"rnn": [0], "lstm": [0, 3, 1, 2], "gru": [1, 0, 2]}  # torch -> ONNX blocks


def _gates(array, cell):
    """Reorder the gate blocks of the last axis from torch's order to ONNX's."""
    blocks = np.split(array, len(_GATE_ORDER[cell]), axis=-1)
    return np.concatenate([blocks[i] for i in _GATE_ORDER[cell]], axis=-1)


def _sequence(layer, g, x, states):
    """The ONNX nodes of ``layer`` on the time-major ``x`` (T, N, F) from ``states``
    (per stacked layer a list of (D, N, H) names or "" per state); returns the top
    layer's output (T, N, D*H) and, per stacked layer, its final states [Y_h(, Y_c)]."""
    if getattr(layer, "proj_size", 0):
        raise ValueError(f"export_onnx: {layer.label} has proj_size={layer.proj_size}, and "
                         f"ONNX's LSTM has no output projection (proj_size)")
    p, cell, hidden = layer.parameters, layer.cell, layer.hidden_size
    dirs, n_states = layer.directions, layer.n_states
    attrs = {"hidden_size": hidden, "direction": "bidirectional" if dirs == 2 else "forward"}
    if cell == "gru":
        attrs["linear_before_reset"] = 1
    if cell == "rnn":
        attrs["activations"] = ["Relu" if layer.nonlinearity == "relu" else "Tanh"] * dirs
    finals = []
    for k in range(layer.num_layers):
        s = [layer.parameter_suffix(k, d) for d in range(dirs)]
        w = np.stack([_gates(p[f"W_ih{sfx}"], cell).T for sfx in s])
        r = np.stack([_gates(p[f"W_hh{sfx}"], cell).T for sfx in s])
        inputs = [x, g.const(w, "W"), g.const(r, "R"), ""]
        if layer.use_bias:
            inputs[3] = g.const(np.stack([np.concatenate(
                [_gates(p[f"b_ih{sfx}"], cell), _gates(p[f"b_hh{sfx}"], cell)]) for sfx in s]),
                "B")
        inputs += ["", *states[k]]  # no sequence_lens; initial_h (, initial_c)
        while inputs[-1] == "":
            inputs.pop()
        y, *last = g.op(cell.upper(), inputs, cell, outputs=1 + 1 + (n_states == 2), **attrs)
        finals.append(last)
        y = g.op("Transpose", [y], "y", perm=[0, 2, 1, 3])  # (T, D, N, H) -> (T, N, D, H)
        x = g.op("Reshape", [y, g.ints([0, 0, dirs * hidden])], "y")  # (T, N, D*H)
    return x, finals


def _layer_states(layer, g, values):
    """The graph inputs h0 (, c0) (N, L*D, H) as per-layer lists of (D, N, H) names."""
    dirs = layer.directions
    states = [[] for _ in range(layer.num_layers)]
    for v in values:
        v = g.channels_last(v)
        rows = g.op("Transpose", [v.name], "state", perm=[1, 0, 2])  # (L*D, N, H)
        for k, store in enumerate(states):
            store.append(rows if layer.num_layers == 1 else g.op(
                "Slice", [rows, g.ints([k * dirs]), g.ints([(k + 1) * dirs]), g.ints([0])],
                "state"))
    return [store + [""] * (layer.n_states - len(store)) for store in states]


def _output(layer, g, x, finals):
    """The layer's output (N, T, D*H), or with ``return_sequences=False`` (N, D*H)."""
    if layer.return_sequences:
        return g.op("Transpose", [x], "batch_major", perm=[1, 0, 2])
    last = g.op("Transpose", [finals[-1][0]], "h_n", perm=[1, 0, 2])
    return g.op("Reshape", [last, g.ints([0, layer.directions * layer.hidden_size])], "h_n")


def recurrent(layer, g, v):
    """A recurrent layer on one input (its ``onnx_form``)."""
    return recurrent_graph(layer, g, [v], [tuple(layer.output_shape(v.shape))])[0]


def recurrent_graph(layer, g, values, out_shapes):
    """A recurrent layer in a graph on ``[x, h0(, c0)]``: ``[y(, h_n(, c_n))]``."""
    v = g.channels_last(values[0])
    x = g.op("Transpose", [v.name], "time_major", perm=[1, 0, 2])  # (T, N, F)
    states = _layer_states(layer, g, values[1:]) if values[1:] else \
        [[""] * layer.n_states for _ in range(layer.num_layers)]
    x, finals = _sequence(layer, g, x, states)
    outs = [_output(layer, g, x, finals)]
    if layer.return_state:
        for i in range(layer.n_states):
            parts = [last[i] for last in finals]
            rows = parts[0] if len(parts) == 1 else g.op("Concat", parts, "final", axis=0)
            outs.append(g.op("Transpose", [rows], "final", perm=[1, 0, 2]))  # (N, L*D, H)
    return [g.value(name, shape) for name, shape in zip(outs, out_shapes)]


def cell(layer, g, v):
    """A cell on ``x`` alone (its ``onnx_form``)."""
    return cell_graph(layer, g, [v], [tuple(layer.output_shape(v.shape))])[0]


def cell_graph(layer, g, values, out_shapes):
    """A cell in a graph on ``x``, ``[x, h]`` or ``[x, h, c]``: ``[h'(, c')]``."""
    axis = g.ints([0], "axes")
    x, *states = [g.op("Unsqueeze", [g.channels_last(v).name, axis], "step") for v in values]
    states += [""] * (layer.n_states - len(states))
    _, finals = _sequence(layer, g, x, [states])
    outs = [g.op("Squeeze", [name, axis], "next") for name in finals[0][:len(out_shapes)]]
    return [g.value(name, shape) for name, shape in zip(outs, out_shapes)]
