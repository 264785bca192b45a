"""The layer contract (docs/ARCHITECTURE.md, "Layer contract"), checked for every entry of
``handgrad.layer_cases.LAYER_CASES``: lazy build and shapes, gradients against
central finite differences, config round trip, frozen layers, evaluation mode,
shared use (two forwards then two backwards), cache misuse and dtypes.

Independent checks written here (a naive convolution loop, Dense's closed-form
gradients, a full finite-difference sweep) back up ``handgrad.testing.gradcheck``.
"""

import ast
import copy
import json
import re

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.layers.dropout import ChannelDropout
from handgrad.model import Sequential
from handgrad.testing import (
    INTEGER_INPUT_CASES,
    LAYER_CASES,
    MULTI_INPUT_LAYERS,
    NON_FLOAT_LAYERS,
    assert_close,
    assert_gradient_close,
    gradcheck,
    numeric_gradient,
)

from tolerances import assert_outputs_close, layer_reference, linear_op_bounds, proportion_bound

SEEDS = (0, 1, 2)
CASES = [(name, seed) for name in sorted(LAYER_CASES) for seed in SEEDS]
IDS = [f"{name}-{seed}" for name, seed in CASES]
table = pytest.mark.parametrize(("name", "seed"), CASES, ids=IDS)


def make(name, seed):
    """A fresh layer from the table; the same (name, seed) always gives the same config."""
    return LAYER_CASES[name](np.random.default_rng(seed))


def batch(shape, seed, n=2, dtype=np.float64):
    return np.random.default_rng(1000 + seed).standard_normal((n, *shape)).astype(dtype)


def random_like(y, seed):
    return np.random.default_rng(2000 + seed).standard_normal(y.shape).astype(y.dtype)


def copy_parameters(source, target):
    ours, theirs = source.named_parameters(), target.named_parameters()
    assert set(ours) == set(theirs)
    for key, value in ours.items():
        assert theirs[key].shape == value.shape, key
        theirs[key][...] = value


def variant(layer, **changes):
    """The same layer class and config with some entries replaced (or removed if None)."""
    config = {**layer.get_config(), **changes}
    config = {k: v for k, v in config.items() if v is not None}
    return type(layer).from_config(config)


def summary_rows(text):
    """{layer name: (class, output shape, params)} parsed from a summary table (the
    columns after the params, memory and receptive field, are ignored)."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"(\S+) \((\w+)\)\s+(\(None[^)]*\))\s+([\d,]+)(?:\s|$)", line.strip())
        if match:
            name, cls, shape, params = match.groups()
            rows[name] = (cls, ast.literal_eval(shape), int(params.replace(",", "")))
    return rows


def test_table_covers_every_registered_layer():
    registered = {name for name in L.REGISTRY if name not in ("Sequential", "Model")} - set(
        MULTI_INPUT_LAYERS)  # models are covered by their own tests (structure, graph)
    registered -= set(INTEGER_INPUT_CASES)  # their contract: tests/test_embedding.py
    registered -= set(NON_FLOAT_LAYERS)  # strings or ids in: the files they name
    registered -= {"TiedDense"}  # it refers to an Embedding: tests/test_tied.py
    registered = {name for name in registered  # the zoo's models: their own test files
                  if not L.REGISTRY[name].__module__.startswith("handgrad.zoo.")}
    assert registered == set(LAYER_CASES)
    for name in LAYER_CASES:
        layer, _ = make(name, 0)
        assert type(layer) is L.REGISTRY[name]


# ------------------------------------------------------------------------- 1. build
@table
def test_forward_builds_lazily_and_shapes_agree(name, seed):
    layer, shape = make(name, seed)
    assert not layer.built and layer.named_parameters() == {}
    x = batch(shape, seed)
    y = layer.forward(x)
    assert layer.built and layer.input_shape == tuple(shape)
    assert y.shape[0] == x.shape[0]
    assert layer.output_shape(shape) == y.shape[1:]
    parameters, gradients = layer.named_parameters(), layer.named_gradients()
    assert set(gradients) == set(parameters)
    for key, grad in gradients.items():
        assert grad.shape == parameters[key].shape and not np.any(grad)
    assert layer.count_params() == sum(p.size for p in parameters.values())


@table
def test_summary_reports_the_forward_shape_without_running_data(name, seed):
    layer, shape = make(name, seed)
    y = layer.forward(batch(shape, seed))
    twin, _ = make(name, seed)
    fresh_state = copy.deepcopy(twin.extra_state())
    model = Sequential([twin], name="single")
    printed = []
    text = model.summary(input_shape=shape, print_fn=printed.append)
    assert printed == [text]
    rows = summary_rows(text)
    assert rows == {twin.name: (name, (None, *y.shape[1:]), layer.count_params())}
    assert f"Total params: {layer.count_params():,}" in text
    with pytest.raises(RuntimeError):  # the summary kept no cache
        twin.backward(random_like(y, seed))
    assert twin.extra_state() == fresh_state  # and drew no random numbers


# ------------------------------------------------------------ 2. finite differences
@table
def test_gradients_match_finite_differences(name, seed):
    layer, shape = make(name, seed)
    result = gradcheck(layer, batch(shape, seed), rng=seed)
    assert set(result.errors) == {"x", *layer.named_parameters()}
    assert result.passed, result.errors


def assert_full_finite_differences(layer, x, dy, analytic):
    """Central differences of <layer(x), dy> for x and every parameter, all entries,
    against ``analytic`` ({"x": dx, parameter: gradient}), within their measured error."""

    def loss():
        y = layer.forward(x, training=False)
        return float(np.sum(y * dy))

    assert set(analytic) == {"x", *layer.parameters}
    for key, value in {"x": x, **layer.parameters}.items():
        numeric, error = numeric_gradient(loss, value, with_error=True)
        assert_gradient_close(analytic[key], numeric, error, what=key)


def naive_conv2d(x, w, b, stride, padding, dilation, groups):
    """Loops over output positions on an explicitly zero-padded input."""
    (ph, pw), (sh, sw), (dh, dw) = padding, stride, dilation
    kh, kw, c_per_group, c_out = w.shape
    xp = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    n, hp, wp, _ = xp.shape
    h_out = (hp - (kh - 1) * dh - 1) // sh + 1
    w_out = (wp - (kw - 1) * dw - 1) // sw + 1
    out_per_group = c_out // groups
    y = np.zeros((n, h_out, w_out, c_out))
    for i in range(h_out):
        for j in range(w_out):
            rows = slice(i * sh, i * sh + (kh - 1) * dh + 1, dh)
            cols = slice(j * sw, j * sw + (kw - 1) * dw + 1, dw)
            window = xp[:, rows, cols]
            for g in range(groups):
                xs = window[..., g * c_per_group:(g + 1) * c_per_group]
                ws = w[..., g * out_per_group:(g + 1) * out_per_group]
                y[:, i, j, g * out_per_group:(g + 1) * out_per_group] = np.tensordot(
                    xs, ws, axes=([1, 2, 3], [0, 1, 2]))
    return y if b is None else y + b


def test_conv2d_independent_forward_and_full_finite_differences():
    layer = L.Conv2D(4, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2,
                     dtype="float64", seed=3)
    x = batch((5, 4, 4), 0)
    y = layer.forward(x)
    W, b = layer.parameters["W"], layer.parameters["b"]
    assert W.shape == (3, 2, 2, 4) and b.shape == (4,)
    dy = random_like(y, 0)
    kwargs = {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2}
    terms, scale = linear_op_bounds("conv2d", [x, W, b], dy, kwargs)[0]
    assert_close(y, naive_conv2d(x, W, b, (2, 1), (1, 2), (1, 2), 2), terms=terms,
                 scale=scale, what="forward")
    dx = layer.backward(dy)
    assert_full_finite_differences(layer, x, dy, {"x": dx, **layer.gradients})


@pytest.mark.parametrize("bias", [True, False])
def test_dense_closed_form_and_full_finite_differences(bias):
    layer = L.Dense(3, bias=bias, dtype="float64", seed=1)
    x = batch((2, 4), 1)
    y = layer.forward(x)
    W, b = layer.parameters["W"], layer.parameters.get("b")
    assert set(layer.parameters) == ({"W", "b"} if bias else {"W"})
    dy = random_like(y, 1)
    dx = layer.backward(dy)
    closed_form = {"y": (y, x @ W + (b if bias else 0.0)), "dx": (dx, dy @ W.T),
                   "dW": (layer.gradients["W"], x.reshape(-1, 4).T @ dy.reshape(-1, 3)),
                   "db": (layer.gradients.get("b"), dy.sum(axis=(0, 1)) if bias else None)}
    for (name, (ours, expected)), bound in zip(closed_form.items(),
                                               linear_op_bounds("linear", [x, W, b], dy)):
        if bound is None:
            assert ours is None and expected is None
            continue
        terms, scale = bound
        assert_close(ours, expected, terms=terms, scale=scale, what=f"{name} closed form")
    assert_full_finite_differences(layer, x, dy, {"x": dx, **layer.gradients})


# ------------------------------------------------------------------ 3. config
@table
def test_config_round_trip_through_json(name, seed):
    layer, shape = make(name, seed)
    config = layer.get_config()
    clone = type(layer).from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config
    assert variant(layer).get_config() == config
    x = batch(shape, seed)
    y = layer.forward(x)
    clone.build(shape, dtype=x.dtype)
    copy_parameters(layer, clone)
    np.testing.assert_array_equal(clone.forward(x), y)
    np.testing.assert_array_equal(clone.forward(x, training=False),
                                  layer.forward(x, training=False))


# ------------------------------------------------------------------ 4. frozen
def stays_zero(layer, key):
    """A gradient that is exactly zero on every input: a cell's W_hh from the zero state
    that ``forward(x)`` starts from (h W_hh = 0)."""
    return isinstance(layer, L.RecurrentCell) and key == "W_hh"


@table
def test_frozen_layer_returns_dx_and_accumulates_nothing(name, seed):
    layer, shape = make(name, seed)
    frozen, _ = make(name, seed)
    if "trainable" in frozen.get_config():
        frozen = variant(frozen, trainable=False)
    else:
        frozen.trainable = False
    assert not frozen.trainable
    x = batch(shape, seed)
    y = layer.forward(x)
    frozen.build(shape, dtype=x.dtype)
    copy_parameters(layer, frozen)
    dy = random_like(y, seed)
    running = {k: v for k, v in frozen.named_buffers().items() if k.endswith(("_mean", "_var"))}
    if running:  # with running statistics a frozen layer runs in inference mode (Keras)
        for key, value in running.items():  # statistics unlike the batch's
            value += 0.5
            layer.named_buffers()[key][...] = value
        kept = {key: value.copy() for key, value in running.items()}
        np.testing.assert_array_equal(frozen.forward(x), layer.forward(x, training=False))
        assert np.any(frozen.backward(dy))
        for key, value in kept.items():
            np.testing.assert_array_equal(frozen.named_buffers()[key], value, err_msg=key)
        layer.backward(dy)
    else:
        np.testing.assert_array_equal(frozen.forward(x), y)
        np.testing.assert_array_equal(frozen.backward(dy), layer.backward(dy))
    for key, grad in frozen.named_gradients().items():
        assert np.all(grad == 0), f"frozen gradient {key} changed"
        if not stays_zero(layer, key):
            assert np.any(layer.named_gradients()[key] != 0), f"trainable gradient {key} zero"
    assert frozen.named_parameters(trainable_only=True) == {}
    assert set(frozen.named_parameters()) == set(layer.named_parameters())


# ------------------------------------------------------------------ 5. eval mode
@table
def test_eval_mode_is_deterministic_and_keeps_no_cache(name, seed):
    layer, shape = make(name, seed)
    x = batch(shape, seed)
    layer.ensure_built(shape)
    state = copy.deepcopy(layer.extra_state())
    # a layer random in evaluation too (torch's FractionalMaxPool) replays its generator
    redraw = getattr(layer, "random_in_evaluation", False)
    y1 = layer.forward(x, training=False)
    if redraw:
        layer.load_extra_state(copy.deepcopy(state))
    y2 = layer.forward(x, training=False)
    np.testing.assert_array_equal(y1, y2)
    with pytest.raises(RuntimeError, match="backward"):
        layer.backward(random_like(y1, seed))
    if isinstance(layer, (L.Dropout, L.RandomAugmentation)):  # every random layer
        np.testing.assert_array_equal(y1, x)  # (layers/dropout.py, augmentation.py too)
    elif not layer.named_buffers():
        if redraw:
            layer.load_extra_state(state)
        # Layers with running statistics (buffers) legitimately differ between modes;
        # their evaluation outputs are checked against torch in test_normalization_layers.
        np.testing.assert_array_equal(layer.forward(x, training=True), y1)


def test_dropout_training_zeroes_and_rescales():
    layer = L.Dropout(0.25, seed=5)
    x = np.abs(batch((40, 50), 0)) + 0.1  # no zeros in x, so zeros come from the mask
    y = layer.forward(x)
    kept = y != 0
    assert abs((1 - kept.mean()) - 0.25) <= proportion_bound(0.25, kept.size)
    # one rounding each: the scale 1 / 0.75 and the product
    assert_close(y[kept], x[kept] / 0.75, what="kept values")
    dy = random_like(y, 0)
    assert_close(layer.backward(dy), np.where(kept, dy / 0.75, 0.0), what="dx")


# ------------------------------------------- 6. forward, forward, backward, backward
@table
def test_two_forwards_then_two_backwards_accumulate(name, seed):
    layer, shape = make(name, seed)
    layer.build(shape, dtype=np.float64)
    state = copy.deepcopy(layer.extra_state())
    x1, x2 = batch(shape, seed, n=2), batch(shape, seed + 50, n=3)
    y1, y2 = layer.forward(x1), layer.forward(x2)
    dy1, dy2 = random_like(y1, seed), random_like(y2, seed + 50)
    dx2 = layer.backward(dy2)  # latest first
    dx1 = layer.backward(dy1)
    accumulated = {k: g.copy() for k, g in layer.named_gradients().items()}
    with pytest.raises(RuntimeError):
        layer.backward(dy1)

    layer.zero_grad()
    layer.load_extra_state(copy.deepcopy(state))
    separate = []
    for x, dy in ((x1, dy1), (x2, dy2)):
        y = layer.forward(x)
        dx = layer.backward(dy)
        separate.append((y, dx, {k: g.copy() for k, g in layer.named_gradients().items()}))
        layer.zero_grad()
    (s1, e1, g1), (s2, e2, g2) = separate
    # Bit-identical: the same kernels on the same values (the running statistics a
    # second forward moves do not enter training outputs), and a backward adds its
    # gradients once, so 0 + g2 + g1 == 0 + g1 + g2 exactly.
    np.testing.assert_array_equal(y1, s1)
    np.testing.assert_array_equal(y2, s2)
    assert dx1.shape == x1.shape and dx2.shape == x2.shape
    np.testing.assert_array_equal(dx1, e1)
    np.testing.assert_array_equal(dx2, e2)
    for key, total in accumulated.items():
        np.testing.assert_array_equal(total, g1[key] + g2[key])
        if not stays_zero(layer, key):
            assert np.any(g1[key] != total), f"{key}: second forward's gradient missing"


# --------------------------------------------------------------- 7. cache misuse
@table
def test_backward_without_forward_is_a_clear_error(name, seed):
    layer, shape = make(name, seed)
    with pytest.raises(RuntimeError, match=r"backward\(\) called without a matching forward"):
        layer.backward(np.zeros((2, 1)))
    y = layer.forward(batch(shape, seed))
    dy = random_like(y, seed)
    layer.backward(dy)
    with pytest.raises(RuntimeError, match=rf"{name}.*backward\(\) called without a matching"):
        layer.backward(dy)
    layer.forward(batch(shape, seed))
    layer.clear_caches()
    with pytest.raises(RuntimeError, match="without a matching forward"):
        layer.backward(dy)


# ------------------------------------------------------------------- 8. dtypes
@table
def test_float32_default_keeps_float32(name, seed):
    layer64, shape = make(name, seed)
    layer = variant(layer64, dtype=None)
    x = batch(shape, seed, dtype=np.float32)
    y = layer.forward(x)
    assert layer.dtype == np.float32
    assert y.dtype == np.float32
    for key, value in layer.named_parameters().items():
        assert value.dtype == np.float32, key
    dy = random_like(y, seed)
    dx = layer.backward(dy)
    assert dx.dtype == np.float32
    for key, grad in layer.named_gradients().items():
        assert grad.dtype == np.float32, key

    if name == "Dropout":  # the mask is drawn in the input's dtype; compare given the mask
        kept = y != 0  # one rounding each: the scale 1 / (1 - rate) and the product
        assert_close(y[kept], x[kept].astype(np.float64) / (1 - layer.rate), dtype=np.float32,
                     what="forward")
        assert_close(dx, np.where(kept, dy.astype(np.float64) / (1 - layer.rate), 0.0),
                     dtype=np.float32, what="dx")
        return
    if isinstance(layer, L.Dropout):  # the other random layers: the float64 op, given the
        kept = dx != 0  # mask read from dx (dy has no zeros; whole channels: one position)
        if isinstance(layer, ChannelDropout):
            kept = kept[(slice(None), *[slice(0, 1)] * (kept.ndim - 2))]
        elif isinstance(layer, L.StochasticDepth):  # one value per example or batch
            kept = kept[(slice(None) if layer.mode == "row" else slice(0, 1),
                         *[slice(0, 1)] * (kept.ndim - 1))]
        y64, cache = type(layer).forward_op(x.astype(np.float64), layer.rate, keep=kept,
                                            **layer.op_options)
        assert_close(y, y64, dtype=np.float32, what="forward")
        assert_close(dx, type(layer).backward_op(dy.astype(np.float64), cache),
                     dtype=np.float32, what="dx")
        return
    # the float32 results are the float64 results (same values, rounded to float32) to
    # float32 accuracy, with terms and sizes measured on the float64 layer
    layer64.build(shape, dtype=np.float64)
    copy_parameters(layer, layer64)
    expected, bounds = layer_reference(layer64, x, dy)
    assert_outputs_close({"y": y, "dx": dx, **layer.named_gradients()}, expected, bounds,
                         np.float32)


@table
def test_float64_input_into_float32_layer(name, seed):
    layer = variant(make(name, seed)[0], dtype=None)
    shape = make(name, seed)[1]
    layer.forward(batch(shape, seed, dtype=np.float32))
    x64 = batch(shape, seed)
    if layer.named_parameters() or layer.named_buffers():
        with pytest.raises(TypeError) as info:
            layer.forward(x64)
        assert "float64" in str(info.value) and "float32" in str(info.value)
    else:  # no parameters or buffers: the output follows the input's dtype
        y = layer.forward(x64)
        assert y.dtype == np.float64
        assert layer.backward(random_like(y, seed)).dtype == np.float64
