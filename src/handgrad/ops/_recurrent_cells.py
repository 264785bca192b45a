"""The time loops of the recurrent kernels (see :mod:`handgrad.ops.recurrent` for the math).

Layouts. Everything is in *step order* and time-major: ``xs`` (T, N, F) holds the input
in the order the cell reads it (reversed in time for ``reverse=True``), ``S`` (T+1, N, H)
the hidden states, ``S[0] = h0`` and ``S[k+1]`` the state after step ``k``. Gate values
and gradients are *gate-major*, (G, T, N, H), in the cell's internal gate order
``ORDERS[cell]`` (for the LSTM o, i, f, g: the three sigmoid gates are one block, and
so are the three gates driven by dc), so every elementwise operation on a gate reads
contiguous memory; weights are rearranged to (G, F, H) to match (:func:`gate_major`)
and the weight gradients back to torch's gate order (:func:`gate_minor`).

Recurrent dropout. ``call.recurrent_mask`` (N, H) (or None) multiplies the state that
feeds the gates, ``a_k = ... + (h_{k-1} m) W_hh``; the backward multiplies that path's
gradient, ``dh_{k-1} = (dA_k W_hh^T) m``, by it (the GRU's direct path z h_{k-1} is not
masked, as Keras's). ``S`` keeps the unmasked states.

Padded batches. A row whose sequence is over at step ``k`` (``keep[k]``) copies its
state forward, so the backward loop passes its state gradients through unchanged and
gives it no gate gradient; ``partial[k]`` says whether step ``k`` has such rows at all.

Speed. ``x @ W_ih`` for all steps is one (batched) GEMM before the loop. The backward
computes the per-step derivative factors (products of gate values) for all steps at
once, in one buffer that its loop then scales in place into the pre-activation
gradients: each step does one small GEMM and a few elementwise products on (N, H)
blocks and allocates nothing large. Sigmoids are ``0.5 * tanh(0.5 * a) + 0.5``, with
the 0.5 folded into the sigmoid gates' weights (an exact scaling), so a step takes a
single ``tanh`` over all its gates.
"""

from __future__ import annotations

from typing import NamedTuple


class Steps(NamedTuple):
    """Per-step masks: ``mask``/``keep`` (T, N, 1) bool (None without lengths),
    ``partial``, a tuple of T bools (True where some rows are past their length), and
    ``reverse`` (step k reads time T-1-k)."""

    mask: object
    keep: object
    partial: tuple
    reverse: bool

    def time(self, k):
        """The time index read at step ``k``."""
        return len(self.partial) - 1 - k if self.reverse else k


ORDERS = {"rnn": (0,), "lstm": (3, 0, 1, 2), "gru": (0, 1, 2)}  # internal -> torch block


def gate_major(xp, W, order):
    """(R, G*H), gate blocks in torch's order -> (G, R, H) in the internal ``order``."""
    rows, width = W.shape
    blocks = W.reshape(rows, len(order), width // len(order)).transpose(1, 0, 2)
    return xp.ascontiguousarray(blocks[list(order)])


def gate_minor(xp, W, order):
    """The inverse of :func:`gate_major`: (G, R, H) -> (R, G*H) in torch's order."""
    count, rows, hidden = W.shape
    out = xp.empty((rows, count, hidden), dtype=W.dtype)
    out[:, list(order)] = W.transpose(1, 0, 2)
    return out.reshape(rows, count * hidden)


def _sigmoid_scaled(xp, W, order, n_sigmoid):
    """gate_major(W) with the first ``n_sigmoid`` (sigmoid) gates halved (exact)."""
    W = gate_major(xp, W, order)
    W[:n_sigmoid] *= 0.5
    return W


def _project(xp, xs, W, bias):
    """x @ W (+ bias) for all steps: xs (T, N, F), W (G, F, H), bias (G, 1, H) or None
    -> (G, T, N, H), one (batched) GEMM."""
    steps, n, features = xs.shape
    out = xp.matmul(xs.reshape(steps * n, features), W)
    if bias is not None:
        out += bias
    return out.reshape(W.shape[0], steps, n, W.shape[2])


def _states(xp, xs, hidden, h0):
    states = xp.empty((xs.shape[0] + 1, xs.shape[1], hidden), dtype=xs.dtype)
    if h0 is None:
        states[0] = 0
    else:
        states[0] = h0
    return states


def _sum_bias(b_ih, b_hh):
    if b_ih is None:
        return b_hh
    return b_ih if b_hh is None else b_ih + b_hh


def _hold(xp, steps, k, *arrays):
    """Rows past their length at step ``k`` keep their state: a[k+1] = a[k] there."""
    if steps.partial[k]:
        for a in arrays:
            xp.copyto(a[k + 1], a[k], where=steps.keep[k])


def _pass_through(xp, steps, k, new, old):
    """Rows past their length at step ``k`` hand their state gradient on unchanged."""
    if steps.partial[k]:
        xp.copyto(new, old, where=steps.keep[k])


def _masked(xp, steps, gate, *coefficients):
    """Zero the coefficients (in place) on padded steps; return ``gate``, the factor that
    carries the state's gradient back one step, with 1 on padded steps (the state passes
    through unchanged)."""
    if steps.mask is None:
        return gate
    for coefficient in coefficients:
        coefficient *= steps.mask
    return xp.where(steps.mask, gate, 1)


def _scratch(xp, dh, coef):
    """Buffers of the backward loop: two shaped like dh, one like a step's gates."""
    return xp.empty_like(dh), xp.empty_like(dh), xp.empty_like(coef[:, 0])


def _start(xp, grad, like):
    """A private copy of an optional final-state gradient (zeros when None)."""
    return xp.zeros_like(like) if grad is None else grad.copy()


def _add_dy(xp, dh, dy, steps, k):
    """dh += dy at step ``k`` (``dy`` batch-major (N, T, H), or None for zero), leaving
    out the rows past their length."""
    if dy is None:
        return
    dy_k = dy[:, steps.time(k)]
    if steps.partial[k]:
        dy_k = xp.where(steps.mask[k], dy_k, 0)
    dh += dy_k


def _feed(xp, h, mask, out):
    """The state that feeds the gates: ``h``, or ``h * mask`` written into ``out``."""
    return h if mask is None else xp.multiply(h, mask, out=out)


def _recurrent_grad(xp, d_gates, W_t, out, gate_out):
    """out = sum over gates of d_gates[j] @ W_t[j]: d_gates (G, N, H), W_t (G, H, H)."""
    xp.matmul(d_gates, W_t, out=gate_out)
    xp.sum(gate_out, axis=0, out=out)
    return out


def _transposed_blocks(xp, W, order):
    """gate_major(W) with each (H, H) block transposed, for dh_prev = dA W_hh^T."""
    return xp.ascontiguousarray(gate_major(xp, W, order).transpose(0, 2, 1))


# ------------------------------------------------------------------------------- RNN
def rnn_forward(xp, xs, call, steps):
    """h_k = act(x_k W_ih + b_ih + h_{k-1} W_hh + b_hh). Saves ``S``."""
    S = _states(xp, xs, call.hidden, call.h0)
    bias = _sum_bias(call.b_ih, call.b_hh)
    pre = _project(xp, xs, call.W_ih[None], None if bias is None else bias[None, None])[0]
    relu, fed = call.nonlinearity == "relu", xp.empty_like(S[0])
    for k in range(xs.shape[0]):
        h = S[k + 1]
        xp.matmul(_feed(xp, S[k], call.recurrent_mask, fed), call.W_hh, out=h)
        h += pre[k]
        if relu:
            xp.maximum(h, 0, out=h)
        else:
            xp.tanh(h, out=h)
        _hold(xp, steps, k, S)
    return {"S": S}


def rnn_backward(xp, saved, W_hh, nonlinearity, dy, dh, steps, mask=None):
    """Returns (dA, dA, dh0) with dA (1, T, N, H) the pre-activation gradients:
    dA_k = (dy_k + dh_k) act'(a_k); dh_{k-1} = (dA_k W_hh^T) mask."""
    out = saved["S"][1:]
    if nonlinearity == "relu":
        grad = (out > 0).astype(out.dtype)
    else:
        grad = out * out
        xp.subtract(1, grad, out=grad)
    if steps.mask is not None:
        grad *= steps.mask
    W_t = xp.ascontiguousarray(W_hh.T)
    dh, spare = _start(xp, dh, out[0]), xp.empty_like(out[0])
    for k in reversed(range(out.shape[0])):
        _add_dy(xp, dh, dy, steps, k)
        grad[k] *= dh
        xp.matmul(grad[k], W_t, out=spare)
        if mask is not None:
            spare *= mask
        _pass_through(xp, steps, k, spare, dh)
        dh, spare = spare, dh
    return grad[None], grad[None], dh


# ------------------------------------------------------------------------------ LSTM
def lstm_forward(xp, xs, call, steps):
    """i, f, g, o = gates(x_k W_ih + b_ih + h W_hh + b_hh); c = f c + i g; h = o tanh(c).

    Saves the gate values (4, T, N, H) (order o, i, f, g), ``S`` and ``C`` (T+1, N, H)
    and tanh(c) (T, N, H).
    """
    order, hidden = ORDERS["lstm"], call.hidden
    bias = _sum_bias(call.b_ih, call.b_hh)
    if bias is not None:
        bias = _sigmoid_scaled(xp, bias[None], order, 3)
    gates = _project(xp, xs, _sigmoid_scaled(xp, call.W_ih, order, 3), bias)
    W_hh = _sigmoid_scaled(xp, call.W_hh, order, 3)
    S = _states(xp, xs, hidden, call.h0)
    C = _states(xp, xs, hidden, call.c0)
    tanh_c = xp.empty_like(S[1:])
    recur, product, fed = xp.empty_like(gates[:, 0]), xp.empty_like(S[0]), xp.empty_like(S[0])
    for k in range(xs.shape[0]):
        g = gates[:, k]
        g += xp.matmul(_feed(xp, S[k], call.recurrent_mask, fed), W_hh, out=recur)
        xp.tanh(g, out=g)
        sigmoid = g[:3]  # sigmoid(a) = 0.5 tanh(a / 2) + 0.5
        sigmoid *= 0.5
        sigmoid += 0.5
        o, i, f, cand = g
        xp.multiply(f, C[k], out=C[k + 1])
        C[k + 1] += xp.multiply(i, cand, out=product)
        xp.tanh(C[k + 1], out=tanh_c[k])
        xp.multiply(o, tanh_c[k], out=S[k + 1])
        _hold(xp, steps, k, S, C)
    return {"gates": gates, "S": S, "C": C, "tanh_c": tanh_c}


def lstm_backward(xp, saved, W_hh, dy, dh, dc, steps, mask=None):
    """Returns (dA, dA, dh0, dc0) with dA (4, T, N, H) the gate pre-activation gradients.

    dc += dh o (1 - tanh(c)^2); dA_i = dc g i (1-i); dA_f = dc c_prev f (1-f);
    dA_g = dc i (1-g^2); dA_o = dh tanh(c) o (1-o); dc_prev = dc f;
    dh_prev = (dA W_hh^T) mask.
    """
    gates, C, tanh_c = saved["gates"], saved["C"], saved["tanh_c"]
    o, i, f, cand = gates
    T = tanh_c.shape[0]
    coef = xp.empty_like(gates)  # becomes dA in the loop
    for block, gate, other in ((0, o, tanh_c), (1, i, cand), (2, f, C[:-1])):
        xp.subtract(1, gate, out=coef[block])
        coef[block] *= gate
        coef[block] *= other
    xp.multiply(cand, cand, out=coef[3])
    xp.subtract(1, coef[3], out=coef[3])
    coef[3] *= i
    to_c = xp.multiply(tanh_c, tanh_c)
    xp.subtract(1, to_c, out=to_c)
    to_c *= o
    forget = _masked(xp, steps, f, coef, to_c)
    W_t = _transposed_blocks(xp, W_hh, ORDERS["lstm"])
    dh, dc = _start(xp, dh, tanh_c[0]), _start(xp, dc, tanh_c[0])
    spare, product, gate_out = _scratch(xp, dh, coef)
    for k in reversed(range(T)):
        _add_dy(xp, dh, dy, steps, k)
        dc += xp.multiply(dh, to_c[k], out=product)
        g = coef[:, k]
        g[1:] *= dc  # i, f, g are driven by dc, o by dh
        g[0] *= dh
        dc *= forget[k]
        _recurrent_grad(xp, g, W_t, spare, gate_out)
        if mask is not None:
            spare *= mask
        _pass_through(xp, steps, k, spare, dh)
        dh, spare = spare, dh
    return coef, coef, dh, dc


# ------------------------------------------------------------------------------- GRU
def gru_forward(xp, xs, call, steps):
    """r, z = sigmoid(x W_ih + b_ih + h W_hh + b_hh) (their blocks);
    n = tanh(x W_in + b_in + r (h W_hn + b_hn)); h' = (1 - z) n + z h = n + z (h - n).

    Saves the gate values r, z, n (3, T, N, H), h W_hn + b_hn (T, N, H) and ``S``.
    """
    order, hidden = ORDERS["gru"], call.hidden
    bias = call.b_ih
    b_hn = None
    if call.b_hh is not None:  # b_hr, b_hz add to the input side; b_hn stays inside r (.)
        b_hn = call.b_hh[2 * hidden:]
        bias = _sum_bias(bias, xp.concatenate([call.b_hh[:2 * hidden], xp.zeros_like(b_hn)]))
    if bias is not None:
        bias = _sigmoid_scaled(xp, bias[None], order, 2)
    gates = _project(xp, xs, _sigmoid_scaled(xp, call.W_ih, order, 2), bias)
    W_hh = _sigmoid_scaled(xp, call.W_hh, order, 2)
    S = _states(xp, xs, hidden, call.h0)
    hw_n = xp.empty_like(S[1:])
    recur, product, fed = xp.empty_like(gates[:, 0]), xp.empty_like(S[0]), xp.empty_like(S[0])
    for k in range(xs.shape[0]):
        g = gates[:, k]
        hw = xp.matmul(_feed(xp, S[k], call.recurrent_mask, fed), W_hh, out=recur)
        rz = g[:2]
        rz += hw[:2]
        xp.tanh(rz, out=rz)
        rz *= 0.5
        rz += 0.5
        if b_hn is None:
            hw_n[k] = hw[2]
        else:
            xp.add(hw[2], b_hn, out=hw_n[k])
        n = g[2]
        n += xp.multiply(rz[0], hw_n[k], out=product)
        xp.tanh(n, out=n)
        h = S[k + 1]
        xp.subtract(S[k], n, out=h)
        h *= rz[1]
        h += n
        _hold(xp, steps, k, S)
    return {"gates": gates, "hw_n": hw_n, "S": S}


def gru_backward(xp, saved, W_hh, dy, dh, steps, mask=None):
    """Returns (dA_x, dA_h, dh0): gradients (3, T, N, H) of x W_ih + b_ih and of
    h W_hh + b_hh.

    dA_n = dh (1 - z)(1 - n^2); dA_h = [dA_n (h W_hn + b_hn) r (1-r), dh (h - n) z (1-z),
    dA_n r]; dA_x = [dA_h_r, dA_h_z, dA_n]; dh_prev = dh z + (dA_h W_hh^T) mask.
    """
    gates, S, hw_n = saved["gates"], saved["S"], saved["hw_n"]
    r, z, n = gates
    T = r.shape[0]
    coef = xp.empty_like(gates)  # becomes dA_h in the loop
    d_input = xp.empty_like(gates)  # its n block becomes dA_n in the loop
    to_n = d_input[2]
    xp.subtract(1, z, out=to_n)
    tmp = xp.multiply(n, n)
    xp.subtract(1, tmp, out=tmp)
    to_n *= tmp
    xp.multiply(to_n, r, out=coef[2])
    xp.subtract(1, r, out=coef[0])
    coef[0] *= hw_n
    coef[0] *= coef[2]
    xp.subtract(1, z, out=coef[1])
    coef[1] *= z
    xp.subtract(S[:-1], n, out=tmp)
    coef[1] *= tmp
    carry = _masked(xp, steps, z, coef, to_n)
    W_t = _transposed_blocks(xp, W_hh, ORDERS["gru"])
    dh = _start(xp, dh, r[0])
    spare, product, gate_out = _scratch(xp, dh, coef)
    for k in reversed(range(T)):
        _add_dy(xp, dh, dy, steps, k)
        g = coef[:, k]
        g *= dh
        to_n[k] *= dh
        _recurrent_grad(xp, g, W_t, spare, gate_out)
        if mask is not None:
            spare *= mask
        spare += xp.multiply(dh, carry[k], out=product)
        dh, spare = spare, dh
    d_input[:2] = coef[:2]
    return d_input, coef, dh
