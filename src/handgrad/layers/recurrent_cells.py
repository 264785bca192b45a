"""Single-step recurrent cells, the twins of ``torch.nn.RNNCell``, ``LSTMCell`` and
``GRUCell``: one step of the recurrent layers' equations (see
:mod:`handgrad.ops.recurrent`), computed as a one-step sequence (T = 1) through
``ops.rnn``/``ops.lstm``/``ops.gru`` from the given state, so forward and backward are
those kernels'.

Parameters, named as torch's without the ``_l0`` suffix: ``W_ih`` (F, G*H), ``W_hh``
(H, G*H), ``b_ih``, ``b_hh`` (G*H,) (G = 1, 4, 3); from torch ``W_ih = weight_ih.T``,
``W_hh = weight_hh.T``, biases as they are. Every parameter starts as torch's
U(-1/sqrt(H), 1/sqrt(H)).

Use: ``forward(x, training=True, state=None)`` on x (N, F) returns h' (N, H); ``state``
is h (N, H) (LSTM: a pair (h, c), either may be None) and None means zeros.
:meth:`~RecurrentCell.forward_with_state` returns ``(h', c')`` for the LSTM (h' for the
others); ``backward(dy)`` returns dL/dx and :meth:`~RecurrentCell.backward_with_state`
``(dx, d_state)`` (d_state mirrors ``state``, None where none was given). An LSTM cell
made with ``return_state=True`` returns ``(h', c')`` from ``forward`` and takes
``(dh', dc')`` (either may be None) in ``backward``.

In a graph, a cell is called on ``x``, ``[x, h]`` or, for the LSTM, ``[x, h, c]``; it
gives one output h', or for an LSTM cell with ``return_state=True`` two outputs
``[h', c']``, so a step can feed the next one.
"""

from __future__ import annotations

from .. import initializers, ops
from .._checks import choice, float_array, positive_int
from .._hyper import flag
from ..ops import RECURRENT_GATES
from . import declarations as twins
from . import onnx_recurrent
from .base import Layer
from .caching import keeps_cache
from .recurrent import check_states
from .registry import register


class RecurrentCell(Layer):
    """Shared machinery; subclasses set ``cell`` and ``forward_op``/``backward_op``."""

    receptive_field = "pointwise"
    onnx_form = onnx_recurrent.cell
    onnx_graph_form = onnx_recurrent.cell_graph
    cell = ""
    num_layers, directions, return_state = 1, 1, False  # for declarations.recurrent_params

    def __init__(self, hidden_size, bias=True, *, nonlinearity="tanh", name=None,
                 trainable=True, dtype=None, seed=None):
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        owner = type(self).__name__
        self.hidden_size = positive_int(owner, "hidden_size", hidden_size)
        self.use_bias = flag(owner, "bias", bias)
        self.nonlinearity = choice(owner, "nonlinearity", nonlinearity, ("tanh", "relu"))

    @property
    def n_states(self) -> int:
        return 2 if self.cell == "lstm" else 1

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size, "bias": self.use_bias}

    def parameter_suffix(self, layer, direction):
        """No suffix: ``weight_ih``, not ``weight_ih_l0``, as torch's cells."""
        return ""

    def _build(self, input_shape, rng):
        if len(input_shape) != 1:
            raise ValueError(f"{self.label}: expects inputs (N, F); received per-example "
                             f"shape {tuple(input_shape)}")
        hidden, width = self.hidden_size, RECURRENT_GATES[self.cell] * self.hidden_size
        init = initializers.torch_default_bias(hidden)  # U(-1/sqrt(H), 1/sqrt(H))
        self.add_parameter("W_ih", (input_shape[0], width), init, rng)
        self.add_parameter("W_hh", (hidden, width), init, rng)
        if self.use_bias:
            self.add_parameter("b_ih", (width,), init, rng)
            self.add_parameter("b_hh", (width,), init, rng)

    def _states(self, name, value, batch):
        """A state or a state gradient as a list of n_states arrays (N, H) or None."""
        return check_states(self.label, name, value, self.n_states,
                            (batch, self.hidden_size), "(N, H)", self.dtype)

    # ------------------------------------------------------- forward/backward
    def forward(self, x, training=True, state=None, grad=None):
        """x (N, F) -> h' (N, H) (an LSTM cell with ``return_state``: ``(h', c')``);
        ``state`` h (N, H), for the LSTM a pair (h, c), or None for zeros."""
        out = self.forward_with_state(x, training, state, grad)
        return out if self.return_state else out[0] if isinstance(out, tuple) else out

    def forward_with_state(self, x, training=True, state=None, grad=None):
        """h' (N, H), or for the LSTM ``(h', c')``."""
        grad = keeps_cache(self.label, training, grad)
        x = float_array(self.label, "x", x, 2, "(N, F)")
        self.ensure_built(x.shape[1:])
        self.check_dtype(x)
        finals, cache = self._step(x, self._states("state", state, x.shape[0]))
        if grad:
            self._caches.append(cache)
        return tuple(finals) if self.n_states == 2 else finals[0]

    def _forward(self, x, training):
        finals, cache = self._step(x, [None] * self.n_states)
        return (tuple(finals) if self.return_state else finals[0]), cache

    def _step(self, x, states):
        if x.shape[1] != self.input_shape[0]:
            raise ValueError(f"{self.label}: 'x' must have F = {self.input_shape[0]} features "
                             f"(N, F), as when the layer was built; received shape "
                             f"{tuple(x.shape)}")
        p = self.parameters
        extra = {"nonlinearity": self.nonlinearity} if self.cell == "rnn" else {}
        _, *finals, cache = self.forward_op(x[:, None], p["W_ih"], p["W_hh"], p.get("b_ih"),
                                            p.get("b_hh"), *states, **extra)
        return finals, (cache, x.shape[0], [s is not None for s in states])

    def backward(self, dy, *, input_grad=True):
        """dL/dx of the latest forward (None with ``input_grad=False``); ``dy`` is
        dL/dh' (N, H), or ``(dh', dc')`` for an LSTM cell with ``return_state``."""
        dx = self.backward_with_state(dy)[0]
        return dx if input_grad else None

    def backward_with_state(self, dy, d_cell=None):
        """``(dx, d_state)``: ``dy`` dL/dh' (LSTM: also a pair (dh', dc')), ``d_cell``
        dL/dc' (LSTM; None: zero); d_state mirrors the forward's ``state``."""
        if self.n_states == 2 and isinstance(dy, (tuple, list)):
            if len(dy) != 2 or d_cell is not None:
                raise TypeError(f"{self.label}: 'dy' must be dh' (N, H) (with 'd_cell') or a "
                                f"pair (dh', dc'); received a {type(dy).__name__} of {len(dy)}")
            dy, d_cell = dy
        return super().backward((dy, d_cell))

    def _backward(self, dy_and_cell, cache):
        cache, batch, given = cache
        grads = self._states("dy", dy_and_cell if self.n_states == 2 else dy_and_cell[0],
                             batch)
        dx, *rest = self.backward_op(None, cache, *grads)
        d_states, (dW_ih, dW_hh, db_ih, db_hh) = rest[:-4], rest[-4:]
        weights = {"W_ih": dW_ih, "W_hh": dW_hh}
        if self.use_bias:
            weights.update(b_ih=db_ih, b_hh=db_hh)
        d_state = None
        if any(given):
            d_state = tuple(d_states) if self.n_states == 2 else d_states[0]
        return (dx[:, 0], d_state), weights

    # ----------------------------------------------------------------- graphs
    def graph_forward(self, inputs, training):
        """Graph call on ``x``, ``[x, h]`` or (LSTM) ``[x, h, c]``."""
        if not 1 <= len(inputs) <= 1 + self.n_states:
            expected = "x, [x, h] or [x, h, c]" if self.n_states == 2 else "x or [x, h]"
            raise TypeError(f"{self.label}: takes {expected}; received {len(inputs)} input "
                            f"tensors")
        states = list(inputs[1:]) + [None] * (1 + self.n_states - len(inputs))
        out = self.forward(inputs[0], training, states if self.n_states == 2 else states[0])
        return list(out) if isinstance(out, tuple) else out

    def graph_backward(self, dy, input_grad=True):
        count = 1 + sum(self._caches[-1][2]) if self._caches else 1
        dx, d_state = self.backward_with_state(dy)
        d_states = list(d_state) if isinstance(d_state, tuple) else [d_state]
        return [dx, *[d for d in d_states if d is not None]][:count]


@register
class RNNCell(RecurrentCell):
    """One Elman step, h' = tanh or relu(x W_ih + b_ih + h W_hh + b_hh), the twin of
    ``torch.nn.RNNCell``. See the module docstring."""

    torch_twin = twins.TorchTwin("RNNCell", twins.recurrent_params, twins.RESET)
    forward_op, backward_op = staticmethod(ops.rnn), staticmethod(ops.rnn_backward)
    cell = "rnn"

    def __init__(self, hidden_size, bias=True, nonlinearity="tanh", **kwargs):
        super().__init__(hidden_size, bias, nonlinearity=nonlinearity, **kwargs)

    def get_config(self):
        return {**super().get_config(), "nonlinearity": self.nonlinearity}


@register
class LSTMCell(RecurrentCell):
    """One LSTM step (gates i, f, g, o), the twin of ``torch.nn.LSTMCell``; the state is a
    pair (h, c). ``return_state=True``: ``forward`` returns ``(h', c')`` (a graph call
    two outputs). See the module docstring."""

    torch_twin = twins.TorchTwin("LSTMCell", twins.recurrent_params, twins.RESET)
    forward_op, backward_op = staticmethod(ops.lstm), staticmethod(ops.lstm_backward)
    cell = "lstm"

    def __init__(self, hidden_size, bias=True, return_state=False, **kwargs):
        super().__init__(hidden_size, bias, **kwargs)
        self.return_state = flag(type(self).__name__, "return_state", return_state)

    def get_config(self):
        return {**super().get_config(), "return_state": self.return_state}


@register
class GRUCell(RecurrentCell):
    """One GRU step (gates r, z, n), the twin of ``torch.nn.GRUCell``. See the module
    docstring."""

    torch_twin = twins.TorchTwin("GRUCell", twins.recurrent_params, twins.RESET)
    forward_op, backward_op = staticmethod(ops.gru), staticmethod(ops.gru_backward)
    cell = "gru"
