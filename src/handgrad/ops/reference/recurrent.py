"""Naive recurrent layers: a loop over examples and, inside, over the time steps.

The readable specification of :mod:`handgrad.ops.recurrent`, with the same
signatures. Each example is run on its own, from t = 0 to lengths[n] - 1 (or back
from lengths[n] - 1 to 0 for ``reverse``); padded positions are simply never
visited, so they output 0 and get no gradient. Backward replays each example's
steps in reverse order (backpropagation through time), adding every step's outer
products into the weight gradients.

Dropout masks: each step reads ``x_t * input_mask[n]`` and feeds ``h * recurrent_mask[n]``
(saved as ``h_in``) to W_hh; the step's backward multiplies dx_t and the W_hh path of
dh by the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import Cache, check_cache
from .._args.recurrent import prepare_recurrent, state_grad
from ..declare import exports


@dataclass(frozen=True)
class LoopRecurrentCache(Cache):
    """The cell (``op``), the validated call and each example's tape of saved steps."""

    call: object
    tapes: list


def _sigmoid(a):
    return np.exp(-np.logaddexp(0.0, -a))  # 1 / (1 + exp(-a)), without overflow


def _bias(b, size, dtype):
    return np.zeros(size, dtype) if b is None else b


# --------------------------------------------------------- one step of each cell
def _rnn_step(call, x_t, state, b_ih, b_hh, m_h):
    (h,) = state
    a = x_t @ call.W_ih + b_ih + (h * m_h) @ call.W_hh + b_hh
    h_new = np.maximum(a, 0.0) if call.nonlinearity == "relu" else np.tanh(a)
    return (h_new,), {"h": h, "h_in": h * m_h, "h_new": h_new}


def _rnn_step_back(call, saved, d_state, m_h):
    (dh,) = d_state
    h_new = saved["h_new"]
    slope = (h_new > 0) if call.nonlinearity == "relu" else 1.0 - h_new**2
    da = dh * slope
    return da, da, ((da @ call.W_hh.T) * m_h,)


def _lstm_step(call, x_t, state, b_ih, b_hh, m_h):
    h, c = state
    a = x_t @ call.W_ih + b_ih + (h * m_h) @ call.W_hh + b_hh
    a_i, a_f, a_g, a_o = np.split(a, 4)
    i, f, g, o = _sigmoid(a_i), _sigmoid(a_f), np.tanh(a_g), _sigmoid(a_o)
    c_new = f * c + i * g
    h_new = o * np.tanh(c_new)
    saved = {"h": h, "h_in": h * m_h, "c": c}
    return (h_new, c_new), {**saved, "i": i, "f": f, "g": g, "o": o, "c_new": c_new}


def _lstm_step_back(call, s, d_state, m_h):
    dh, dc = d_state
    tanh_c = np.tanh(s["c_new"])
    do = dh * tanh_c
    dc = dc + dh * s["o"] * (1.0 - tanh_c**2)
    di, df, dg = dc * s["g"], dc * s["c"], dc * s["i"]
    da = np.concatenate([di * s["i"] * (1 - s["i"]), df * s["f"] * (1 - s["f"]),
                         dg * (1 - s["g"] ** 2), do * s["o"] * (1 - s["o"])])
    return da, da, ((da @ call.W_hh.T) * m_h, dc * s["f"])


def _gru_step(call, x_t, state, b_ih, b_hh, m_h):
    (h,) = state
    ax = x_t @ call.W_ih + b_ih  # [x W_ir + b_ir, x W_iz + b_iz, x W_in + b_in]
    ah = (h * m_h) @ call.W_hh + b_hh  # [h W_hr + b_hr, h W_hz + b_hz, h W_hn + b_hn]
    ax_r, ax_z, ax_n = np.split(ax, 3)
    ah_r, ah_z, ah_n = np.split(ah, 3)
    r, z = _sigmoid(ax_r + ah_r), _sigmoid(ax_z + ah_z)
    n = np.tanh(ax_n + r * ah_n)
    h_new = (1 - z) * n + z * h
    return (h_new,), {"h": h, "h_in": h * m_h, "r": r, "z": z, "n": n, "ah_n": ah_n}


def _gru_step_back(call, s, d_state, m_h):
    (dh,) = d_state
    r, z, n = s["r"], s["z"], s["n"]
    dn, dz = dh * (1 - z), dh * (s["h"] - n)
    da_n = dn * (1 - n**2)
    dr = da_n * s["ah_n"]
    da_r, da_z = dr * r * (1 - r), dz * z * (1 - z)
    da_x = np.concatenate([da_r, da_z, da_n])
    da_h = np.concatenate([da_r, da_z, da_n * r])
    return da_x, da_h, (dh * z + (da_h @ call.W_hh.T) * m_h,)


_CELLS = {"rnn": (_rnn_step, _rnn_step_back), "lstm": (_lstm_step, _lstm_step_back),
          "gru": (_gru_step, _gru_step_back)}


# ------------------------------------------------------------- loops over n and t
def _mask_row(mask, n):
    """Row ``n`` of an optional dropout mask (1.0 without one)."""
    return 1.0 if mask is None else mask[n]


def _forward(call):
    x = np.asarray(call.x)
    n_examples, n_steps, _ = x.shape
    hidden, dtype = call.hidden, x.dtype
    n_states = 2 if call.cell == "lstm" else 1
    width = call.W_hh.shape[1]
    b_ih, b_hh = _bias(call.b_ih, width, dtype), _bias(call.b_hh, width, dtype)
    step, _ = _CELLS[call.cell]
    y = np.zeros((n_examples, n_steps, hidden), dtype)
    finals = [np.zeros((n_examples, hidden), dtype) for _ in range(n_states)]
    tapes = []
    for n in range(n_examples):
        length = n_steps if call.lengths is None else int(call.lengths[n])
        times = range(length - 1, -1, -1) if call.reverse else range(length)
        state = tuple(np.zeros(hidden, dtype) if s0 is None else s0[n]
                      for s0 in (call.h0, call.c0)[:n_states])
        tape, m_x, m_h = [], _mask_row(call.input_mask, n), _mask_row(call.recurrent_mask, n)
        for t in times:
            state, saved = step(call, x[n, t] * m_x, state, b_ih, b_hh, m_h)
            y[n, t] = state[0]
            tape.append((t, saved))
        for final, value in zip(finals, state):
            final[n] = value
        tapes.append(tape)
    return y, finals, LoopRecurrentCache(call.cell, call, tapes)


def _backward(op, cell, dy, cache, *d_finals):
    cache = check_cache(op, cache, cell, LoopRecurrentCache)
    call, tapes = cache.call, cache.tapes
    x = np.asarray(call.x)
    n_examples, n_steps, _ = x.shape
    hidden, dtype = call.hidden, x.dtype
    if dy is None:
        dy = np.zeros((n_examples, n_steps, hidden), dtype)
    dy = upstream_grad(op, dy, (n_examples, n_steps, hidden), dtype)
    names = ("dh_n", "dc_n")
    d_finals = [state_grad(op, names[i], g, (n_examples, hidden), dtype)
                for i, g in enumerate(d_finals)]
    _, step_back = _CELLS[cell]
    dx = np.zeros_like(x)
    dW_ih, dW_hh = np.zeros_like(call.W_ih), np.zeros_like(call.W_hh)
    db_ih = np.zeros(call.W_hh.shape[1], dtype)
    db_hh = np.zeros_like(db_ih)
    d_initial = [np.zeros((n_examples, hidden), dtype) for _ in d_finals]
    for n in range(n_examples):
        d_state = [np.zeros(hidden, dtype) if g is None else g[n].copy() for g in d_finals]
        m_x, m_h = _mask_row(call.input_mask, n), _mask_row(call.recurrent_mask, n)
        for t, saved in reversed(tapes[n]):
            d_state[0] = d_state[0] + dy[n, t]
            da_x, da_h, d_state = step_back(call, saved, d_state, m_h)
            d_state = list(d_state)
            dx[n, t] = (da_x @ call.W_ih.T) * m_x
            dW_ih += np.outer(x[n, t] * m_x, da_x)
            dW_hh += np.outer(saved["h_in"], da_h)
            db_ih += da_x
            db_hh += da_h
        for d0, value in zip(d_initial, d_state):
            d0[n] = value
    given = (call.h0, call.c0)
    d_initial = [d0 if given[i] is not None else None for i, d0 in enumerate(d_initial)]
    return (dx, *d_initial, dW_ih, dW_hh, db_ih if call.b_ih is not None else None,
            db_hh if call.b_hh is not None else None)


def rnn(x, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, *, nonlinearity="tanh", lengths=None,
        reverse=False, input_mask=None, recurrent_mask=None):
    """Loop twin of :func:`handgrad.ops.rnn`."""
    call = prepare_recurrent("rnn", "rnn", x, W_ih, W_hh, b_ih, b_hh, h0, None, lengths,
                             reverse, nonlinearity, input_mask, recurrent_mask)
    y, (h_n,), cache = _forward(call)
    return y, h_n, cache


def rnn_backward(dy, cache, dh_n=None):
    """Loop twin of :func:`handgrad.ops.rnn_backward`."""
    return _backward("rnn_backward", "rnn", dy, cache, dh_n)


def lstm(x, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, c0=None, *, lengths=None,
         reverse=False, input_mask=None, recurrent_mask=None):
    """Loop twin of :func:`handgrad.ops.lstm`."""
    call = prepare_recurrent("lstm", "lstm", x, W_ih, W_hh, b_ih, b_hh, h0, c0, lengths,
                             reverse, "tanh", input_mask, recurrent_mask)
    y, (h_n, c_n), cache = _forward(call)
    return y, h_n, c_n, cache


def lstm_backward(dy, cache, dh_n=None, dc_n=None):
    """Loop twin of :func:`handgrad.ops.lstm_backward`."""
    return _backward("lstm_backward", "lstm", dy, cache, dh_n, dc_n)


def gru(x, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, *, lengths=None, reverse=False,
        input_mask=None, recurrent_mask=None):
    """Loop twin of :func:`handgrad.ops.gru`."""
    call = prepare_recurrent("gru", "gru", x, W_ih, W_hh, b_ih, b_hh, h0, None, lengths,
                             reverse, "tanh", input_mask, recurrent_mask)
    y, (h_n,), cache = _forward(call)
    return y, h_n, cache


def gru_backward(dy, cache, dh_n=None):
    """Loop twin of :func:`handgrad.ops.gru_backward`."""
    return _backward("gru_backward", "gru", dy, cache, dh_n)


__all__ = exports(__name__, globals())
