"""Per-family scale and term counts for the rounding tolerances of the suite.

``handgrad.testing.tolerance`` bounds the error of a value computed from ``terms``
rounded terms of total size ``scale``. These helpers give ``terms`` and ``scale``
for each op family, in one place, so the test files do not each re-derive them.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from handgrad import ops
from handgrad.testing import assert_close, finite_max, tolerance


def _grads(grads):
    return grads if isinstance(grads, tuple) else (grads,)


# ------------------------------------------------- convolution, linear, pooling
def _sizes(op, inputs, dy, kwargs):
    """max of the output and of each gradient of ``ops.<op>`` (None where absent)."""
    y, cache = getattr(ops, op)(*inputs, **kwargs)
    grads = _grads(getattr(ops, op + "_backward")(dy, cache))
    return [finite_max(y)] + [None if g is None else finite_max(g) for g in grads]


def linear_op_bounds(op, arrays, dy, kwargs=None, terms=None):
    """[(terms, scale)] for the output and each gradient (None where an input is
    absent) of an op linear in each input: convolutions, ``linear``, average pooling.

    ``scale``: the op on ``|inputs|`` and its backward on ``|dy|``, i.e. the sum of the
    absolute terms of each output. ``terms``: the same on ones, i.e. how many products
    each output sums (or the ``terms`` given, where ones do not count, as in averages).
    """
    kwargs = kwargs or {}
    wide = [_wide(a) for a in arrays]
    scales = _sizes(op, [None if a is None else np.abs(a) for a in wide],
                    np.abs(_wide(dy)), kwargs)
    if terms is None:
        counts = _sizes(op, [None if a is None else np.ones_like(a) for a in wide],
                        np.ones(np.shape(dy)), kwargs)
    else:
        counts = [terms] * len(scales)
    return [None if s is None else (c, s) for c, s in zip(counts, scales)]


def selection_bounds(op, arrays, dy, kwargs=None):
    """[(terms, scale)] for max pooling: the forward copies one input (one term of the
    output's size); the backward sends each dy to its window's maximum and sums where
    windows overlap, so its counts and sizes are the backward of ones and of ``|dy|``
    through the real cache (the winners)."""
    kwargs = kwargs or {}
    y, cache = getattr(ops, op)(*[_wide(a) for a in arrays], **kwargs)
    backward = getattr(ops, op + "_backward")
    counts = backward(np.ones(np.shape(dy)), cache)
    sizes = backward(np.abs(_wide(dy)), cache)
    return [(1, finite_max(y)), (finite_max(counts), finite_max(sizes))]


def op_bounds(op, arrays, dy, kwargs=None):
    """[(terms, scale)] for the output and each gradient of a convolution or pooling op
    of the op table: an average sums its window (or every position), then divides."""
    kwargs = kwargs or {}
    if op.startswith("max_pool") or op == "global_max_pool":
        return selection_bounds(op, arrays, dy, kwargs)
    if op.startswith("avg_pool"):
        window = math.prod(np.broadcast_to(kwargs["kernel_size"], arrays[0].ndim - 2))
        return linear_op_bounds(op, arrays, dy, kwargs, terms=window + 1)
    if op == "interpolate":  # linear in x; each output sums up to 4 taps per axis (cubic)
        taps = 4 ** (np.ndim(arrays[0]) - 2)
        return [(c + taps, s) for c, s in linear_op_bounds(op, arrays, dy, kwargs)]
    if op == "global_avg_pool":
        positions = math.prod(np.shape(arrays[0])[1:-1])
        return linear_op_bounds(op, arrays, dy, kwargs, terms=positions + 1)
    return linear_op_bounds(op, arrays, dy, kwargs)


# ---------------------------------------------------------- entry by entry
def assert_entries_close(actual, expected, *, dtype, terms=1, scale=None, factor=8.0,
                         floor=0.0, what=""):
    """Like ``handgrad.testing.assert_close``, but each entry within ``tolerance(dtype,
    terms, scale[i], factor) + floor`` of its own expected value, ``scale`` defaulting
    to ``|expected|``: full relative accuracy, into the tails of elementwise functions.
    ``floor`` is for results below ``finfo(dtype).tiny``, where ``dtype`` has no
    relative precision left. Equal infinities (and NaNs) count as equal."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape} != expected {expected.shape}")
    scale = np.abs(expected) if scale is None else np.asarray(scale, np.float64)
    bound = np.broadcast_to(tolerance(dtype, terms, 1.0, factor) * scale + floor,
                            expected.shape)
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    with np.errstate(invalid="ignore"):
        bad = ~same & ~(np.abs(actual - expected) <= bound)
    if np.any(bad):
        i = np.flatnonzero(bad)[0]
        raise AssertionError(
            f"{what or 'values'}: {np.count_nonzero(bad)} entries beyond {factor:g} * "
            f"eps({np.dtype(dtype).name}) * sqrt({terms}) * scale; first at flat index {i}: "
            f"{actual.flat[i]!r} != {expected.flat[i]!r} (allowed {bound.flat[i]:.3e})")


# ------------------------------------------------------- activations, softmax
def _softmax_bounds(name, x, y, dy, axis):
    """softmax: y = exp(x - m) / sum, whose exponent carries the rounding of x - m;
    dx = y (dy - sum(y dy)). log_softmax: y = (x - m) - log(sum);
    dx = dy - p sum(dy). Each output sums the ``n`` terms along the axis."""
    n = x.shape[axis]
    shift = np.abs(x - x.max(axis=axis, keepdims=True))
    if name == "softmax":
        forward = finite_max(y * (1.0 + shift))
        backward = finite_max(y * (dy + np.sum(y * dy, axis=axis, keepdims=True)))
    else:
        forward = finite_max(shift + np.abs(y + shift))
        backward = finite_max(dy + np.exp(y) * np.sum(dy, axis=axis, keepdims=True))
    return (n, forward), (n, backward)


def activation_bounds(name, x, dy, **kwargs):
    """((terms, scale) of the forward, (terms, scale) of the backward) for
    ``ops.ACTIVATIONS[name]`` at ``x`` with upstream ``dy``.

    An elementwise activation's forward evaluates terms of the size of its input or
    output (``x Phi(x)``, ``x (1 + tanh u) / 2``): ``max(|x|, |y|)``. Its backward
    ``dy f'(x)`` sums terms of the size of ``1``, ``f'`` and ``y`` (``1 - y^2``,
    ``(1 - y) y``, ``y + alpha``), times ``|dy|``; for the tanh GELU also
    ``(x / 2) (1 - t^2) u'``, where ``1 - t^2`` cancels while ``|t| < 1``.
    """
    forward_op, backward_op = ops.ACTIVATIONS[name]
    x, dy = _wide(x), np.abs(_wide(dy))
    y, cache = forward_op(x, **kwargs)
    if name in ("softmax", "log_softmax"):
        return _softmax_bounds(name, x, y, dy, kwargs.get("axis", -1))
    slope = backward_op(np.ones_like(x), cache)
    size = 1.0 + np.abs(slope) + np.abs(y)
    if name == "gelu_tanh" or kwargs.get("approximate") == "tanh":
        c, k = math.sqrt(2.0 / math.pi), 0.044715
        t = np.tanh(c * (x + k * x**3))
        du = c * (1.0 + 3.0 * k * x * x)
        size += np.where(np.abs(t) < 1.0, 0.5 * np.abs(x) * (1.0 + t * t) * du, 0.0)
    return (1, max(finite_max(x), finite_max(y))), (1, finite_max(dy * size))


# ---------------------------------------------------------------------- losses
def cross_entropy_sizes(logits, labels, label_smoothing=0.0):
    """Per-row size of the softmax cross-entropy terms ``sum_j T_j (lse - x_j)`` and
    per-entry size of its gradient ``p sum(T) - T``, where ``T`` is the target mixed
    with the uniform distribution, ``(1 - s) t + s / C`` (as torch does)."""
    x = _wide(logits)
    classes = x.shape[-1]
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu":
        labels = np.eye(classes)[labels]
    target = np.abs((1.0 - label_smoothing) * _wide(labels) + label_smoothing / classes)
    top = x.max(axis=-1, keepdims=True)
    lse = top + np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))
    loss = np.sum(target * (np.abs(lse) + np.abs(x)), axis=-1)
    grad = np.exp(x - lse) * target.sum(axis=-1, keepdims=True) + target
    return loss, grad


def pair_loss_sizes(name, pred, target, delta=1.0, weight=None, pos_weight=None):
    """Per-entry size of the terms of an elementwise loss and of its gradient:
    ``d = pred - target`` has terms of size ``|pred| + |target|``; mse sums ``d^2``
    (gradient 2 d), mae ``|d|`` (sign d), huber ``d^2 / 2`` or ``delta (|d| - delta / 2)``
    (d or delta sign d), smooth_l1 huber's over ``beta = delta`` (mae at 0), binary
    cross-entropy of logits ``(1 - t) x + l log(1 + e^-x)`` with ``l = 1 + (r - 1) t``
    (``l sigmoid(x) - r t``), of probabilities ``t log p + (1 - t) log(1 - p)`` (logs
    of size up to 100, each with an error of 1 ulp of 1; gradient ``(p - t) / (p (1 - p))``).
    ``weight`` multiplies both."""
    pred, target = np.abs(_wide(pred)), np.abs(_wide(target))
    d = pred + target
    if name == "binary_cross_entropy_with_logits":
        r = 1.0 if pos_weight is None else np.abs(_wide(pos_weight))
        scale = 1.0 + np.abs(r - 1.0) * target
        sizes = ((1.0 + target) * pred + scale * (pred + 1.0), scale + r * target)
    elif name == "binary_cross_entropy":
        with np.errstate(divide="ignore"):
            logs = [np.minimum(np.abs(np.log(v)), 100.0) + 1.0 for v in (pred, 1.0 - pred)]
        sizes = (target * logs[0] + np.abs(1.0 - target) * logs[1],
                 d / np.maximum(pred * (1.0 - pred), 1e-12))
    elif name == "smooth_l1" and delta > 0:
        sizes = (d * (d + delta) / delta, d / delta + 1.0)
    else:
        sizes = {
            "mse": (d * d, 2.0 * d),
            "mae": (d, np.ones_like(d)),
            "smooth_l1": (d, np.ones_like(d)),
            "huber": (d * (d + delta), d + delta),
        }[name]
    if weight is None:
        return sizes
    weight = np.abs(_wide(weight))
    return sizes[0] * weight, sizes[1] * weight


def loss_bounds(item_sizes, grad_sizes, reduction, terms=1, upstream=None):
    """((terms, scale) of the loss, (terms, scale) of the gradient) from the sizes of
    each item's terms (``terms`` of them an item) and of each gradient entry (of the
    summed loss). "mean" and "sum" add up the M items (``terms * M`` terms in all; the
    mean divides by M); "none" keeps them, its gradient times ``|upstream|``."""
    items = max(np.size(item_sizes), 1)
    if reduction == "none":
        grad = grad_sizes
        if upstream is not None:
            upstream = np.abs(_wide(upstream))
            grad = grad * (upstream[..., None] if grad.ndim > upstream.ndim else upstream)
        return (terms, finite_max(item_sizes)), (terms, finite_max(grad))
    divisor = items if reduction == "mean" else 1
    loss = (terms * items, float(np.sum(item_sizes)) / divisor)
    return loss, (terms, finite_max(grad_sizes) / divisor)


def chain_terms(*stages):
    """``terms`` for a result computed through several stages that sum ``stages[k]``
    terms each: every stage adds its error ``eps sqrt(n_k) S``, with ``S`` the size of
    the terms carried to the end (the chain run on absolute values), so the errors add
    up to ``eps (sum_k sqrt(n_k)) S``, i.e. ``(sum_k sqrt(n_k))**2`` terms."""
    return sum(math.sqrt(n) for n in stages) ** 2


def _wide(a):
    return None if a is None else np.asarray(a, np.float64)


# --------------------------------------------- composite layers: measured condition
def condition_bounds(run, arrays, step=2.0**-20):
    """{output: (terms, scale)} for every output of ``run()``, measured on the case.

    ``run()`` returns a dict of float64 arrays (None allowed) computed from ``arrays``,
    which are perturbed in place, one nonzero entry at a time, by a relative ``step``.
    ``scale`` is ``max(|out| + sum_j |d out / d a_j| |a_j|)``: the componentwise
    condition number (Higham, ch. 7), which for a sum is the sum of its absolute terms
    and for a composite layer (a normalization, a block, a recurrence) the size of the
    terms its rounding errors scale with. ``terms`` is the most inputs any one entry of
    the output depends on. One evaluation per nonzero input entry: for small cases.
    """
    base = run()
    scale = {k: np.abs(v) for k, v in base.items() if v is not None}
    count = {k: np.zeros(v.shape, dtype=np.int64) for k, v in scale.items()}
    for array in arrays:
        flat = array.reshape(-1)
        if not np.shares_memory(flat, array):
            raise ValueError("condition_bounds: every array must be contiguous (it is "
                             "perturbed in place)")
        for j in np.flatnonzero(flat):
            saved = flat[j]
            flat[j] = saved * (1 + step)
            out = run()
            flat[j] = saved
            for key in scale:
                change = np.abs(out[key] - base[key]) / step
                scale[key] += change
                count[key] += change > 0
    return {k: (int(count[k].max(initial=1)), finite_max(scale[k])) for k in scale}


def assert_outputs_close(actual, expected, bounds, dtype, *, factor=8.0):
    """``assert_close`` on each entry of the dict ``expected`` (None where an output is
    absent, which ``actual`` must match) with the (terms, scale) of ``bounds``."""
    for key, want in expected.items():
        got = actual[key]
        if want is None:
            assert got is None, f"{key} must be None"
            continue
        assert got.shape == want.shape, f"{key}: shape {got.shape} != {want.shape}"
        terms, scale = bounds[key]
        assert_close(got, want, dtype=dtype, terms=terms, scale=scale, factor=factor,
                     what=key)


# ------------------------------------------------------------------- networks
def _as_float64(config):
    if isinstance(config, dict):
        return {k: "float64" if k == "dtype" and v is not None else _as_float64(v)
                for k, v in config.items()}
    if isinstance(config, list):
        return [_as_float64(c) for c in config]
    return config


def float64_twin(model):
    """The built layer or model ``model`` in float64: its config with every dtype
    float64, built for the same input shape, with the same weights and buffers."""
    twin = type(model).from_config(_as_float64(model.get_config()))
    twin.build(model.input_shape, dtype=np.float64)
    for ours, theirs in ((twin.named_parameters(), model.named_parameters()),
                         (twin.named_buffers(), model.named_buffers())):
        assert list(ours) == list(theirs)
        for key, value in theirs.items():
            ours[key][...] = value
    return twin


# ---------------------------------------------------------------- statistics
# A statistical check allows SIGMAS standard errors of its sample: a false alarm has
# a chance of about 6e-7 (and the suite's draws are seeded, so it never flickers).
SIGMAS = 5


def mean_bound(sigma, n):
    """Allowed |sample mean - mean| of ``n`` draws with standard deviation ``sigma``."""
    return SIGMAS * sigma / np.sqrt(n)


def std_bound(sigma, n, kurtosis=3.0):
    """Allowed |sample std - sigma| of ``n`` draws: the standard error of a sample
    standard deviation is ``sigma * sqrt((kurtosis - 1) / (4 n))`` (3 for a normal,
    1.8 for a uniform, less for a truncated normal)."""
    return SIGMAS * sigma * np.sqrt((kurtosis - 1) / (4 * n))


def proportion_bound(p, n):
    """Allowed |observed fraction - p| of ``n`` independent draws."""
    return SIGMAS * np.sqrt(p * (1 - p) / n)


def uniform_max_gap(n):
    """Relative gap below the bound ``b`` that the largest of ``n`` draws of |U(-b, b)|
    stays within: P(max < b (1 - 15/n)) = (1 - 15/n)^n < e^-15, rarer than SIGMAS."""
    return 15 / n


def layer_outputs(layer):
    """``(x, dy) -> {"y", "dx", every named gradient}``: one training forward and backward
    of ``layer``, each call from its present state (random generator, buffers), which is
    restored first, so that repeated calls see the same randomness."""
    state = copy.deepcopy(layer.extra_state())
    buffers = {k: v.copy() for k, v in layer.named_buffers().items()}

    def step(x, dy):
        layer.load_extra_state(copy.deepcopy(state))
        for key, value in layer.named_buffers().items():
            value[...] = buffers[key]
        layer.zero_grad()
        y = layer.forward(x)
        dx = layer.backward(dy)
        return {"y": y, "dx": dx, **{k: g.copy() for k, g in layer.named_gradients().items()}}

    return step


def layer_reference(layer, x, dy):
    """``(outputs, bounds)`` of one training step of a float64 ``layer`` at ``(x, dy)``:
    :func:`layer_outputs` and their :func:`condition_bounds` over x, dy and every
    parameter, all from the layer's present state."""
    x, dy = (np.array(a, dtype=np.float64) for a in (x, dy))
    step = layer_outputs(layer)
    bounds = condition_bounds(lambda: step(x, dy), [x, dy, *layer.named_parameters().values()])
    return step(x, dy), bounds


# ------------------------------------------------------------------- scatter-add
def scatter_bounds(ids, dy, rows):
    """(terms, scale) of an embedding backward, the scatter-add of the rows of ``dy``
    (*ids.shape, D) into ``rows`` rows by ``ids``: the most rows one id sums, and the
    largest sum of their absolute values."""
    ids = np.asarray(ids).reshape(-1)
    sizes = np.zeros((rows, np.shape(dy)[-1]))
    np.add.at(sizes, ids, np.abs(np.asarray(dy, np.float64)).reshape(ids.size, sizes.shape[1]))
    return int(np.bincount(ids, minlength=rows).max(initial=1)), finite_max(sizes)
