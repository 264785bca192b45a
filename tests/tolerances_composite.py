"""Rounding tolerances (``terms`` and ``scale`` for ``handgrad.testing.tolerance``)
of composite computations: recurrences, attention, whole networks and optimizer
trajectories. The per-op families and the statistics bounds are in tolerances.py.
"""

from __future__ import annotations

import numpy as np

from handgrad import ops
from handgrad.layers import recurrent
from handgrad.testing import finite_max

from tolerances import _wide, condition_bounds, float64_twin


# ------------------------------------------------------------------ products
def product_scale(a, b):
    """Size of the terms of ``a @ b``: ``max(|a| @ |b|)`` (0.0 when empty)."""
    out = np.abs(np.asarray(a, np.float64)) @ np.abs(np.asarray(b, np.float64))
    return float(out.max()) if out.size else 0.0


# --------------------------------------------------------------- recurrences
def gate_gradients(cell, arrays, kwargs, grads_in):
    """dL/da_t, the gradient of every step's pre-activations (N, T, G*H), in float64:
    the kernel's own dx for an input widened by G*H zero features whose input weights
    are the identity (so a_t is unchanged and the extra features' gradient is dA_t)."""
    x, W_ih, *rest = [_wide(a) for a in arrays]
    width = W_ih.shape[1]
    x = np.concatenate([x, np.zeros((*x.shape[:2], width))], axis=-1)
    W_ih = np.concatenate([W_ih, np.eye(width)], axis=0)
    *_, cache = getattr(ops, cell)(x, W_ih, *rest, **kwargs)
    grads = [None if g is None else _wide(g) for g in grads_in]
    return getattr(ops, cell + "_backward")(grads[0], cache, *grads[1:])[0][..., -width:]


def recurrent_bounds(cell, arrays, kwargs, grads_in):
    """(terms, scale) for a recurrent op's outputs and for its gradients.

    Forward: each step sums F + H products and two biases into the pre-activations
    ``a_t``, and rounding errors ride the state through all T steps: ``T * (F + H + 2)``
    terms of the size of ``|x_t| |W_ih| + max|h| |W_hh| + |b|`` (or of the outputs,
    say a growing LSTM cell state, when larger). Backward: the state gradient runs
    back through T steps of G*H terms, and the weight gradients sum N*T of them:
    ``T * (G*H + N)`` terms the size of the products of ``dA`` (from
    :func:`gate_gradients`) with x, h and the weights.
    """
    x, W_ih, W_hh, b_ih, b_hh, h0, *c0 = [_wide(a) for a in arrays]
    n, steps, features = x.shape
    hidden, width = W_hh.shape
    y, *finals, _ = getattr(ops, cell)(x, W_ih, W_hh, b_ih, b_hh, h0, *c0, **kwargs)
    h_max = max(float(np.abs(y).max()), 0.0 if h0 is None else float(np.abs(h0).max()))
    bias = sum(0.0 if b is None else np.abs(b) for b in (b_ih, b_hh))
    pre = np.abs(x) @ np.abs(W_ih) + h_max * np.abs(W_hh).sum(axis=0) + bias
    forward = max(float(pre.max()), *(float(np.abs(f).max()) for f in [y, *finals]))
    if not grads_in:  # a forward only
        return (steps * (features + hidden + 2), forward), (0, {})

    dA = np.abs(gate_gradients(cell, arrays, kwargs, grads_in)).reshape(-1, width)
    xs = np.abs(x).reshape(-1, features)
    upstream = max(0.0 if g is None else float(np.abs(g).max()) for g in grads_in)
    column = dA.sum(axis=0)
    backward = {
        "dx": product_scale(dA, W_ih.T),
        "dh0": product_scale(dA, W_hh.T) + upstream,
        "dW_ih": product_scale(xs.T, dA),
        "dW_hh": h_max * float(column.max()),
        "db_ih": float(column.max()),
    }
    backward["dc0"], backward["db_hh"] = backward["dh0"], backward["db_ih"]
    return (steps * (features + hidden + 2), forward), (steps * (width + n), backward)


def stacked_recurrent_bounds(run):
    """:func:`recurrent_bounds` for a multi-layer (bidirectional) recurrent layer:
    ``run()`` does the layer's forward (and backward), and each one-layer op call it
    makes is recorded. Errors pass up (and back down) the stack, so the terms of the
    calls add up; each scale is the largest of any call."""
    calls, saved = {}, dict(recurrent._OPS)

    def recording(cell, forward, backward):
        def record_forward(*args, **kwargs):
            *outputs, cache = forward(*args, **kwargs)
            calls[id(cache)] = (cell, args, kwargs, [], cache)  # (kept alive: ids stay unique)
            return (*outputs, cache)

        def record_backward(dy, cache, *finals):
            calls[id(cache)][3].extend([dy, *finals])
            return backward(dy, cache, *finals)

        return record_forward, record_backward

    try:
        for cell, (forward, backward) in saved.items():
            recurrent._OPS[cell] = recording(cell, forward, backward)
        run()
    finally:
        recurrent._OPS.update(saved)
    f_terms, b_terms, f_scale, b_scales = 0, 0, 0.0, {}
    for cell, arrays, kwargs, grads_in, _ in calls.values():
        (ft, fs), (bt, bs) = recurrent_bounds(cell, arrays, kwargs, grads_in)
        f_terms, b_terms, f_scale = f_terms + ft, b_terms + bt, max(f_scale, fs)
        b_scales = {k: max(v, b_scales.get(k, 0.0)) for k, v in bs.items()}
    return (f_terms, f_scale), (b_terms, b_scales)


# ----------------------------------------------------------------- attention
def _abs(a):
    return np.abs(np.asarray(a, np.float64))


def attention_magnitudes(q, k, v, dout, p, scale=None, mask=None, drop=None):
    """Entry by entry, the size of the terms of scaled dot-product attention's output
    and gradients: ``{"out", "dq", "dk", "dv"}`` from |q|, |k|, |v|, |dout|, the
    softmax weights ``p`` and the dropout multiplier ``drop`` (None: no dropout).

    A score ``scale * q.k (+ mask)`` is off by about eps times its term size ``t``;
    softmax turns that into ``dp_j = p_j (ds_j - sum_i p_i ds_i)``, at most ``w_j = p_j
    ((1 - p_j) t_j + sum_(i != j) p_i t_i)`` eps: the weights ``p + w`` then carry the
    error of the scores into every result."""
    q, k, v, dout, p = (_abs(a) for a in (q, k, v, dout, p))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    t = scale * q @ np.swapaxes(k, -1, -2)
    if mask is not None and np.asarray(mask).dtype.kind == "f":
        t = t + np.where(np.isfinite(mask), _abs(mask), 0.0)
    w = p * ((1 - 2 * p) * t + np.sum(p * t, axis=-1, keepdims=True))
    m = 1.0 if drop is None else _abs(drop)
    weights = (p + w) * m
    dp = dout @ np.swapaxes(v, -1, -2) * m
    ds = (p + w) * (dp + np.sum(p * dp, axis=-1, keepdims=True))
    return {"out": weights @ v, "dv": np.swapaxes(weights, -1, -2) @ dout,
            "dq": scale * ds @ k, "dk": scale * np.swapaxes(ds, -1, -2) @ q}


def attention_bounds(q, k, v, dout, p, scale=None, mask=None, drop=None):
    """(terms, {"out", "dq", "dk", "dv": scale}) for scaled dot-product attention: a
    result sums E terms (scores), Tk (out), Ev (dp) and Tq (dk, dv)."""
    terms = q.shape[-1] + k.shape[-2] + v.shape[-1] + q.shape[-2]
    sizes = attention_magnitudes(q, k, v, dout, p, scale, mask, drop)
    return terms, {key: float(a.max()) if a.size else 0.0 for key, a in sizes.items()}


def mha_bounds(query, key, value, in_weight, in_bias, out_weight, out_bias, dy, **kwargs):
    """{name: (terms, scale)} for ``ops.multi_head_attention(..., **kwargs)``'s output
    ``y`` and its gradients, by the layer's names (query, key, value, W_q/W_k/W_v or
    W_in, b_..., W_out, b_out): :func:`condition_bounds` of the float64 forward and
    backward with respect to every input, weight, float mask and ``dy`` (a chain of
    projections, softmax and products, whose terms cancel too much for sizes taken
    stage by stage on absolute values)."""
    def wide(a):
        return None if a is None else tuple(wide(b) for b in a) if isinstance(a, tuple) \
            else np.array(a, np.float64)

    args = [wide(a) for a in (query, key, value, in_weight, in_bias, out_weight, out_bias)]
    masks = [k for k, v in kwargs.items() if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    kwargs = {**kwargs, **{k: wide(kwargs[k]) for k in masks}}
    dy = wide(dy)
    packed = not isinstance(in_weight, tuple)

    def run():
        y, cache = ops.multi_head_attention(*args, **kwargs)
        dq, dk, dv, dw_in, db_in, dw_out, db_out, *dbias_kv = (
            ops.multi_head_attention_backward(dy, cache))
        names = {"y": y, "query": dq, "key": dk, "value": dv, "W_out": dw_out, "b_out": db_out,
                 **dict(zip(("bias_k", "bias_v"), dbias_kv))}
        if packed:
            names.update(W_in=dw_in, b_in=db_in)
        else:
            names.update(zip(("W_q", "W_k", "W_v"), dw_in))
            names.update(zip(("b_q", "b_k", "b_v"), db_in or (None,) * 3))
        return names

    arrays = [dy, *(kwargs[k] for k in masks)]
    for a in args:
        arrays.extend(a if isinstance(a, tuple) else [a])
    bounds = condition_bounds(run, [a for a in arrays if a is not None])
    if "b_k" in bounds:  # 0 in exact arithmetic: its rounding is that of the dK it sums
        _, cache = ops.multi_head_attention(*args, **kwargs)
        n, h, t, d = cache.attention.k.shape  # the projected keys, head by head
        da = (dy @ args[5].T).reshape(n, -1, h, d).transpose(0, 2, 1, 3)
        dk = ops.scaled_dot_product_attention_backward(da, cache.attention)[1]
        terms, scale = bounds["b_k"]
        bounds["b_k"] = (max(terms, n * t), max(scale, float(np.abs(dk).sum(axis=(0, 2)).max())))
    return bounds


# ------------------------------------------------------------------- networks
# An elementwise layer rounds up to this many times (SELU: exp, - 1 and two products).
LAYER_ROUNDINGS = 4


def network_bounds(model, x, **inputs):
    """(terms, scale) for the output of a whole layer or model in inference mode on
    ``x`` (and keyword ``inputs``), from :func:`condition_bounds` of its float64 twin
    with respect to the inputs, every weight and every buffer: rounding in any layer
    acts like a relative perturbation of those (Higham: dot products and sums are
    backward stable), so the componentwise condition is the size of its terms. Each
    layer adds ``LAYER_ROUNDINGS`` terms (a chain of activations depends on one input
    but rounds at every link)."""
    twin = float64_twin(model)
    arrays = {"x": x, **inputs}
    wide = {k: np.array(v, np.float64) if np.asarray(v).dtype.kind == "f" else v
            for k, v in arrays.items()}
    first = wide.pop("x")
    perturbed = [a for a in (first, *wide.values(), *twin.named_parameters().values(),
                             *twin.named_buffers().values()) if a.dtype == np.float64]
    terms, scale = condition_bounds(
        lambda: {"y": twin.forward(first, training=False, **wide)}, perturbed)["y"]
    return terms + LAYER_ROUNDINGS * len(getattr(model, "layers", [model])), scale


# ----------------------------------------------------------------- optimizers
# Rounded operations per entry in the longest update formula (AMSGrad or centered
# RMSProp with weight decay and momentum): moments, bias corrections, root, division.
UPDATE_ROUNDINGS = 8


class Trajectory:
    """(terms, scale) for parameters after optimizer steps: each step rounds its update
    ``UPDATE_ROUNDINGS`` times and adds it in, so after k steps the parameters carry
    ``k * UPDATE_ROUNDINGS`` terms the size of ``max|p_0|`` plus the largest update of
    every step. Call :meth:`step` with the parameters after each step."""

    def __init__(self, params):
        self.last = [np.array(p, np.float64) for p in params]
        self.scale = max(finite_max(p) for p in self.last)
        self.terms = 0

    def step(self, params):
        now = [np.array(p, np.float64) for p in params]
        self.scale += max(finite_max(a - b) for a, b in zip(now, self.last))
        self.terms += UPDATE_ROUNDINGS
        self.last = now
        return self.terms, self.scale
