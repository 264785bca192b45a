"""Initial and final states of the recurrent layers as graph inputs and outputs, and
``return_state`` (Keras's name).

In a graph ``Model`` a recurrent layer is called on ``x``, ``[x, h0]`` or, for the LSTM,
``[x, h0, c0]``; made with ``return_state=True`` it gives ``[y, h_n]`` (LSTM
``[y, h_n, c_n]``). Graph tensors are batch first, so a state there is (N, L*D, H)
(per example (L*D, H), L = num_layers, D = 2 when bidirectional, row ``l * D + d``):
the transpose of the (L*D, N, H) layout (torch's) that ``forward(x, initial_state=...)``
takes and ``final_state`` holds. The gradients flow to h0/c0, and those of h_n/c_n enter
the last step's backward (dL/dh_n adds to the state gradient that the last step gets
from the output). Outside a graph ``forward`` with ``return_state=True`` returns
``(y, h_n[, c_n])`` as :meth:`forward_with_state` and ``backward`` takes
``(dy, dh_n[, dc_n])`` (entries may be None). With an LSTM's ``proj_size=P`` the h states
have P features: h0/h_n (N, L*D, P), c0/c_n (N, L*D, H).
"""

from __future__ import annotations

from .._checks import array_module, describe, float_array, is_int
from .masking import mask_lengths


def _swap(a):
    """(A, B, H) <-> (B, A, H), contiguous; None stays None."""
    return None if a is None else array_module(a).ascontiguousarray(a.swapaxes(0, 1))


def check_proj_size(owner, proj_size, hidden_size, cell):
    """torch's ``proj_size``: 0 (none) or an int in [1, hidden_size), LSTM only."""
    if not is_int(proj_size):
        raise TypeError(f"{owner}: 'proj_size' must be an int >= 0 (0: no projection); "
                        f"received {describe(proj_size)}")
    if proj_size < 0:
        raise ValueError(f"{owner}: 'proj_size' must be an int >= 0 (0: no projection); "
                         f"received {proj_size}")
    if proj_size and cell != "lstm":
        raise ValueError(f"{owner}: 'proj_size' is only for the LSTM (torch's); received "
                         f"proj_size={proj_size}")
    if proj_size >= hidden_size:
        raise ValueError(f"{owner}: 'proj_size' must be smaller than hidden_size="
                         f"{hidden_size}, as torch's; received proj_size={proj_size}")
    return int(proj_size)


class StateCalls:
    """The graph calls and ``return_state`` of ``Recurrent`` (mixed in; it provides
    ``forward_with_state``, ``backward_with_state``, ``n_states`` and ``_pack``)."""

    return_state = False

    def forward(self, x, training=True, initial_state=None, lengths=None, grad=None):
        """(N, T, F) -> (N, T, D*H), or (N, D*H) with ``return_sequences=False``; with
        ``return_state=True`` the tuple ``(y, h_n[, c_n])`` (states (L*D, N, H)).

        ``initial_state``: (L*D, N, H) (LSTM: a pair (h0, c0)) or None for zeros;
        ``lengths``: (N,) ints in [1, T] or None. The final states are kept in
        :attr:`final_state`. ``grad`` (default: ``training``) keeps the cache.
        """
        out = self.forward_with_state(x, training, initial_state, lengths, grad)
        return out if self.return_state else out[0]

    def backward(self, dy, d_final_state=None, *, input_grad=True):
        """dL/dx for the latest forward (None with ``input_grad=False``);
        ``d_final_state`` is the gradient of :attr:`final_state` (same structure, entries
        may be None). With ``return_state=True`` ``dy`` may be the tuple
        ``(dy, dh_n[, dc_n])``."""
        if self.return_state and isinstance(dy, (tuple, list)):
            if len(dy) != 1 + self.n_states or d_final_state is not None:
                expected = "(dy, dh_n, dc_n)" if self.n_states == 2 else "(dy, dh_n)"
                raise TypeError(f"{self.label}: 'dy' must be dL/dy or {expected} (then no "
                                f"'d_final_state'); received a {type(dy).__name__} of "
                                f"{len(dy)}")
            dy, d_final_state = dy[0], self._pack(list(dy[1:]))
        dx = self.backward_with_state(dy, d_final_state)[0]
        return dx if input_grad else None

    def output_shape(self, input_shape):
        """The per-example output shape; a layer with ``return_state`` has several outputs,
        which only a graph ``Model`` can take apart (a chain such as ``Sequential`` cannot)."""
        if self.return_state:
            raise ValueError(f"{self.label}: with return_state=True it has several outputs "
                             f"[y, h_n{', c_n' if self.n_states == 2 else ''}], so it cannot be "
                             f"a step of a chain (Sequential); call it in a graph "
                             f"handgrad.Model")
        return super().output_shape(input_shape)

    def forward_masked(self, x, mask, training):
        """The forward with ``lengths`` read from a mask (N, T) (see :mod:`.masking`)."""
        return self.forward(x, training, lengths=mask_lengths(self.label, mask, *x.shape[:2]))

    def graph_forward_masked(self, inputs, masks, training):
        """The graph call with ``lengths`` read from the mask of ``x``."""
        x = inputs[0]
        lengths = None if masks[0] is None else mask_lengths(self.label, masks[0],
                                                             *x.shape[:2])
        return self.graph_forward(inputs, training, lengths)

    def graph_forward(self, inputs, training, lengths=None):
        """Graph call on ``x``, ``[x, h0]`` or (LSTM) ``[x, h0, c0]``, states (N, L*D, H);
        ``[y, h_n(, c_n)]`` with ``return_state``."""
        if not 1 <= len(inputs) <= 1 + self.n_states:
            expected = "x, [x, h0] or [x, h0, c0]" if self.n_states == 2 else "x or [x, h0]"
            raise TypeError(f"{self.label}: takes {expected}; received {len(inputs)} input "
                            f"tensors")
        x, states = inputs[0], list(inputs[1:])
        rows = self.num_layers * self.directions
        for i, state in enumerate(states):
            name, size = ("h0", "c0")[i], (self.out_size, self.hidden_size)[i]
            layout = f"(N, num_layers * D, {'P' if size != self.hidden_size else 'H'})"
            state = float_array(self.label, name, state, 3, layout)
            expected = (len(x), rows, size)
            if tuple(state.shape) != expected:
                raise ValueError(f"{self.label}: the graph input '{name}' must have shape "
                                 f"{layout} = {expected}; received shape "
                                 f"{tuple(state.shape)}")
            states[i] = _swap(state)
        states += [None] * (self.n_states - len(states))
        y, *finals = self.forward_with_state(x, training, self._pack(states) if inputs[1:]
                                             else None, lengths)
        return [y, *map(_swap, finals)] if self.return_state else y

    def graph_backward(self, dy, input_grad=True):
        """``[dx, dh0(, dc0)]`` for the graph inputs of the latest call."""
        given = self._caches[-1][3] if self._caches else []
        d_final = None
        if self.return_state:
            dy, d_final = dy[0], self._pack([_swap(d) for d in dy[1:]])
        dx, d_initial = self.backward_with_state(dy, d_final)
        d_initial = list(d_initial) if isinstance(d_initial, tuple) else [d_initial]
        return [dx, *map(_swap, d_initial[:sum(given)])]
