"""Validation of recurrent-op arguments (shared with the reference twins).

Weights use handgrad's layout, the transpose of PyTorch's: ``W_ih`` is (F, G*H) and
``W_hh`` (H, G*H), with the G gate blocks of H columns in PyTorch's order
(LSTM i, f, g, o; GRU r, z, n; a plain RNN has G = 1). PyTorch's ``weight_ih_l0``
(G*H, F) is ``W_ih.T``, its ``weight_hh_l0`` (G*H, H) is ``W_hh.T``; the biases
``b_ih``, ``b_hh`` (G*H,) are the same arrays in both libraries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._checks import array_module, describe, float_array, is_int, same_dtype, upstream_grad
from ..._hyper import flag

GATES = {"rnn": 1, "lstm": 4, "gru": 3}
NONLINEARITIES = ("tanh", "relu")


@dataclass(frozen=True)
class RecurrentCall:
    """A validated call of one recurrent layer in one direction."""

    cell: str  # "rnn", "lstm" or "gru"
    x: object  # (N, T, F)
    W_ih: object  # (F, G*H)
    W_hh: object  # (H, G*H)
    b_ih: object  # (G*H,) or None
    b_hh: object  # (G*H,) or None
    h0: object  # (N, H) or None
    c0: object  # (N, H) or None (LSTM only)
    lengths: object  # (N,) int64 in [1, T], or None
    reverse: bool
    nonlinearity: str  # "tanh" or "relu" (RNN only)
    input_mask: object = None  # (N, F) or None: x_t * input_mask for every t
    recurrent_mask: object = None  # (N, H) or None: (h_{t-1} * recurrent_mask) W_hh

    @property
    def hidden(self) -> int:
        return self.W_hh.shape[0]


def check_lengths(op, lengths, n, steps):
    """``lengths`` as an int64 array of shape (N,) with 1 <= lengths <= T."""
    if lengths is None:
        return None
    expected = f"an int array of shape ({n},) with values in [1, {steps}] (N = {n}, T = {steps})"
    if isinstance(lengths, (list, tuple)):
        if not all(is_int(v) for v in lengths):
            raise TypeError(f"{op}: 'lengths' must be {expected}; received {describe(lengths)}")
        lengths = np.asarray(lengths, dtype=np.int64).reshape(len(lengths))
    if not (hasattr(lengths, "dtype") and hasattr(lengths, "shape")):
        raise TypeError(f"{op}: 'lengths' must be {expected}; received {describe(lengths)}")
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"{op}: 'lengths' must be {expected}; received dtype {lengths.dtype}")
    if tuple(lengths.shape) != (n,):
        raise ValueError(f"{op}: 'lengths' must be {expected}; received shape "
                         f"{tuple(lengths.shape)}")
    if n and (int(lengths.min()) < 1 or int(lengths.max()) > steps):
        raise ValueError(f"{op}: 'lengths' must be {expected}; received values from "
                         f"{int(lengths.min())} to {int(lengths.max())}")
    return array_module(lengths).asarray(lengths, dtype=np.int64)


def _state(op, name, state, n, hidden):
    if state is None:
        return None
    state = float_array(op, name, state, 2, "(N, H)")
    if tuple(state.shape) != (n, hidden):
        raise ValueError(f"{op}: '{name}' must have shape (N, H) = ({n}, {hidden}); received "
                         f"shape {tuple(state.shape)}")
    return state


def _dropout_mask(op, name, mask, shape, layout):
    """An optional variational dropout mask (one row per sequence) of ``shape``."""
    if mask is None:
        return None
    mask = float_array(op, name, mask, 2, layout)
    if tuple(mask.shape) != shape:
        raise ValueError(f"{op}: '{name}' must have shape {layout} = {shape}; received shape "
                         f"{tuple(mask.shape)}")
    return mask


def prepare_recurrent(op, cell, x, W_ih, W_hh, b_ih, b_hh, h0, c0, lengths, reverse,
                      nonlinearity="tanh", input_mask=None, recurrent_mask=None):
    """Check every argument of a recurrent op; return a :class:`RecurrentCall`."""
    gates = GATES[cell]
    blocks = "H" if gates == 1 else f"{gates}*H"
    x = float_array(op, "x", x, 3, "(N, T, F)")
    W_ih = float_array(op, "W_ih", W_ih, 2, f"(F, {blocks})")
    W_hh = float_array(op, "W_hh", W_hh, 2, f"(H, {blocks})")
    n, steps, features = x.shape
    hidden = W_hh.shape[0]
    if hidden < 1 or W_hh.shape[1] != gates * hidden:
        raise ValueError(f"{op}: 'W_hh' must have shape (H, {blocks}) with H >= 1; received "
                         f"shape {tuple(W_hh.shape)}")
    if W_ih.shape[0] != features:
        raise ValueError(f"{op}: 'x' has F = {features} features (last axis of shape "
                         f"{tuple(x.shape)}) but 'W_ih' of shape {tuple(W_ih.shape)} expects "
                         f"F = {W_ih.shape[0]}")
    if W_ih.shape[1] != gates * hidden:
        raise ValueError(f"{op}: 'W_ih' must have shape (F, {blocks}) = ({features}, "
                         f"{gates * hidden}) to match 'W_hh' (H = {hidden}); received shape "
                         f"{tuple(W_ih.shape)}")
    biases = {}
    for name, b in (("b_ih", b_ih), ("b_hh", b_hh)):
        if b is not None:
            b = float_array(op, name, b, 1, f"({blocks},)")
            if b.shape[0] != gates * hidden:
                raise ValueError(f"{op}: '{name}' must have shape ({gates * hidden},) "
                                 f"({blocks} with H = {hidden}); received shape {tuple(b.shape)}")
        biases[name] = b
    h0 = _state(op, "h0", h0, n, hidden)
    c0 = _state(op, "c0", c0, n, hidden) if cell == "lstm" else None
    input_mask = _dropout_mask(op, "input_mask", input_mask, (n, features), "(N, F)")
    recurrent_mask = _dropout_mask(op, "recurrent_mask", recurrent_mask, (n, hidden), "(N, H)")
    same_dtype(op, x=x, W_ih=W_ih, W_hh=W_hh, **biases, h0=h0, c0=c0, input_mask=input_mask,
               recurrent_mask=recurrent_mask)
    if steps < 1 or features < 1:  # as PyTorch; only the batch may be empty
        raise ValueError(f"{op}: 'x' must have at least one time step and one feature "
                         f"(N, T, F) with T >= 1 and F >= 1; received shape {tuple(x.shape)}")
    lengths = check_lengths(op, lengths, n, steps)
    reverse = flag(op, "reverse", reverse)
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"{op}: 'nonlinearity' must be 'tanh' or 'relu'; received "
                         f"{nonlinearity!r}")
    return RecurrentCall(cell, x, W_ih, W_hh, biases["b_ih"], biases["b_hh"], h0, c0, lengths,
                         reverse, nonlinearity, input_mask, recurrent_mask)


def state_grad(op, name, grad, shape, dtype):
    """An optional gradient of a final state, checked against its shape and dtype."""
    if grad is None:
        return None
    return upstream_grad(op, grad, shape, dtype, name, "shape (N, H) =")
