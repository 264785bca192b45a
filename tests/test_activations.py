"""Activations and softmax kernels: torch twins, finite differences, kinks, extremes, errors."""

import math

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.ops import special as _special
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient

from tolerances import activation_bounds, assert_entries_close

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float64, np.float32]
DTYPE_IDS = ["float64", "float32"]
# erf/erfc: Cody's rational functions take 8 Horner steps (numerator and denominator,
# positive terms), then exp and a division: each step rounds once relative to the result.
HORNER_STEPS = len(_special._MID_DEN)



def _case_id(decl, kwargs):
    return "-".join([decl.name, *(str(v) for v in kwargs.values())])


#: case id -> (declaration, forward keywords): every declared activation at each of its
#: declared samples (ops/declare.py), so a new activation is checked with no edit here.
CASES = {_case_id(decl, kwargs): (decl, kwargs)
         for decl in ops.declare.activations() for kwargs in decl.samples}
TWINS = CASES  # (the name the tests below use)
SHAPES = [(7,), (4, 6), (2, 3, 5)]
#: every kink of every case (relu/elu 0, hard_sigmoid +-3, softplus at its thresholds)
KINKS = sorted({k for decl, kwargs in CASES.values() for k in decl.kinks(**kwargs)}) + [-0.0]
AXIS_CASES = {name for name, (_, kwargs) in CASES.items() if "axis" in kwargs}


def _pair(name):
    """(forward, backward, keywords) for a case id."""
    decl, kwargs = CASES[name]
    return decl.forward, decl.backward, kwargs


def _inputs(shape, dtype, seed=0):
    """Normal values spread over [-6, 6] plus every kink point of the table."""
    x = 2.0 * np.random.default_rng(seed).standard_normal(shape)
    flat = x.reshape(-1)
    kinks = KINKS
    flat[: len(kinks)] = kinks[: flat.size]
    return x.astype(dtype)


def _run(name, x, dy, module=None):
    """(y, dx) of a case, by the kernels or by ``module``'s (the loop twins)."""
    forward, backward, kwargs = _pair(name)
    if module is not None:
        forward = getattr(module, forward.__name__)
        backward = getattr(module, backward.__name__)
    y, cache = forward(x, **kwargs)
    return y, backward(dy, cache)


def _torch_run(name, x, dy):
    decl, kwargs = CASES[name]
    t = torch.tensor(x, requires_grad=True)
    ty = decl.torch(F, t, **kwargs)
    ty.backward(torch.tensor(dy))
    dx = t.grad.numpy()
    if decl.name == "hard_sigmoid" and x.dtype == np.float64:
        # torch's float64 hardsigmoid backward multiplies by the float32 constant 1/6
        # (0.1666666716...); handgrad uses the exact 1/6.
        dx = dx * ((1.0 / 6.0) / float(np.float32(1.0 / 6.0)))
    return ty.detach().numpy(), dx


def _assert_matches(name, x, dy, ours, theirs):
    """(y, dx) against a reference's, within the rounding tolerance of the case."""
    decl, kwargs = CASES[name]
    bounds = activation_bounds(decl.name, x, dy, **kwargs)
    for what, a, b, (terms, scale) in zip(["forward", "dx"], ours, theirs, bounds):
        assert_close(a, b, dtype=x.dtype, terms=terms, scale=scale, what=f"{name} {what}")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", list(TWINS))
def test_matches_torch(name, dtype, shape):
    if name in AXIS_CASES and len(shape) < 2:
        shape = (4, 6)
    x = _inputs(shape, dtype)
    dy = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    y, dx = _run(name, x, dy)
    assert y.dtype == dtype and dx.dtype == dtype
    _assert_matches(name, x, dy, (y, dx), _torch_run(name, x, dy))


@pytest.mark.parametrize("name", [n for n, (d, _) in CASES.items() if d.elementwise])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_matches_loop_twin(name, dtype):
    x = _inputs((3, 5), dtype)
    dy = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    _assert_matches(name, x, dy, _run(name, x, dy), _run(name, x, dy, reference))


@pytest.mark.parametrize("name", list(TWINS))
def test_gradient_at_kinks_matches_torch_elementwise(name):
    x = np.array([*KINKS, 1.0, -1.0] + [0.5] * (len(KINKS) % 2))  # an even count
    dy = np.linspace(0.5, 1.2, x.size)
    if name in AXIS_CASES:
        x, dy = x.reshape(2, -1), dy.reshape(2, -1)
    _assert_matches(name, x, dy, _run(name, x, dy), _torch_run(name, x, dy))


def test_kink_conventions():
    x = np.array([0.0, -3.0, 3.0])
    dy = np.array([0.7, 0.7, 0.7])
    assert ops.relu_backward(dy, ops.relu(x)[1])[0] == 0.0
    slopes = [ops.leaky_relu_backward(dy, ops.leaky_relu(x, 0.2)[1])[0],
              ops.elu_backward(dy, ops.elu(x, 0.5)[1])[0]]
    assert_close(slopes, [0.7 * 0.2, 0.7 * 0.5], dtype=np.float64, what="slopes at 0")
    dx = ops.hard_sigmoid_backward(dy, ops.hard_sigmoid(x)[1])
    assert dx[1] == 0.0 and dx[2] == 0.0
    assert_close(dx[0], 0.7 / 6, dtype=np.float64, what="hard_sigmoid slope at 0")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_relu_backward_passes_nonfinite_gradients_where_torch_does(dtype):
    # relu_backward masks dy by bits: dy's NaN, infinities and -0 go through unchanged
    # where y > 0, and where y <= 0 (or y is NaN: torch's threshold_backward keeps dy
    # there, as NaN <= 0 is false) the result is exactly torch's
    x = np.array([1.0, 2.0, 3.0, 4.0, 0.0, -1.0, np.nan, -np.inf], dtype)
    dy = np.array([np.nan, -0.0, np.inf, -2.5, np.nan, np.inf, 1.5, -0.0], dtype)
    dx = ops.relu_backward(dy, ops.relu(x)[1])
    xt = torch.tensor(x, requires_grad=True)
    torch.relu(xt).backward(torch.tensor(dy))
    expected = xt.grad.numpy()
    assert dx.dtype == dtype
    np.testing.assert_array_equal(dx.view(np.uint8), expected.view(np.uint8))
    scalar = ops.relu_backward(dy[2, ...], ops.relu(x[2, ...])[1])  # 0-d arrays
    assert scalar.shape == () and scalar == np.inf
    strided = ops.relu_backward(dy[::2], ops.relu(x[::2])[1])  # a strided view of dy
    np.testing.assert_array_equal(np.ascontiguousarray(strided).view(np.uint8),
                                  np.ascontiguousarray(expected[::2]).view(np.uint8))


@pytest.mark.parametrize("name", list(TWINS))
def test_backward_matches_finite_differences(name):
    forward, _, kwargs = _pair(name)
    x = _inputs((3, 4), np.float64, seed=2)
    x = x + 0.01 * (np.abs(x - np.round(2 * x) / 2) < 0.01)  # clear of kinks (0, +-3, 1.5)
    dy = np.random.default_rng(3).standard_normal(x.shape)
    _, dx = _run(name, x, dy)
    numeric, fd_error = numeric_gradient(lambda: np.sum(forward(x, **kwargs)[0] * dy), x,
                                         with_error=True)
    assert_gradient_close(dx, numeric, fd_error, what=f"{name} vs finite differences")


def _strided(a):
    view = np.zeros((*a.shape[::-1], 2), dtype=a.dtype)[..., 1].T
    view[...] = a
    assert not view.flags.c_contiguous
    return view


@pytest.mark.parametrize("name", list(TWINS))
def test_non_contiguous_inputs_give_identical_results(name):
    x = _inputs((4, 6), np.float64)
    dy = np.random.default_rng(4).standard_normal(x.shape)
    y, dx = _run(name, x, dy)
    y2, dx2 = _run(name, _strided(x), _strided(dy))
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(dx, dx2)
    xt = np.ascontiguousarray(x.T).T  # a transposed (Fortran-order) view
    y3, dx3 = _run(name, xt, np.asfortranarray(dy))
    np.testing.assert_array_equal(y, y3)
    np.testing.assert_array_equal(dx, dx3)


def test_caches_hold_one_array_of_the_input_size():
    x = _inputs((8, 5), np.float32)
    for name, (forward, _) in ops.ACTIVATIONS.items():
        _, cache = forward(x)
        held = [v for v in vars(cache).values() if isinstance(v, np.ndarray)]
        limit = 0 if name == "identity" else x.nbytes
        assert sum(a.nbytes for a in held) == limit, name


def test_activation_table():
    declared = ops.declare.activations()
    assert set(ops.ACTIVATIONS) == {decl.name for decl in declared} | {
        variant for decl in declared for variant in decl.variants}
    assert {"relu", "gelu_tanh", "softmax"} <= set(ops.ACTIVATIONS)
    x = _inputs((3, 4), np.float64)
    forward, _ = ops.ACTIVATIONS["gelu_tanh"]
    np.testing.assert_array_equal(forward(x)[0], ops.gelu(x, approximate="tanh")[0])
    assert not np.array_equal(forward(x)[0], ops.gelu(x)[0])


# --- extreme values -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sigmoid_is_stable_for_huge_inputs(dtype):
    x = np.array([-1e4, -1000.0, -80.0, 0.0, 80.0, 1000.0, 1e4], dtype=dtype)
    y, cache = ops.sigmoid(x)  # warnings are errors: no overflow warning allowed
    dx = ops.sigmoid_backward(np.ones_like(x), cache)
    assert y.dtype == dtype and np.all(np.isfinite(y)) and np.all(np.isfinite(dx))
    assert y[0] == 0.0 and y[-1] == 1.0 and y[3] == 0.5
    assert dx[0] == 0.0 and dx[-1] == 0.0
    expected = [1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0 for v in x.astype(float)]
    # Full relative accuracy in both tails, for every entry.
    assert_entries_close(y, expected, dtype=dtype, what="sigmoid")
    y_t, dx_t = _torch_run("sigmoid", x, np.ones_like(x))
    assert_entries_close(y, y_t, dtype=dtype, what="sigmoid vs torch")
    assert_entries_close(dx, dx_t, dtype=dtype, what="sigmoid dx vs torch")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_softplus_is_stable_for_huge_inputs(dtype):
    x = np.array([-1e4, -100.0, -30.0, 0.0, 30.0, 100.0, 1e4], dtype=dtype)
    y, cache = ops.softplus(x, threshold=1e6)  # the log1p branch everywhere
    dx = ops.softplus_backward(np.ones_like(x), cache)
    assert y.dtype == dtype and dx.dtype == dtype
    xd = x.astype(float)
    expected = [max(v, 0.0) + math.log1p(math.exp(-abs(v))) for v in xd]
    slope = [1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v)) for v in xd]
    # Full relative accuracy down to the smallest normal number of the dtype.
    close = {"dtype": dtype, "floor": np.finfo(dtype).tiny}
    assert_entries_close(y, expected, what="softplus", **close)
    assert_entries_close(dx, slope, what="softplus dx", **close)
    y, cache = ops.softplus(x)  # torch's default threshold
    y_t, dx_t = _torch_run("softplus", x, np.ones_like(x))
    assert_entries_close(y, y_t, what="softplus vs torch", **close)
    assert_entries_close(ops.softplus_backward(np.ones_like(x), cache), dx_t,
                         what="softplus dx vs torch", **close)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["elu", "selu", "gelu", "gelu-tanh", "tanh"])
def test_saturating_activations_at_huge_inputs(name, dtype):
    big = 1e30
    x = np.array([-big, -1e4, 1e4, big], dtype=dtype)
    y, dx = _run(name, x, np.ones_like(x))
    assert y.dtype == dtype and np.all(np.isfinite(y)) and np.all(np.isfinite(dx))
    scale = ops.activations.SELU_SCALE if name == "selu" else 1.0
    low = {"elu": -1.0, "selu": -ops.activations.SELU_SCALE * ops.activations.SELU_ALPHA,
           "tanh": -1.0}.get(name, 0.0)
    assert_entries_close(y[:2], [low, low], dtype=dtype, what=f"{name} at -inf")
    if name == "tanh":
        np.testing.assert_array_equal(y[2:], [1.0, 1.0])
    else:
        assert_entries_close(y[2:], scale * x[2:].astype(float), dtype=dtype,
                             what=f"{name} at +inf")
    np.testing.assert_array_equal(dx[:2], [0.0, 0.0])
    expected_slope = 0.0 if name == "tanh" else scale
    assert_entries_close(dx[2:], [expected_slope] * 2, dtype=dtype, what=f"{name} slope")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_softmax_and_log_softmax_are_stable_at_1000(dtype):
    x = np.array([[1000.0, -1000.0, 0.0], [-1000.0, -1000.0, -999.0]], dtype=dtype)
    dy = np.array([[0.3, -1.1, 0.4], [0.9, 0.2, -0.5]], dtype=dtype)
    logp, cache = ops.log_softmax(x)
    dlog = ops.log_softmax_backward(dy, cache)
    p, cache = ops.softmax(x)
    dp = ops.softmax_backward(dy, cache)
    for a in (logp, dlog, p, dp):
        assert a.dtype == dtype and np.all(np.isfinite(a))
    assert_entries_close(logp[0], [0.0, -2000.0, -1000.0], dtype=dtype, what="log_softmax")
    assert_entries_close(p[0], [1.0, 0.0, 0.0], dtype=dtype, what="softmax")
    for name, ours in (("log_softmax", (logp, dlog)), ("softmax", (p, dp))):
        _assert_matches(name, x, dy, ours, _torch_run(name, x, dy))


def _softmax_reference(x, dy):
    """softmax, its dx, log_softmax and its dx along the last axis, computed with
    50 significant digits (mpmath) from the exact float inputs, rounded to float64."""
    mpmath = pytest.importorskip("mpmath")
    rows = []
    with mpmath.workdps(50):
        for xs, ds in zip(x.reshape(-1, x.shape[-1]), dy.reshape(-1, x.shape[-1])):
            xs, ds = [mpmath.mpf(float(v)) for v in xs], [mpmath.mpf(float(v)) for v in ds]
            exps = [mpmath.exp(v - max(xs)) for v in xs]
            p = [e / mpmath.fsum(exps) for e in exps]
            inner, total = mpmath.fsum(a * b for a, b in zip(p, ds)), mpmath.fsum(ds)
            rows.append([[float(v) for v in values] for values in (
                p, [a * (d - inner) for a, d in zip(p, ds)],
                [mpmath.log(a) for a in p], [d - a * total for a, d in zip(p, ds)])])
    return [np.array(part).reshape(x.shape) for part in zip(*rows)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_softmax_matches_a_high_precision_reference(dtype):
    """Nearly one-hot rows: torch's float64 softmax dx is off by 3e-9 relative to its
    largest entry here, handgrad's by 8e-10; both are within the rounding tolerance of
    the terms (which are far larger than the result), so each is checked against an
    exact reference rather than against the other."""
    x = _inputs((5, 7), np.float64)
    x[1:, 2] = [15.0, 25.0, 30.0, -20.0]  # one dominant logit a row
    x, dy = x.astype(dtype), np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    exact = _softmax_reference(x, dy)
    for name, truth in (("softmax", exact[:2]), ("log_softmax", exact[2:])):
        _assert_matches(name, x, dy, _run(name, x, dy), truth)
        _assert_matches(name, x, dy, _torch_run(name, x, dy), truth)


def test_exact_gelu_tail_is_accurate():
    # torch computes x (1 + erf(x / sqrt 2)) / 2 and loses all digits for x < -8;
    # handgrad uses erfc and keeps full relative accuracy: erfc's error (HORNER_STEPS
    # terms) plus the rounding of the argument x / sqrt 2, which erfc and exp(-x^2 / 2)
    # amplify by their condition number ~ x^2 in the tail.
    x = np.concatenate([np.linspace(-30.0, 10.0, 4001), [-37.0, 1e-300, -1e-300]])
    y, cache = ops.gelu(x)
    dx = ops.gelu_backward(np.ones_like(x), cache)
    phi = [0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x]
    pdf = [math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi) for v in x]
    y_ref = np.array([v * c for v, c in zip(x, phi)])
    dx_ref = np.array([c + v * d for v, c, d in zip(x, phi, pdf)])
    amplify = 1.0 + x * x
    close = {"dtype": np.float64, "terms": HORNER_STEPS, "floor": np.finfo(np.float64).tiny}
    assert_entries_close(y, y_ref, scale=np.abs(y_ref) * amplify, what="gelu", **close)
    sizes = (np.abs(phi) + np.abs(x * np.array(pdf))) * amplify
    assert_entries_close(dx, dx_ref, scale=sizes, what="gelu dx", **close)


# --- erf ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_erf_and_erfc_match_math_on_a_dense_grid(dtype):
    edges = [0.0, -0.0, 0.46875, 4.0, 26.5, 27.0]
    edges += [np.nextafter(e, s) for e in (0.46875, 4.0) for s in (0.0, 10.0)]
    x = np.concatenate([
        np.linspace(-30.0, 30.0, 120001),
        np.logspace(-30, 1.4, 2000), -np.logspace(-30, 1.4, 2000), edges,
    ]).astype(dtype)
    xd = x.astype(np.float64)
    erf, erfc = _special.erf(np, x), _special.erfc(np, x)
    assert erf.dtype == dtype and erfc.dtype == dtype
    erf_ref = np.array([math.erf(v) for v in xd])
    erfc_ref = np.array([math.erfc(v) for v in xd])
    for what, ours, ref in (("erf", erf, erf_ref), ("erfc", erfc, erfc_ref)):
        assert_entries_close(ours, ref, dtype=dtype, terms=HORNER_STEPS,
                             floor=np.finfo(dtype).tiny, what=what)


def test_erf_special_values():
    x = np.array([np.inf, -np.inf, 1e300, -1e300, 1e-300, np.nan])
    erf, erfc = _special.erf(np, x), _special.erfc(np, x)
    np.testing.assert_array_equal(erf[:4], [1.0, -1.0, 1.0, -1.0])
    np.testing.assert_array_equal(erfc[:4], [0.0, 2.0, 0.0, 2.0])
    assert_entries_close(erf[4], 2e-300 / math.sqrt(math.pi), dtype=np.float64,
                         what="erf(1e-300)")
    assert erfc[4] == 1.0
    assert np.isnan(erf[5]) and np.isnan(erfc[5])


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ops.ACTIVATIONS))
def test_bad_inputs_and_caches(name):
    forward, backward = ops.ACTIVATIONS[name]
    with pytest.raises(TypeError, match=r"'x' must be an array"):
        forward("not an array")
    with pytest.raises(TypeError, match=r"'x' must have dtype float32 or float64"):
        forward(np.arange(6).reshape(2, 3))
    x = np.ones((2, 3))
    _, cache = forward(x)
    with pytest.raises(ValueError, match=r"_backward: 'dy' must have the forward output's shape"):
        backward(np.ones((3, 2)), cache)
    with pytest.raises(TypeError, match=r"_backward: 'dy' must have the forward dtype float64"):
        backward(np.ones((2, 3), np.float32), cache)
    with pytest.raises(TypeError, match=r"_backward: 'cache' must be the cache returned by"):
        backward(np.ones((2, 3)), None)
    other = "relu" if name != "relu" else "tanh"
    with pytest.raises(TypeError, match=r"'cache' must be the cache returned by"):
        backward(np.ones((2, 3)), ops.ACTIVATIONS[other][0](x)[1])


@pytest.mark.parametrize("call, error, message", [
    (lambda x: ops.leaky_relu(x, "0.1"), TypeError, r"leaky_relu: 'negative_slope' must be a"),
    (lambda x: ops.leaky_relu(x, True), TypeError, r"leaky_relu: 'negative_slope'"),
    (lambda x: ops.elu(x, float("nan")), ValueError, r"elu: 'alpha' must be a finite"),
    (lambda x: ops.softplus(x, beta=0), ValueError, r"softplus: 'beta' must be nonzero"),
    (lambda x: ops.softplus(x, threshold=None), TypeError, r"softplus: 'threshold'"),
    (lambda x: ops.gelu(x, approximate="fast"), ValueError,
     r"gelu: 'approximate' must be one of 'none', 'tanh'; received 'fast'"),
    (lambda x: ops.softmax(x, axis=2), ValueError,
     r"softmax: 'axis' must be in \[-2, 2\) for a 2-D input; received 2"),
    (lambda x: ops.log_softmax(x, axis=1.0), TypeError, r"log_softmax: 'axis' must be an int"),
])
def test_bad_hyper_parameters(call, error, message):
    with pytest.raises(error, match=message):
        call(np.ones((2, 3)))
