"""Recurrent layers: multi-layer, optionally bidirectional RNN, LSTM and GRU, the twins
of ``torch.nn.RNN``/``LSTM``/``GRU`` with ``batch_first=True``.

Parameters per layer ``l`` and direction, named as torch's (``_reverse`` for the
backward direction): ``W_ih_l{l}`` (F_l, G*H), ``W_hh_l{l}`` (H, G*H), ``b_ih_l{l}``,
``b_hh_l{l}`` (G*H,), with F_0 = F and F_l = D*H above (D = 2 when bidirectional).
From torch: ``W_ih_l0 = weight_ih_l0.T``, ``W_hh_l0 = weight_hh_l0.T``, biases as they
are. Every parameter starts as torch's U(-1/sqrt(H), 1/sqrt(H)).

States use torch's layout (num_layers * D, N, H), index ``l * D + d``. A bidirectional
layer concatenates [forward, backward] outputs on the feature axis. With ``lengths``
the padded positions output 0 and the final states are taken at each sequence's end,
as torch's ``pack_padded_sequence`` gives.

Use: ``forward(x, training=True, initial_state=None, lengths=None)`` returns the output
sequence (N, T, D*H), or with ``return_sequences=False`` the last valid output
(N, D*H): the top layer's final states [forward, backward] (the forward direction's
output at t = length - 1, the backward one's at t = 0), i.e. torch's h_n
concatenation. The final states are kept in ``final_state`` (an LSTM's is a pair
(h_n, c_n)); :meth:`~Recurrent.forward_with_state` returns them with the output.
``backward(dy, d_final_state=None)`` returns dL/dx; :meth:`~Recurrent.backward_with_state`
also returns the gradient of the initial state. Graph calls on ``[x, h0(, c0)]`` and
``return_state=True`` (outputs ``[y, h_n(, c_n)]``, states batch first (N, L*D, H)):
see :mod:`.recurrent_state`. ``dropout``: as torch's, in training
each layer's output sequence but the last layer's goes through ``ops.dropout`` with
that probability (identity in evaluation); the masks come from the layer's Generator
``rng`` (``Layer.draws_random``) and, in data-parallel training, are drawn for the
global batch (``needs_communicator``, as ``Dropout``). ``input_dropout``/
``recurrent_dropout``: Keras's ``dropout``/``recurrent_dropout`` (variational masks on
each step's inputs and on the state feeding the gates): see :mod:`.recurrent_dropout`,
which says why ``dropout`` keeps torch's meaning. ``LSTM(proj_size=P)``: torch's
projected LSTM (``ops.lstm_projected``, h = (o tanh(c)) W_hr with ``W_hr_l{l}`` (H, P)):
W_hh is (P, 4H), outputs and h states have P features, c states H.
"""

from __future__ import annotations

from .. import initializers, ops
from .._checks import array_module, choice, float_array, positive_int, upstream_grad
from .._hyper import flag
from ..ops import RECURRENT_GATES, check_lengths
from . import declarations as twins
from . import onnx_recurrent
from . import recurrent_dropout as variational
from .base import Layer
from .caching import keeps_cache
from .recurrent_state import StateCalls, check_proj_size
from .registry import register

_OPS = {"rnn": (ops.rnn, ops.rnn_backward), "lstm": (ops.lstm, ops.lstm_backward),
        "gru": (ops.gru, ops.gru_backward),
        "lstm_projected": (ops.lstm_projected, ops.lstm_projected_backward)}


class Recurrent(StateCalls, Layer):
    """Shared machinery; subclasses set ``cell``. See the module docstring."""

    onnx_form = onnx_recurrent.recurrent
    onnx_graph_form = onnx_recurrent.recurrent_graph
    receptive_field = "whole"

    cell = ""
    check_keras_call = staticmethod(variational.check_keras_call)

    def __init__(self, hidden_size, num_layers=1, *, bidirectional=False, bias=True,
                 return_sequences=True, return_state=False, nonlinearity="tanh", dropout=0.0,
                 input_dropout=0.0, recurrent_dropout=0.0, proj_size=0, name=None,
                 trainable=True, dtype=None, seed=None):
        owner = type(self).__name__
        hidden_size = positive_int(owner, "hidden_size", hidden_size)
        num_layers = positive_int(owner, "num_layers", num_layers)
        proj_size = check_proj_size(owner, proj_size, hidden_size, self.cell)
        rates = variational.dropout_rates(owner, dropout, input_dropout,
                                                recurrent_dropout, num_layers, proj_size)
        self.dropout, self.input_dropout = rates["dropout"], rates["input_dropout"]
        self.recurrent_dropout = rates["recurrent_dropout"]
        # only a layer with dropout draws random numbers or needs the global batch
        self.draws_random = self.needs_communicator = any(v > 0 for v in rates.values())
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        self.hidden_size, self.proj_size, self.num_layers = hidden_size, proj_size, num_layers
        self.bidirectional = flag(owner, "bidirectional", bidirectional)
        self.use_bias = flag(owner, "bias", bias)
        self.return_sequences = flag(owner, "return_sequences", return_sequences)
        self.return_state = flag(owner, "return_state", return_state)
        self.nonlinearity = choice(owner, "nonlinearity", nonlinearity, ("tanh", "relu"))
        self.final_state = None

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def out_size(self) -> int:
        """The features of each direction's output and h state: P with a projection, else H."""
        return self.proj_size or self.hidden_size

    @property
    def n_states(self) -> int:
        return 2 if self.cell == "lstm" else 1

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "num_layers": self.num_layers, "bidirectional": self.bidirectional,
                "bias": self.use_bias, "return_sequences": self.return_sequences,
                "return_state": self.return_state, "dropout": self.dropout,
                **({"proj_size": self.proj_size} if self.proj_size else {}),
                **{k: getattr(self, k) for k in variational.OPTIONS if getattr(self, k)}}

    def parameter_suffix(self, layer, direction):
        """The suffix of the parameter names of stacked layer ``layer`` and ``direction``
        (0 forward, 1 reverse), as in torch: ``"_l0"``, ``"_l1_reverse"``."""
        return f"_l{layer}" + ("_reverse" if direction else "")

    # ------------------------------------------------------------------ build
    def _build(self, input_shape, rng):
        if len(input_shape) != 2:
            raise ValueError(f"{self.label}: expects sequences (N, T, F); received per-example "
                             f"shape {tuple(input_shape)}")
        hidden, width = self.hidden_size, RECURRENT_GATES[self.cell] * self.hidden_size
        init = initializers.torch_default_bias(hidden)  # U(-1/sqrt(H), 1/sqrt(H))
        for layer in range(self.num_layers):
            features = input_shape[-1] if layer == 0 else self.directions * self.out_size
            for direction in range(self.directions):
                s = self.parameter_suffix(layer, direction)
                self.add_parameter(f"W_ih{s}", (features, width), init, rng)
                self.add_parameter(f"W_hh{s}", (self.out_size, width), init, rng)
                if self.use_bias:
                    self.add_parameter(f"b_ih{s}", (width,), init, rng)
                    self.add_parameter(f"b_hh{s}", (width,), init, rng)
                if self.proj_size:  # after the biases, as torch's weight_hr
                    self.add_parameter(f"W_hr{s}", (hidden, self.proj_size), init, rng)

    # ----------------------------------------------------------------- states
    def _states(self, name, value, batch, dtype):
        """An initial state or a final-state gradient as a list of n_states arrays (or
        None) of shape (num_layers * D, N, H)."""
        rows = self.num_layers * self.directions
        shapes = [(rows, batch, self.out_size), (rows, batch, self.hidden_size)]
        layouts = ["(num_layers * D, N, P)" if self.proj_size else "(num_layers * D, N, H)",
                   "(num_layers * D, N, H)"]
        return check_states(self.label, name, value, self.n_states, shapes[:self.n_states],
                            layouts[:self.n_states], dtype)

    @property
    def _op(self):
        return "lstm_projected" if self.proj_size else self.cell

    @property
    def _weight_keys(self):
        """The weights of one layer and direction, in the kernel's argument order."""
        return ("W_ih", "W_hh", *(("W_hr",) if self.proj_size else ()), "b_ih", "b_hh")

    def _pack(self, values):
        return tuple(values) if self.n_states == 2 else values[0]

    # ------------------------------------------------------- forward/backward
    def forward_with_state(self, x, training=True, initial_state=None, lengths=None,
                           grad=None):
        """``(y, h_n)`` (LSTM: ``(y, h_n, c_n)``), states (num_layers * D, N, H)."""
        grad = keeps_cache(self.label, training, grad)
        x = float_array(self.label, "x", x, 3, "(N, T, F)")
        self.ensure_built(x.shape[1:])
        self.check_dtype(x)
        y, finals, cache = self._run(x, initial_state, lengths, training)
        if grad:
            self._caches.append(cache)
        self.final_state = self._pack(finals)
        return (y, *finals)

    def _forward(self, x, training):
        y, _, cache = self._run(x, None, None, training)
        return y, cache

    def _drop(self, inputs, training):
        """``ops.dropout`` between stacked layers: ``(y, cache)`` (identity without
        dropout or outside training)."""
        if not (training and self.dropout > 0):
            return inputs, None
        rows = None if self.communicator is None else self.communicator.rows
        return ops.dropout(inputs, self.dropout, self.rng, training=True, rows=rows)

    def _run(self, x, initial_state, lengths, training):
        batch, steps, features = x.shape
        if features != self.input_shape[-1]:
            raise ValueError(f"{self.label}: 'x' must have F = {self.input_shape[-1]} features "
                             f"(N, T, F), as when the layer was built; received shape "
                             f"{tuple(x.shape)}")
        initial = self._states("initial_state", initial_state, batch, x.dtype)
        lengths = check_lengths(self.label, lengths, batch, steps)
        forward_op = _OPS[self._op][0]
        extra = {"nonlinearity": self.nonlinearity} if self.cell == "rnn" else {}
        p, caches, finals = self.parameters, [], [[] for _ in initial]
        inputs, drops = x, []
        for layer in range(self.num_layers):
            if layer:
                inputs, drop = self._drop(inputs, training)
                drops.append(drop)
            outputs = []
            for direction in range(self.directions):
                s = self.parameter_suffix(layer, direction)
                index = layer * self.directions + direction
                states = [None if s0 is None else s0[index] for s0 in initial]
                masks = variational.draw_masks(self, inputs, self.out_size, training)
                y, *last, cache = forward_op(
                    inputs, *[p.get(f"{key}{s}") for key in self._weight_keys], *states,
                    lengths=lengths, reverse=bool(direction), **extra, **masks)
                outputs.append(y)
                caches.append(cache)
                for stack, value in zip(finals, last):
                    stack.append(value)
            inputs = outputs[0] if len(outputs) == 1 else _concat(outputs)
        xp = array_module(x)
        finals = [xp.stack(stack) for stack in finals]
        out = inputs if self.return_sequences else _concat(list(finals[0][-self.directions:]))
        given = [s0 is not None for s0 in initial]
        return out, finals, (caches, drops, out.shape, given)

    def backward_with_state(self, dy, d_final_state=None):
        """``(dx, d_initial_state)``; d_initial_state mirrors the forward's
        ``initial_state`` (None where none was given)."""
        return Layer.backward(self, (dy, d_final_state))

    def _backward(self, dy_and_state, cache):
        dy, d_final = dy_and_state
        caches, drops, out_shape, given = cache
        dtype, batch, hidden, D = self.dtype, out_shape[0], self.out_size, self.directions
        dy = upstream_grad(self.label, dy, out_shape, dtype)
        d_final = self._states("d_final_state", d_final, batch, dtype)
        if not self.return_sequences:  # the output is h_n of the top layer's directions
            top = [dy[:, d * hidden:(d + 1) * hidden] for d in range(D)]
            d_h = d_final[0]
            d_h = array_module(dy).zeros((self.num_layers * D, batch, hidden), dtype) \
                if d_h is None else d_h.copy()
            for d in range(D):
                d_h[-D + d] += top[d]
            d_final[0], dy = d_h, None
        backward_op, keys = _OPS[self._op][1], self._weight_keys
        grads, d_initial = {}, [[None] * (self.num_layers * D) for _ in given]
        for layer in reversed(range(self.num_layers)):
            d_inputs = None
            for direction in range(D):
                s, index = self.parameter_suffix(layer, direction), layer * D + direction
                dy_part = None if dy is None else dy[..., direction * hidden:(direction + 1)
                                                       * hidden]
                d_last = [None if g is None else g[index] for g in d_final]
                dx, *rest = backward_op(dy_part, caches[index], *d_last)
                for store, value in zip(d_initial, rest[:-len(keys)]):
                    store[index] = value
                grads.update((f"{key}{s}", g) for key, g in zip(keys, rest[-len(keys):])
                             if g is not None)
                d_inputs = dx if d_inputs is None else d_inputs + dx
            dy = d_inputs if not layer or drops[layer - 1] is None \
                else ops.dropout_backward(d_inputs, drops[layer - 1])
        xp = array_module(dy)
        d_initial = [xp.stack(store) if used else None for store, used in zip(d_initial, given)]
        return (dy, self._pack(d_initial) if any(given) else None), grads


def _concat(arrays):
    return array_module(arrays[0]).concatenate(arrays, axis=-1)


def check_states(owner, name, value, n_states, shape, layout, dtype):
    """A recurrent state (or its gradient) as a list of ``n_states`` arrays of ``shape``
    and ``dtype``, or None entries: ``value`` is one array (RNN, GRU) or a pair (h, c)
    (LSTM), either part of which may be None. ``shape``/``layout`` may be lists, one
    per state (a projected LSTM's h and c differ)."""
    shapes = shape if isinstance(shape, list) else [shape] * n_states
    layouts = layout if isinstance(layout, list) else [layout] * n_states
    if n_states == 2:
        if value is None:
            return [None, None]
        if not (isinstance(value, (tuple, list)) and len(value) == 2):
            raise TypeError(f"{owner}: '{name}' must be a pair (h, c) of arrays h {shapes[0]} "
                            f"and c {shapes[1]} (either may be None); received "
                            f"{type(value).__name__}")
        values = list(value)
    else:
        values = [value]
    for i, (v, shape, layout) in enumerate(zip(values, shapes, layouts)):
        if v is None:
            continue
        v = float_array(owner, name, v, len(shape), layout)
        if tuple(v.shape) != shape:
            raise ValueError(f"{owner}: '{name}' must have shape {layout} = {shape}; "
                             f"received shape {tuple(v.shape)}")
        if v.dtype != dtype:
            raise TypeError(f"{owner}: '{name}' must have dtype {dtype}; received {v.dtype}")
        values[i] = v
    return values


@register
class RNN(Recurrent):
    """Elman RNN, h_t = tanh or relu(x_t W_ih + b_ih + h_{t-1} W_hh + b_hh), the twin of
    ``torch.nn.RNN(batch_first=True)``. See the module docstring."""

    torch_twin = twins.TorchTwin("RNN", twins.recurrent_params, twins.RESET)

    cell = "rnn"

    def __init__(self, hidden_size, num_layers=1, nonlinearity="tanh", bidirectional=False,
                 bias=True, return_sequences=True, **kwargs):
        super().__init__(hidden_size, num_layers, bidirectional=bidirectional, bias=bias,
                         return_sequences=return_sequences, nonlinearity=nonlinearity,
                         **kwargs)

    def get_config(self):
        return {**super().get_config(), "nonlinearity": self.nonlinearity}


class GatedRecurrent(Recurrent):
    """LSTM and GRU: the recurrent layer with ``bidirectional`` and ``bias`` also
    positional (no ``nonlinearity``)."""

    def __init__(self, hidden_size, num_layers=1, bidirectional=False, bias=True,
                 return_sequences=True, **kwargs):
        super().__init__(hidden_size, num_layers, bidirectional=bidirectional, bias=bias,
                         return_sequences=return_sequences, **kwargs)


@register
class LSTM(GatedRecurrent):
    """LSTM (gates i, f, g, o), the twin of ``torch.nn.LSTM(batch_first=True)``; states
    are pairs (h, c). See the module docstring."""

    torch_twin = twins.TorchTwin("LSTM", twins.recurrent_params, twins.RESET)

    cell = "lstm"


@register
class GRU(GatedRecurrent):
    """GRU (gates r, z, n, n = tanh(x W_in + b_in + r (h W_hn + b_hn))), the twin of
    ``torch.nn.GRU(batch_first=True)``. See the module docstring."""

    torch_twin = twins.TorchTwin("GRU", twins.recurrent_params, twins.RESET)

    cell = "gru"


@register
class BiLSTM(LSTM):
    """A bidirectional LSTM block: ``LSTM(hidden_size, bidirectional=True)``, output
    (N, T, 2H) (or (N, 2H) with ``return_sequences=False``)."""

    def __init__(self, hidden_size, num_layers=1, bias=True, return_sequences=True, **kwargs):
        super().__init__(hidden_size, num_layers, bidirectional=True, bias=bias,
                         return_sequences=return_sequences, **kwargs)

    def get_config(self):
        config = super().get_config()
        del config["bidirectional"]
        return config
