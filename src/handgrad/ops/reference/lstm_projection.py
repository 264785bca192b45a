"""Naive projected LSTM (torch's ``proj_size``): a loop over examples and, inside, over
the time steps; the readable specification of :mod:`handgrad.ops.lstm_projection`, with
the same signatures. Padded positions are never visited (output 0, no gradient)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import Cache, check_cache
from .._args.lstm_projection import prepare_projected
from .._args.recurrent import state_grad
from ..declare import exports


@dataclass(frozen=True)
class LoopProjectedCache(Cache):
    """The validated call and each example's tape of (t, saved step values)."""

    call: object
    tapes: list


def _sigmoid(a):
    return np.exp(-np.logaddexp(0.0, -a))


def lstm_projected(x, W_ih, W_hh, W_hr, b_ih=None, b_hh=None, h0=None, c0=None, *,
                   lengths=None, reverse=False):
    """Loop twin of :func:`handgrad.ops.lstm_projected`."""
    call = prepare_projected("lstm_projected", x, W_ih, W_hh, W_hr, b_ih, b_hh, h0, c0,
                             lengths, reverse)
    n_examples, n_steps, _ = call.x.shape
    hidden, proj = call.sizes
    dtype = call.x.dtype
    bias = sum(b for b in (call.b_ih, call.b_hh) if b is not None)
    y = np.zeros((n_examples, n_steps, proj), dtype)
    h_n, c_n = np.zeros((n_examples, proj), dtype), np.zeros((n_examples, hidden), dtype)
    tapes = []
    for n in range(n_examples):
        length = n_steps if call.lengths is None else int(call.lengths[n])
        times = range(length - 1, -1, -1) if call.reverse else range(length)
        h = np.zeros(proj, dtype) if call.h0 is None else call.h0[n]
        c = np.zeros(hidden, dtype) if call.c0 is None else call.c0[n]
        tape = []
        for t in times:
            a = call.x[n, t] @ call.W_ih + h @ call.W_hh + bias
            a_i, a_f, a_g, a_o = np.split(a, 4)
            i, f, g, o = _sigmoid(a_i), _sigmoid(a_f), np.tanh(a_g), _sigmoid(a_o)
            c_new = f * c + i * g
            m = o * np.tanh(c_new)
            tape.append((t, {"h": h, "c": c, "i": i, "f": f, "g": g, "o": o, "c_new": c_new,
                             "m": m}))
            h, c = m @ call.W_hr, c_new
            y[n, t] = h
        h_n[n], c_n[n] = h, c
        tapes.append(tape)
    return y, h_n, c_n, LoopProjectedCache("lstm_projected", call, tapes)


def lstm_projected_backward(dy, cache, dh_n=None, dc_n=None):
    """Loop twin of :func:`handgrad.ops.lstm_projected_backward`."""
    op = "lstm_projected_backward"
    cache = check_cache(op, cache, "lstm_projected", LoopProjectedCache)
    call = cache.call
    n_examples, n_steps, _ = call.x.shape
    hidden, proj = call.sizes
    dtype = call.x.dtype
    dy = np.zeros((n_examples, n_steps, proj), dtype) if dy is None else \
        upstream_grad(op, dy, (n_examples, n_steps, proj), dtype)
    dh_n = state_grad(op, "dh_n", dh_n, (n_examples, proj), dtype)
    dc_n = state_grad(op, "dc_n", dc_n, (n_examples, hidden), dtype)
    dx = np.zeros_like(call.x)
    dW_ih, dW_hh, dW_hr = (np.zeros_like(w) for w in (call.W_ih, call.W_hh, call.W_hr))
    db = np.zeros(4 * hidden, dtype)
    dh0, dc0 = np.zeros((n_examples, proj), dtype), np.zeros((n_examples, hidden), dtype)
    for n in range(n_examples):
        dh = np.zeros(proj, dtype) if dh_n is None else dh_n[n].copy()
        dc = np.zeros(hidden, dtype) if dc_n is None else dc_n[n].copy()
        for t, s in reversed(cache.tapes[n]):
            dh = dh + dy[n, t]
            dW_hr += np.outer(s["m"], dh)
            dm = call.W_hr @ dh
            tanh_c = np.tanh(s["c_new"])
            dc = dc + dm * s["o"] * (1 - tanh_c**2)
            i, f, g, o = s["i"], s["f"], s["g"], s["o"]
            da = np.concatenate([dc * g * i * (1 - i), dc * s["c"] * f * (1 - f),
                                 dc * i * (1 - g**2), dm * tanh_c * o * (1 - o)])
            dx[n, t] = call.W_ih @ da
            dW_ih += np.outer(call.x[n, t], da)
            dW_hh += np.outer(s["h"], da)
            db += da
            dh, dc = call.W_hh @ da, dc * f
        dh0[n], dc0[n] = dh, dc
    return (dx, dh0 if call.h0 is not None else None, dc0 if call.c0 is not None else None,
            dW_ih, dW_hh, dW_hr, db if call.b_ih is not None else None,
            db.copy() if call.b_hh is not None else None)


__all__ = exports(__name__, globals())
