"""The LSTM with a projected hidden state, torch's ``nn.LSTM(proj_size=P)``: one layer, one
direction per call, batch first.

With cell size H and projection size P < H, gates i, f, g, o (torch's order)::

    a_t = x_t W_ih + b_ih + h_{t-1} W_hh + b_hh          W_ih (F, 4H), W_hh (P, 4H)
    c_t = f c_{t-1} + i g;   m_t = o tanh(c_t);   h_t = m_t W_hr        W_hr (H, P)

so h_t, the output y_t and h0/h_n have P features and c_t has H. From torch:
``W_ih = weight_ih_l0.T``, ``W_hh = weight_hh_l0.T``, ``W_hr = weight_hr_l0.T``.
``lengths`` and ``reverse`` as in :mod:`handgrad.ops.recurrent` (padded rows keep their
state, output 0 and get no gradient).

Backward (BPTT, vectorized over the batch, a loop over the steps), with dh_t the
gradient reaching h_t (from y_t and from step t+1)::

    dW_hr += m_t^T dh_t;   dm = dh_t W_hr^T;   dc_t += dm o (1 - tanh^2 c_t)
    dA_i = dc g i(1-i), dA_f = dc c_{t-1} f(1-f), dA_g = dc i (1-g^2),
    dA_o = dm tanh(c_t) o(1-o);   dc_{t-1} = dc f;   dh_{t-1} = dA W_hh^T

and, over all steps at once, dW_ih = sum x_t^T dA_t, dW_hh = sum h_{t-1}^T dA_t,
db = sum dA_t, dx_t = dA_t W_ih^T.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import array_module, upstream_grad
from ._args.cache import Cache, check_cache
from ._args.lstm_projection import prepare_projected
from ._args.recurrent import state_grad
from .declare import declare, exports
from .recurrent import _from_steps, _steps, _to_steps


@dataclass(frozen=True)
class ProjectedCache(Cache):
    """The step-ordered input ``xs`` (T, N, F), the validated call, the masks, the
    states ``S`` (T+1, N, P) and ``C`` (T+1, N, H), the gates (T, N, 4H) (torch's
    order, after their nonlinearities), tanh(c) and m = o tanh(c) (T, N, H)."""

    call: object
    xs: object
    steps: object
    S: object
    C: object
    gates: object
    tanh_c: object
    m: object


def lstm_projected(x, W_ih, W_hh, W_hr, b_ih=None, b_hh=None, h0=None, c0=None, *,
                   lengths=None, reverse=False):
    """LSTM with projection (torch's ``proj_size``): x (N, T, F), W_ih (F, 4H),
    W_hh (P, 4H), W_hr (H, P), b_ih/b_hh (4H,) or None, h0 (N, P), c0 (N, H) or None
    -> ``(y (N, T, P), h_n (N, P), c_n (N, H), cache)``."""
    call = prepare_projected("lstm_projected", x, W_ih, W_hh, W_hr, b_ih, b_hh, h0, c0,
                             lengths, reverse)
    xp = array_module(call.x, call.W_ih)
    xs = _to_steps(xp, call.x, call.reverse)
    n_steps, batch, features = xs.shape
    hidden, proj = call.sizes
    steps = _steps(xp, call.lengths, n_steps, call.reverse)
    gates = xp.matmul(xs.reshape(-1, features), call.W_ih).reshape(n_steps, batch, -1)
    for b in (call.b_ih, call.b_hh):
        if b is not None:
            gates += b
    S = xp.zeros((n_steps + 1, batch, proj), xs.dtype)
    C = xp.zeros((n_steps + 1, batch, hidden), xs.dtype)
    if call.h0 is not None:
        S[0] = call.h0
    if call.c0 is not None:
        C[0] = call.c0
    tanh_c, m = xp.empty_like(C[1:]), xp.empty_like(C[1:])
    product = xp.empty_like(C[0])
    for k in range(n_steps):
        a = gates[k]
        a += xp.matmul(S[k], call.W_hh)
        for block in (a[:, :2 * hidden], a[:, 3 * hidden:]):  # sigmoid = (tanh(a/2) + 1) / 2
            block *= 0.5
            xp.tanh(block, out=block)
            block *= 0.5
            block += 0.5
        xp.tanh(a[:, 2 * hidden:3 * hidden], out=a[:, 2 * hidden:3 * hidden])
        i, f, g, o = (a[:, j * hidden:(j + 1) * hidden] for j in range(4))
        xp.multiply(f, C[k], out=C[k + 1])
        C[k + 1] += xp.multiply(i, g, out=product)
        xp.tanh(C[k + 1], out=tanh_c[k])
        xp.multiply(o, tanh_c[k], out=m[k])
        xp.matmul(m[k], call.W_hr, out=S[k + 1])
        if steps.partial[k]:  # rows past their length keep their state
            xp.copyto(S[k + 1], S[k], where=steps.keep[k])
            xp.copyto(C[k + 1], C[k], where=steps.keep[k])
    out = S[1:] if steps.mask is None else xp.where(steps.mask, S[1:], 0)
    y = _from_steps(xp, out, call.reverse)
    cache = ProjectedCache("lstm_projected", call, xs, steps, S, C, gates, tanh_c, m)
    return y, S[-1].copy(), C[-1].copy(), cache


def lstm_projected_backward(dy, cache, dh_n=None, dc_n=None):
    """Gradients of :func:`lstm_projected`: dy (N, T, P) (None: zero), dh_n (N, P) and
    dc_n (N, H) or None -> ``(dx, dh0, dc0, dW_ih, dW_hh, dW_hr, db_ih, db_hh)``;
    dh0/dc0/db are None when not given (formulas in the module docstring)."""
    op = "lstm_projected_backward"
    cache = check_cache(op, cache, "lstm_projected", ProjectedCache)
    call, xs, steps, S, C, m = cache.call, cache.xs, cache.steps, cache.S, cache.C, cache.m
    n_steps, batch, features = xs.shape
    hidden, proj = call.sizes
    xp, dtype = array_module(xs), xs.dtype
    if dy is not None:
        dy = upstream_grad(op, dy, (batch, n_steps, proj), dtype)
    dh = xp.zeros((batch, proj), dtype) if dh_n is None else \
        state_grad(op, "dh_n", dh_n, (batch, proj), dtype).copy()
    dc = xp.zeros((batch, hidden), dtype) if dc_n is None else \
        state_grad(op, "dc_n", dc_n, (batch, hidden), dtype).copy()
    # the derivative factors of every step at once: dA = dc * [g i(1-i), c f(1-f),
    # i (1-g^2)] and dm * tanh(c) o(1-o); dc gets dm o (1 - tanh^2 c) (to_c)
    gates, tanh_c = cache.gates, cache.tanh_c
    i, f, g, o = (gates[..., j * hidden:(j + 1) * hidden] for j in range(4))
    dA = xp.empty_like(gates)
    dA[..., :hidden] = g * i * (1 - i)
    dA[..., hidden:2 * hidden] = C[:-1] * f * (1 - f)
    dA[..., 2 * hidden:3 * hidden] = i * (1 - g * g)
    dA[..., 3 * hidden:] = tanh_c * o * (1 - o)
    to_c = o * (1 - tanh_c * tanh_c)
    dH = xp.empty_like(S[1:])  # the gradient reaching each step's h, for dW_hr
    W_hr_t, W_hh_t = xp.ascontiguousarray(call.W_hr.T), xp.ascontiguousarray(call.W_hh.T)
    for k in reversed(range(n_steps)):
        keep = steps.mask[k] if steps.partial[k] else None
        if dy is not None:
            dh += dy[:, steps.time(k)] if keep is None else dy[:, steps.time(k)] * keep
        xp.multiply(dh, 1 if keep is None else keep, out=dH[k])  # padded rows: no gradient
        dm = xp.matmul(dH[k], W_hr_t)
        dc_step = dc + dm * to_c[k]
        if keep is not None:
            dc_step *= keep
        d = dA[k]
        for j in range(3):  # i, f, g are driven by dc, o by dm
            d[:, j * hidden:(j + 1) * hidden] *= dc_step
        d[:, 3 * hidden:] *= dm
        dc_prev, dh_prev = dc_step * f[k], xp.matmul(d, W_hh_t)
        if keep is not None:  # padded rows hand their state gradients on unchanged
            dc_prev, dh_prev = xp.where(keep, dc_prev, dc), xp.where(keep, dh_prev, dh)
        dc, dh = dc_prev, dh_prev
    dW_hr = xp.matmul(m.reshape(-1, hidden).T, dH.reshape(-1, proj))
    rows = dA.reshape(n_steps * batch, 4 * hidden)
    dW_ih = xs.reshape(-1, features).T @ rows
    dW_hh = S[:-1].reshape(-1, proj).T @ rows
    dx = _from_steps(xp, (rows @ call.W_ih.T).reshape(n_steps, batch, features), call.reverse)
    db = rows.sum(axis=0)
    return (dx, dh if call.h0 is not None else None, dc if call.c0 is not None else None,
            dW_ih, dW_hh, dW_hr, db if call.b_ih is not None else None,
            db.copy() if call.b_hh is not None else None)


from .samples import lstm_projection as _s  # noqa: E402

declare(lstm_projected, lstm_projected_backward, torch=_s.torch_lstm_projected,
        samples=_s.SAMPLES, grads=("x", "h0", "c0", "W_ih", "W_hh", "W_hr", "b_ih", "b_hh"))
__all__ = exports(__name__, globals())
