"""Recurrent layers (one layer, one direction per call): Elman RNN, LSTM and GRU,
batch-first, with PyTorch's equations and gate order.

For x (N, T, F), hidden size H, ``a_t = x_t W_ih + b_ih + h_{t-1} W_hh + b_hh``
(G*H columns, G gate blocks of H, sigma the logistic sigmoid)::

    rnn    h_t = tanh(a_t)  or  relu(a_t)                              (G = 1)
    lstm   i, f, g, o = sigma(a_i), sigma(a_f), tanh(a_g), sigma(a_o)  (G = 4)
           c_t = f c_{t-1} + i g;   h_t = o tanh(c_t)
    gru    r, z = sigma(a_r), sigma(a_z)                               (G = 3)
           n = tanh(x_t W_in + b_in + r (h_{t-1} W_hn + b_hn))
           h_t = (1 - z) n + z h_{t-1}

The output sequence is y_t = h_t. Weights are handgrad's layout, the transpose of
PyTorch's: ``W_ih`` (F, G*H) = ``weight_ih_l0.T``, ``W_hh`` (H, G*H) =
``weight_hh_l0.T``; the biases (G*H,) are the same. ``reverse=True`` reads the
sequence from t = T-1 down to 0 (the backward direction of a bidirectional layer).

Variational (Keras's) dropout: ``input_mask`` (N, F) and ``recurrent_mask`` (N, H),
fixed masks (0 or 1/(1-p), drawn by the caller, one per sequence, the same at every step
and for every gate), read x_t m_x in place of x_t and (h_{t-1} m_h) W_hh in place of
h_{t-1} W_hh; the backward gives dx_t = (dA_t W_ih^T) m_x, dW_ih = sum (x_t m_x)^T dA_t,
dW_hh = sum (h_{t-1} m_h)^T dA_t and dh_{t-1} = (dA_t W_hh^T) m_h (+ the direct path).

``lengths`` (N,) ints in [1, T] describe a padded batch: positions t >= lengths[n]
give y = 0 and leave the state unchanged, so the final state is the state at t =
lengths[n] - 1 (t = 0 for ``reverse``), exactly PyTorch's ``pack_padded_sequence``; a
reversed sequence starts at its own t = lengths[n] - 1. Padded positions of x get an
exactly zero gradient.

Backward is backpropagation through time, vectorized over the batch with a Python
loop over the time steps only. With dA_t the gradients of the pre-activations::

    dW_ih = sum_t x_t^T dA_t      dW_hh = sum_t h_{t-1}^T dA_t      db = sum_t,n dA_t
    dx_t  = dA_t W_ih^T           dh_{t-1} = dA_t W_hh^T (+ the cell's direct path)

(for the GRU the hidden side's n block is r * dA_n, see ``_recurrent_cells``). Each
weight gradient is one matmul over all time steps at once (batched over the gates),
and so is dx. The cache holds the input, the weights, the hidden (and cell) states
and the gate values.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import array_module, upstream_grad
from . import _recurrent_cells as cells
from ._args.cache import Cache, check_cache
from ._args.recurrent import prepare_recurrent, state_grad
from .declare import declare, exports


@dataclass(frozen=True)
class RecurrentCache(Cache):
    """What a recurrent backward needs: the cell (``op``: "rnn", "lstm" or "gru"), the
    step-ordered input ``xs`` (T, N, F), the weights, which optional inputs were given,
    the masks and the saved states/gates."""

    nonlinearity: str
    reverse: bool
    xs: object
    W_ih: object
    W_hh: object
    has_b_ih: bool
    has_b_hh: bool
    has_h0: bool
    has_c0: bool
    steps: cells.Steps
    saved: dict
    input_mask: object = None
    recurrent_mask: object = None


def _to_steps(xp, a, reverse):
    """(N, T, ...) -> (T, N, ...) contiguous, in the order the cell reads it."""
    a = a.swapaxes(0, 1)
    return xp.ascontiguousarray(a[::-1] if reverse else a)


def _from_steps(xp, a, reverse):
    """The inverse of :func:`_to_steps`."""
    return xp.ascontiguousarray((a[::-1] if reverse else a).swapaxes(0, 1))


def _steps(xp, lengths, n_steps, reverse):
    """The masks of a padded batch in step order (see ``_recurrent_cells.Steps``)."""
    if lengths is None or bool((lengths == n_steps).all()):
        return cells.Steps(None, None, (False,) * n_steps, reverse)
    times = xp.arange(n_steps)
    if reverse:
        times = n_steps - 1 - times
    mask = (times[:, None] < xp.asarray(lengths)[None, :])[..., None]
    partial = tuple(bool(v) for v in (~mask).any(axis=(1, 2)).tolist())
    return cells.Steps(mask, ~mask, partial, reverse)


CELL_FORWARD = {"rnn": cells.rnn_forward, "lstm": cells.lstm_forward, "gru": cells.gru_forward}


def _forward(call):
    xp = array_module(call.x, call.W_ih)
    x = call.x if call.input_mask is None else call.x * call.input_mask[:, None]
    xs = _to_steps(xp, x, call.reverse)
    steps = _steps(xp, call.lengths, xs.shape[0], call.reverse)
    saved = CELL_FORWARD[call.cell](xp, xs, call, steps)
    out = saved["S"][1:]
    if steps.mask is not None:
        out = xp.where(steps.mask, out, 0)
    y = _from_steps(xp, out, call.reverse)
    finals = [saved["S"][-1].copy()] + ([saved["C"][-1].copy()] if call.cell == "lstm" else [])
    cache = RecurrentCache(call.cell, call.nonlinearity, call.reverse, xs, call.W_ih, call.W_hh,
                           call.b_ih is not None, call.b_hh is not None, call.h0 is not None,
                           call.c0 is not None, steps, saved, call.input_mask,
                           call.recurrent_mask)
    return y, finals, cache


def _backward(op, cell, dy, cache, dh_n, dc_n=None):
    """Shared BPTT driver: returns (dx, dh0, dc0, dW_ih, dW_hh, db_ih, db_hh)."""
    cache = check_cache(op, cache, cell, RecurrentCache)
    xs, S = cache.xs, cache.saved["S"]
    n_steps, batch, features = xs.shape
    hidden, dtype = S.shape[-1], xs.dtype
    xp, mask = array_module(xs), cache.recurrent_mask
    if dy is not None:
        dy = upstream_grad(op, dy, (batch, n_steps, hidden), dtype)
    dh_n = state_grad(op, "dh_n", dh_n, (batch, hidden), dtype)
    dc0 = None
    if cell == "lstm":
        dc_n = state_grad(op, "dc_n", dc_n, (batch, hidden), dtype)
        d_in, d_rec, dh0, dc0 = cells.lstm_backward(xp, cache.saved, cache.W_hh, dy, dh_n, dc_n,
                                                    cache.steps, mask)
    elif cell == "gru":
        d_in, d_rec, dh0 = cells.gru_backward(xp, cache.saved, cache.W_hh, dy, dh_n,
                                              cache.steps, mask)
    else:
        d_in, d_rec, dh0 = cells.rnn_backward(xp, cache.saved, cache.W_hh, cache.nonlinearity,
                                              dy, dh_n, cache.steps, mask)
    # d_in, d_rec: (G, T, N, H), gate-major in the cell's internal gate order
    order, shared = cells.ORDERS[cell], d_rec is d_in
    rows_in = d_in.reshape(len(order), -1, hidden)
    rows_rec = rows_in if shared else d_rec.reshape(len(order), -1, hidden)
    dW_ih = cells.gate_minor(xp, xp.matmul(xs.reshape(-1, features).T, rows_in), order)
    fed = S[:-1] if mask is None else S[:-1] * mask
    dW_hh = cells.gate_minor(xp, xp.matmul(fed.reshape(-1, hidden).T, rows_rec), order)
    W_in = cells.gate_major(xp, cache.W_ih, order)
    dx = xp.matmul(rows_in[0], W_in[0].T)
    if len(order) > 1:
        term = xp.empty_like(dx)
        for j in range(1, len(order)):
            dx += xp.matmul(rows_in[j], W_in[j].T, out=term)
    dx = _from_steps(xp, dx.reshape(n_steps, batch, features), cache.reverse)
    if cache.input_mask is not None:
        dx *= cache.input_mask[:, None]
    db_ih = db_hh = None
    if cache.has_b_ih:
        db_ih = cells.gate_minor(xp, rows_in.sum(axis=1)[:, None], order)[0]
    if cache.has_b_hh:
        db_hh = db_ih.copy() if (shared and db_ih is not None) else \
            cells.gate_minor(xp, rows_rec.sum(axis=1)[:, None], order)[0]
    return (dx, dh0 if cache.has_h0 else None, dc0 if cache.has_c0 else None, dW_ih, dW_hh,
            db_ih, db_hh)


def rnn(x, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, *, nonlinearity="tanh", lengths=None,
        reverse=False, input_mask=None, recurrent_mask=None):
    """Elman RNN: h_t = act(x_t W_ih + b_ih + h_{t-1} W_hh + b_hh), act tanh or relu.

    x (N, T, F), W_ih (F, H), W_hh (H, H), b_ih/b_hh (H,) or None, h0 (N, H) or None
    (zeros), lengths (N,) ints or None, input_mask (N, F)/recurrent_mask (N, H) or None
    (variational dropout, see the module docstring)
    -> ``(y (N, T, H), h_n (N, H), cache)``.
    """
    call = prepare_recurrent("rnn", "rnn", x, W_ih, W_hh, b_ih, b_hh, h0, None, lengths,
                             reverse, nonlinearity, input_mask, recurrent_mask)
    y, (h_n,), cache = _forward(call)
    return y, h_n, cache


def rnn_backward(dy, cache, dh_n=None):
    """Gradients of :func:`rnn`: dy (N, T, H) (None: zero), dh_n (N, H) or None
    -> ``(dx, dh0, dW_ih, dW_hh, db_ih, db_hh)``; dh0/db are None when not given.

    dA_t = (dy_t + dh_t) act'(a_t); dh_{t-1} = dA_t W_hh^T; dW_ih = sum x_t^T dA_t, ...
    """
    dx, dh0, _, dW_ih, dW_hh, db_ih, db_hh = _backward("rnn_backward", "rnn", dy, cache, dh_n)
    return dx, dh0, dW_ih, dW_hh, db_ih, db_hh


def lstm(x, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, c0=None, *, lengths=None,
         reverse=False, input_mask=None, recurrent_mask=None):
    """LSTM (gate order i, f, g, o): c_t = f c_{t-1} + i g, h_t = o tanh(c_t).

    x (N, T, F), W_ih (F, 4H), W_hh (H, 4H), b_ih/b_hh (4H,) or None, h0/c0 (N, H) or None
    (masks as :func:`rnn`) -> ``(y (N, T, H), h_n (N, H), c_n (N, H), cache)``.
    """
    call = prepare_recurrent("lstm", "lstm", x, W_ih, W_hh, b_ih, b_hh, h0, c0, lengths,
                             reverse, "tanh", input_mask, recurrent_mask)
    y, (h_n, c_n), cache = _forward(call)
    return y, h_n, c_n, cache


def lstm_backward(dy, cache, dh_n=None, dc_n=None):
    """Gradients of :func:`lstm`: dy (N, T, H) (None: zero), dh_n/dc_n (N, H) or None
    -> ``(dx, dh0, dc0, dW_ih, dW_hh, db_ih, db_hh)``; dh0/dc0/db are None when not given.

    dc_t += dh_t o (1 - tanh^2 c_t); dA_i = dc g i(1-i), dA_f = dc c_{t-1} f(1-f),
    dA_g = dc i (1-g^2), dA_o = dh tanh(c) o(1-o); dc_{t-1} = dc f; dh_{t-1} = dA W_hh^T.
    """
    return _backward("lstm_backward", "lstm", dy, cache, dh_n, dc_n)


def gru(x, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, *, lengths=None, reverse=False,
        input_mask=None, recurrent_mask=None):
    """GRU (gate order r, z, n): n = tanh(x W_in + b_in + r (h W_hn + b_hn)),
    h_t = (1 - z) n + z h_{t-1}.

    x (N, T, F), W_ih (F, 3H), W_hh (H, 3H), b_ih/b_hh (3H,) or None, h0 (N, H) or None
    (masks as :func:`rnn`) -> ``(y (N, T, H), h_n (N, H), cache)``.
    """
    call = prepare_recurrent("gru", "gru", x, W_ih, W_hh, b_ih, b_hh, h0, None, lengths,
                             reverse, "tanh", input_mask, recurrent_mask)
    y, (h_n,), cache = _forward(call)
    return y, h_n, cache


def gru_backward(dy, cache, dh_n=None):
    """Gradients of :func:`gru`: dy (N, T, H) (None: zero), dh_n (N, H) or None
    -> ``(dx, dh0, dW_ih, dW_hh, db_ih, db_hh)``; dh0/db are None when not given.

    dA_n = dh (1-z)(1-n^2); dA_r = dA_n (h W_hn + b_hn) r(1-r); dA_z = dh (h_{t-1} - n)
    z(1-z); the hidden side gets [dA_r, dA_z, r dA_n]; dh_{t-1} = dh z + (that) W_hh^T.
    """
    dx, dh0, _, dW_ih, dW_hh, db_ih, db_hh = _backward("gru_backward", "gru", dy, cache, dh_n)
    return dx, dh0, dW_ih, dW_hh, db_ih, db_hh


# The declarations: kernels, torch counterpart, sample inputs (ops/samples/recurrent.py);
# the backward returns the state gradients before the weights'.
from .samples import recurrent as _s  # noqa: E402

_GRADS = ("x", "h0", "W_ih", "W_hh", "b_ih", "b_hh")
declare(rnn, rnn_backward, torch=_s.torch_recurrent("rnn"), samples=_s.RNN, grads=_GRADS)
declare(lstm, lstm_backward, torch=_s.torch_recurrent("lstm"), samples=_s.LSTM,
        grads=("x", "h0", "c0", *_GRADS[2:]))
declare(gru, gru_backward, torch=_s.torch_recurrent("gru"), samples=_s.GRU, grads=_GRADS)
__all__ = exports(__name__, globals())
