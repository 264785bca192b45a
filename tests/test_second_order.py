"""Second-order kernels (``ops.<op>_gradgrad``): the backward of each first backward.

For ``P = <q, dx>`` with ``dx = op_backward(dy, cache)``, ``<op>_gradgrad(q, dy, cache)``
gives ``dP/d dy`` and ``dP/dx`` (elementwise) or ``dP/dw`` (linear, convolutions). Each
is checked against its loop twin (float32 and float64, per-entry rounding bounds),
central finite differences of ``P`` (float64) and ``torch.autograd.grad`` of the first
backward built with ``create_graph=True`` (both dtypes, kinks and thresholds included).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close, assert_gradient_close, finite_max, numeric_gradient

from optional_torch import F, needs_torch, torch
from tolerances import assert_entries_close

DTYPES = [np.float32, np.float64]
ROUNDINGS = 8  # rounded operations in the longest f', f'' formula (tanh GELU's f'')

#: (case id, op name, kwargs, kinks: points where f' or f'' jumps): every declared
#: activation with a second-order kernel, at each of its declared samples
ACTIVATIONS = [("-".join([decl.name, *map(str, kwargs.values())]), decl.name, kwargs,
                decl.kinks(**kwargs))
               for decl in ops.declare.activations() if decl.gradgrad for kwargs in decl.samples]
IDS = [case[0] for case in ACTIVATIONS]


def _inputs(shape, dtype, kinks=(), seed=0):
    """(x, dy, q): x spread over [-5, 5] and kept 0.05 away from the kinks."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-5.0, 5.0, shape)
    for kink in kinks:
        x = np.where(np.abs(x - kink) < 0.05, kink + 0.1, x)
    return tuple(a.astype(dtype) for a in (x, rng.standard_normal(shape),
                                           rng.standard_normal(shape)))


def _celu_terms(x, alpha=1.0):
    """e^(x/a) with the rounding of x/a (relative |x/a| eps), over |a| in f''."""
    z = np.minimum(x, 0.0) / alpha
    curve = np.exp(z) * (1.0 + np.abs(z))
    return 1.0 + curve, curve / abs(alpha)


def _mish_terms(x):
    """f' = t + x s (1 - t^2), f'' = (1 - t^2) (2 s + x s (1 - s) - 2 x t s^2): 1 - t^2
    rounds like 1 + t^2."""
    s, t, ax = 1.0 / (1.0 + np.exp(-x)), np.tanh(np.logaddexp(0.0, x)), np.abs(x)
    wide = 1.0 + t * t
    return np.abs(t) + ax * s * wide, wide * (2.0 * s + ax * s * (1.0 + s) + 2.0 * ax * s * s)


def _silu_terms(x):
    """f' = s + x s (1 - s), f'' = s (1 - s) (2 + x (1 - 2 s)): 1 - s rounds like 1 + s."""
    s, ax = 1.0 / (1.0 + np.exp(-x)), np.abs(x)
    return s * (1.0 + ax * (1.0 + s)), s * (1.0 + s) * (2.0 + ax * (1.0 + 2.0 * s))


#: name -> (sizes of the terms of f', of f'') of the smooth activations not above.
SMOOTH_TERMS = {
    "silu": _silu_terms, "mish": _mish_terms, "celu": _celu_terms,
    "log_sigmoid": lambda x: (1.0 / (1.0 + np.exp(x)),  # torch's f'' rounds like s (1 + s)
                              (1.0 + 1.0 / (1.0 + np.exp(-x))) / (1.0 + np.exp(-x))),
    "softsign": lambda x: (1.0 / (1.0 + np.abs(x)) ** 2, 2.0 / (1.0 + np.abs(x)) ** 3),
    "tanhshrink": lambda x: (1.0 + np.tanh(x) ** 2,  # torch's f' = 1 - (1 - t^2)
                             2.0 * np.abs(np.tanh(x)) * (1.0 + np.tanh(x) ** 2)),
    "exponential": lambda x: (np.exp(x), np.exp(x)),
    "hardswish": lambda x: (1.0 + np.abs(x) / 3.0, np.where(np.abs(x) < 3.0, 1.0 / 3.0, 0.0)),
}


def _term_sizes(name, kwargs, x):
    """Per entry, the size of the terms of f'(x) and of f''(x) (float64): what their
    rounding errors scale with, e.g. 1 - y^2 has terms 1 and y^2."""
    x = np.asarray(x, np.float64)
    y = getattr(ops, name)(x, **kwargs)[0]
    one = np.ones_like(x)
    if name in ("elu", "selu"):
        curve = np.abs(getattr(ops, name + "_backward")(one, getattr(ops, name)(
            np.minimum(x, 0.0), **kwargs)[1]))
        return 1.0 + curve, curve
    if name == "gelu":
        xc = np.clip(x, -100.0, 100.0)
        pdf = np.exp(-0.5 * xc * xc) / math.sqrt(2.0 * math.pi)
        if kwargs.get("approximate", "none") == "none":
            return 1.0 + np.abs(xc) * pdf, pdf * (2.0 + xc * xc)
        c, k = math.sqrt(2.0 / math.pi), 0.044715
        u = c * (xc + k * xc ** 3)
        t, du = np.tanh(u), c * (1.0 + 3.0 * k * xc * xc)
        wide = (1.0 + t * t) * (1.0 + np.abs(u))  # 1 - t^2 and the rounding of u
        return 1.0 + np.abs(xc) * wide * du, wide * (du * (1.0 + np.abs(xc * t) * du)
                                                     + 3.0 * c * k * xc * xc)
    if name == "tanh":
        return 1.0 + y * y, 2.0 * np.abs(y) * (1.0 + y * y)
    if name == "sigmoid":
        return np.abs(y) * (1.0 + y), np.abs(y) * (1.0 + y) * (1.0 + 2.0 * y)
    if name == "softplus":
        beta = kwargs.get("beta", 1.0)
        s = 1.0 / (1.0 + np.exp(-np.clip(beta * x, -500, 500)))
        return one, abs(beta) * s * (1.0 + s)
    if name in SMOOTH_TERMS:
        return SMOOTH_TERMS[name](x, **kwargs)
    slope = getattr(ops, name + "_backward")(one, getattr(ops, name)(x, **kwargs)[1])
    return 1.0 + np.abs(slope), 0.0 * one  # piecewise linear: f'' = 0 exactly


def _assert_pair_close(actual, expected, name, kwargs, x, dy, q, what):
    first, second = _term_sizes(name, kwargs, x)
    q, dy = np.abs(np.asarray(q, np.float64)), np.abs(np.asarray(dy, np.float64))
    for got, want, size, part in zip(actual, expected, (q * first, q * dy * second),
                                     ("d_dy", "d_x")):
        assert got.dtype == x.dtype, f"{what} {part}: dtype {got.dtype}"
        assert_entries_close(got, want, dtype=x.dtype, terms=ROUNDINGS, scale=size,
                             what=f"{what} {part}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ACTIVATIONS, ids=IDS)
def test_activation_gradgrad_matches_its_loop_twin(case, dtype):
    _, name, kwargs, kinks = case
    x, dy, q = _inputs((4, 9), dtype, kinks)
    cache = getattr(ops, name)(x, **kwargs)[1]
    ours = getattr(ops, name + "_gradgrad")(q, dy, cache)
    loops = getattr(reference, name + "_gradgrad")(q, dy, cache)
    _assert_pair_close(ours, loops, name, kwargs, x, dy, q, f"{name} vs loops")


@pytest.mark.parametrize("case", ACTIVATIONS, ids=IDS)
def test_activation_gradgrad_matches_finite_differences(case):
    _, name, kwargs, kinks = case
    x, dy, q = _inputs((3, 5), np.float64, kinks, seed=1)
    forward, backward = getattr(ops, name), getattr(ops, name + "_backward")

    def first_backward_along_q():
        return np.sum(q * backward(dy, forward(x, **kwargs)[1]))

    d_dy, d_x = getattr(ops, name + "_gradgrad")(q, dy, forward(x, **kwargs)[1])
    for analytic, array, part in ((d_dy, dy, "d_dy"), (d_x, x, "d_x")):
        numeric, error = numeric_gradient(first_backward_along_q, array, with_error=True)
        assert_gradient_close(analytic, numeric, error, what=f"{name} {part}")


def _torch_activation(name, kwargs):
    """The declared torch counterpart of op ``name`` at ``kwargs``, on a tensor."""
    decl = ops.DECLARED[name]
    return lambda t: decl.torch(F, t, **kwargs)


def torch_gradgrad(function, x, dy, q):
    """(d_dy, d_x) of <q, dx> with dx = d<f(x), dy>/dx, by torch's double backward."""
    tx, tdy = (torch.tensor(a, requires_grad=True) for a in (x, dy))
    (dx,) = torch.autograd.grad(function(tx), tx, tdy, create_graph=True)
    grads = torch.autograd.grad(dx, (tdy, tx), torch.tensor(q), allow_unused=True)
    return [np.zeros_like(x) if g is None else g.detach().numpy() for g in grads]


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ACTIVATIONS, ids=IDS)
def test_activation_gradgrad_matches_torch_including_kinks(case, dtype):
    _, name, kwargs, kinks = case
    x, dy, q = _inputs((3, 8), dtype, kinks, seed=2)
    x[0, : len(kinks)] = kinks  # exactly at each kink: PyTorch's one-sided conventions
    cache = getattr(ops, name)(x, **kwargs)[1]
    ours = getattr(ops, name + "_gradgrad")(q, dy, cache)
    try:
        theirs = torch_gradgrad(_torch_activation(name, kwargs), x, dy, q)
    except RuntimeError as error:  # e.g. hardsigmoid: no double backward in torch
        if "not implemented" not in str(error):
            raise
        pytest.skip(f"torch: {error}")
    _assert_pair_close(ours, theirs, name, kwargs, x, dy, q, f"{name} vs torch")


@pytest.mark.parametrize("dtype", DTYPES)
def test_saturated_activations_stay_finite(dtype):
    x = np.array([-1e30, -200.0, -60.0, 60.0, 200.0, 1e30], dtype=dtype)
    ones = np.ones_like(x)
    for _, name, kwargs, _ in ACTIVATIONS:
        if name == "exponential":  # e^x itself: inf past the float's range, as torch
            continue
        d_dy, d_x = getattr(ops, name + "_gradgrad")(ones, ones, getattr(ops, name)(
            x, **kwargs)[1])
        assert np.all(np.isfinite(d_dy)) and np.all(np.isfinite(d_x)), name
        assert finite_max(d_x) <= 1.0, name  # every f'' has decayed (or is 0)


# ------------------------------------------------------------ linear ops
#: (op, x shape, w shape, kwargs): linear, convolutions (strided, padded, dilated,
#: grouped, depthwise) and transposed convolutions.
LINEAR_OPS = [
    ("linear", (2, 3, 5), (5, 4), {}),
    ("conv1d", (2, 7, 4), (3, 2, 6), {"stride": 2, "padding": 1, "groups": 2}),
    ("conv2d", (2, 6, 5, 3), (3, 2, 3, 4),
     {"stride": (2, 1), "padding": "same", "dilation": (1, 2)}),
    ("conv2d", (2, 5, 5, 3), (3, 3, 1, 6), {"padding": 1, "groups": 3}),  # depthwise
    ("conv_transpose1d", (2, 5, 4), (3, 3, 4), {"stride": 2, "output_padding": 1}),
    ("conv_transpose2d", (2, 4, 3, 4), (2, 3, 2, 4), {"stride": 2, "padding": 1, "groups": 2}),
    ("conv3d", (2, 4, 5, 3, 4), (2, 3, 2, 2, 6),
     {"stride": (1, 2, 1), "padding": "same", "groups": 2}),
    ("conv_transpose3d", (1, 3, 2, 3, 2), (2, 2, 3, 3, 2),
     {"stride": 2, "padding": (1, 0, 1), "output_padding": (1, 1, 0)}),
]
LINEAR_IDS = ["linear", "conv1d", "conv2d", "depthwise2d", "conv_transpose1d",
              "conv_transpose2d", "conv3d", "conv_transpose3d"]


def _linear_case(op, x_shape, w_shape, kwargs, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x, w = (rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape))
    y, cache = getattr(ops, op)(x, w, **kwargs)
    dy, q = (rng.standard_normal(s).astype(dtype) for s in (y.shape, x.shape))
    return x, w, dy, q, cache


def _linear_bounds(op, x, w, dy, q, kwargs):
    """[(terms, scale)] of d_dy and dw: the gradgrad on |q|, |w|, |dy| (the sum of the
    absolute terms of each entry) and on ones (how many terms each entry sums)."""
    gradgrad = getattr(ops, op + "_gradgrad")
    wide = [np.abs(np.asarray(a, np.float64)) for a in (x, w, dy, q)]
    sizes = gradgrad(wide[3], wide[2], getattr(ops, op)(wide[0], wide[1], **kwargs)[1])
    ones = [np.ones_like(a) for a in wide]
    counts = gradgrad(ones[3], ones[2], getattr(ops, op)(ones[0], ones[1], **kwargs)[1])
    return [(finite_max(c), finite_max(s)) for c, s in zip(counts, sizes)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", LINEAR_OPS, ids=LINEAR_IDS)
def test_linear_gradgrad_matches_its_loop_twin(case, dtype):
    op, x_shape, w_shape, kwargs = case
    x, w, dy, q, cache = _linear_case(op, x_shape, w_shape, kwargs, dtype)
    ours = getattr(ops, op + "_gradgrad")(q, dy, cache)
    loops = getattr(reference, op + "_gradgrad")(q, dy, cache)
    bounds = _linear_bounds(op, x, w, dy, q, kwargs)
    for got, want, (terms, scale), part in zip(ours, loops, bounds, ("d_dy", "dw")):
        assert got.dtype == dtype and got.shape == want.shape
        assert_close(got, want, dtype=dtype, terms=terms, scale=scale, what=f"{op} {part}")


@pytest.mark.parametrize("case", LINEAR_OPS, ids=LINEAR_IDS)
def test_linear_gradgrad_matches_finite_differences(case):
    """d_dy and dw against differences of <q, dx>; dx does not depend on x at all."""
    op, x_shape, w_shape, kwargs = case
    x, w, dy, q, cache = _linear_case(op, x_shape, w_shape, kwargs, np.float64, seed=3)
    forward, backward = getattr(ops, op), getattr(ops, op + "_backward")

    def first_backward_along_q():
        return np.sum(q * backward(dy, forward(x, w, **kwargs)[1])[0])

    d_dy, dw = getattr(ops, op + "_gradgrad")(q, dy, cache)
    picks = np.random.default_rng(4)
    for analytic, array, part in ((d_dy, dy, "d_dy"), (dw, w, "dw"),
                                  (np.zeros_like(x), x, "d_x")):
        chosen = picks.choice(array.size, min(array.size, 24), replace=False)
        numeric, error = numeric_gradient(first_backward_along_q, array, picks=chosen,
                                          with_error=True)
        assert_gradient_close(analytic.reshape(-1)[chosen], numeric.reshape(-1),
                              error.reshape(-1), what=f"{op} {part}")


# ----------------------------------------------------------------- errors
@pytest.mark.parametrize("module", [ops, reference], ids=["ops", "loops"])
def test_gradgrad_refuses_bad_caches_and_shapes(module):
    x = np.ones((2, 3))
    relu_cache, linear_cache = ops.relu(x)[1], ops.linear(x, np.ones((3, 4)))[1]
    with pytest.raises(TypeError, match=r"^relu_gradgrad: 'cache' must be the cache returned "
                                        r"by relu; received the cache of linear$"):
        module.relu_gradgrad(x, x, linear_cache)
    with pytest.raises(TypeError, match=r"^linear_gradgrad: 'cache' must be the cache "
                                        r"returned by linear; received None$"):
        module.linear_gradgrad(x, np.ones((2, 4)), None)
    with pytest.raises(ValueError, match=r"^tanh_gradgrad: 'q' must have the forward input's "
                                         r"shape \(2, 3\); received \(3, 2\)$"):
        module.tanh_gradgrad(np.ones((3, 2)), x, ops.tanh(x)[1])
    with pytest.raises(TypeError, match=r"^relu_gradgrad: 'q' must have the forward dtype "
                                        r"float64; received float32$"):
        module.relu_gradgrad(x.astype(np.float32), x, relu_cache)
    with pytest.raises(ValueError, match=r"^linear_gradgrad: 'dy' must have the forward "
                                         r"input's shape \(2, 4\)"):
        module.linear_gradgrad(x, np.ones((2, 5)), linear_cache)
    with pytest.raises(TypeError, match=r"^conv2d_gradgrad: 'cache' must be the cache "
                                        r"returned by conv2d; received the cache of relu$"):
        module.conv2d_gradgrad(x, x, relu_cache)
