"""``handgrad.zoo.gradient_penalty`` and the layers' second-order pass.

The penalty ``P = weight * mean_i (||dC(x_i)/dx_i|| - 1)^2`` and ``dP/d theta`` are
compared with PyTorch's double backward (``torch.autograd.grad(..., create_graph=True)``
then ``backward``) in float32 and float64, within bounds measured on the case
(componentwise condition of the float64 computation), and with central finite
differences of ``P`` in float64; MLP critics with each supported activation, and
convolutional critics (Conv1D, ConvTranspose1D, Conv2D, Flatten, Reshape).
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.layers.second_order import double_backward_layers
from handgrad.model import Sequential
from handgrad.testing import assert_gradient_close, numeric_gradient
from handgrad.zoo import gradient_penalty

from optional_torch import F, needs_torch, torch
from tolerances import assert_outputs_close, condition_bounds, float64_twin
from tolerances_composite import LAYER_ROUNDINGS

DTYPES = [np.float32, np.float64]
#: case id -> layer factory: every declared activation with a second-order kernel, at
#: each of its declared samples (ops/declare.py)
ACTIVATIONS = {"-".join([decl.name, *map(str, kwargs.values())]):
               (lambda name=decl.layer, kwargs=kwargs: getattr(L, name)(**kwargs))
               for decl in hg.ops.declare.activations() if decl.gradgrad
               for kwargs in decl.samples}


def mlp_critic(activation, dtype, seed=0):
    make = ACTIVATIONS[activation]
    return Sequential([L.Dense(8), make(), L.Dense(6), make(), L.Dense(1)], seed=seed,
                      dtype=dtype, input_shape=(5,))


def conv_critic(rank, dtype, seed=0):
    if rank == 1:
        layers = [L.Conv1D(4, 3, stride=2, padding=1), L.Tanh(),
                  L.ConvTranspose1D(3, 3, stride=2, output_padding=1), L.Softplus(),
                  L.Flatten(), L.Dense(1)]
        return Sequential(layers, seed=seed, dtype=dtype, input_shape=(6, 2))
    if rank == 3:  # every padding_mode: the pad is linear, so q is padded alike
        layers = [L.Conv3D(3, 3, padding=1, padding_mode="reflect"), L.Tanh(),
                  L.Conv3D(4, 2, padding=((1, 0), (0, 1), 1), padding_mode="circular",
                           groups=1), L.Softplus(),
                  L.Conv3D(2, (2, 1, 2), padding=(1, 0, 1), padding_mode="replicate"),
                  L.ConvTranspose3D(2, 2, stride=2), L.Flatten(), L.Dense(1)]
        return Sequential(layers, seed=seed, dtype=dtype, input_shape=(3, 4, 3, 2))
    layers = [L.Conv2D(4, 3, padding=1), L.GELU(), L.Conv2D(3, 2, stride=2, groups=1),
              L.ELU(), L.Reshape((-1,)), L.Dense(4), L.Sigmoid(), L.Dense(1)]
    return Sequential(layers, seed=seed, dtype=dtype, input_shape=(5, 5, 2))


def _inputs(model, n=4, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *model.input_shape)).astype(model.dtype)


# ------------------------------------------------------------------ torch twin
def _torch_layer(layer, params, h):
    """One handgrad layer in torch, channels-last, on handgrad-layout weights."""
    name = type(layer).__name__
    if name == "Dense":
        return h @ params[f"{layer.name}.W"] + params[f"{layer.name}.b"]
    if name in ("Flatten", "Reshape"):
        return h.reshape(h.shape[0], -1)
    if name.startswith("Conv"):
        w, b = params[f"{layer.name}.W"], params[f"{layer.name}.b"]
        nd = w.ndim - 2
        w = w.permute(nd + 1, nd, *range(nd))  # (*K, A, B) -> (B, A, *K)
        h = h.movedim(-1, 1)
        kw = dict(stride=layer.stride, padding=layer.padding, dilation=layer.dilation,
                  groups=layer.groups)
        if name.startswith("ConvTranspose"):
            fn = getattr(F, f"conv_transpose{nd}d")
            return fn(h, w, b, output_padding=layer.output_padding, **kw).movedim(1, -1)
        if layer.padding_mode != "zeros":  # torch's own explicit pad, in reversed axis order
            padding = (layer.padding,) * nd if isinstance(layer.padding, int) else layer.padding
            pairs = [(p, p) if isinstance(p, int) else p for p in padding]
            h = F.pad(h, [v for pair in reversed(pairs) for v in pair], mode=layer.padding_mode)
            kw["padding"] = 0
        return getattr(F, f"conv{nd}d")(h, w, b, **kw).movedim(1, -1)
    if name == "HardSigmoid":  # torch has no double backward of hardsigmoid
        return torch.clamp(h + 3.0, 0.0, 6.0) / 6.0  # the same function off +-3
    return layer.declaration.torch(F, h, **layer.hyper)


def torch_penalty(model, x, weight):
    """(P, {name: dP/d parameter}) by torch's double backward, in x's dtype."""
    params = {k: torch.tensor(v, requires_grad=True)
              for k, v in model.named_parameters().items()}
    tx = torch.tensor(x, requires_grad=True)
    h = tx
    for layer in model.layers:
        h = _torch_layer(layer, params, h)
    (g,) = torch.autograd.grad(h.sum(), tx, create_graph=True)
    penalty = weight * ((g.reshape(len(x), -1).norm(dim=1) - 1.0) ** 2).mean()
    penalty.backward()
    return penalty.item(), {k: np.zeros(p.shape, x.dtype) if p.grad is None else
                            p.grad.numpy() for k, p in params.items()}


def _outputs(model, x, weight):
    penalty, grads = gradient_penalty(model, x, weight)
    return {"penalty": np.array(penalty), **grads}


def _penalty_bounds(model, x, weight):
    """(terms, scale) per output from the float64 twin's componentwise condition; every
    layer is passed four times (forward, input gradient, double and ordinary backward)."""
    twin = float64_twin(model)
    wide = np.array(x, np.float64)
    arrays = [wide, *twin.named_parameters().values()]
    bounds = condition_bounds(lambda: _outputs(twin, wide, weight), arrays)
    extra = 4 * LAYER_ROUNDINGS * len(model.layers)
    return {k: (terms + extra, scale) for k, (terms, scale) in bounds.items()}


def _check_against_torch(model, x, weight=10.0):
    ours = _outputs(model, x, weight)
    penalty, grads = torch_penalty(model, x, weight)
    assert set(ours) == {"penalty", *model.named_parameters()}
    theirs = {"penalty": np.array(penalty), **grads}
    assert_outputs_close(ours, theirs, _penalty_bounds(model, x, weight), model.dtype)


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_mlp_penalty_matches_torch_double_backward(activation, dtype):
    model = mlp_critic(activation, dtype)
    _check_against_torch(model, _inputs(model))


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv_penalty_matches_torch_double_backward(rank, dtype):
    model = conv_critic(rank, dtype)
    _check_against_torch(model, _inputs(model, n=3), weight=2.5)


@pytest.mark.parametrize("critic", ["tanh", "softplus", "gelu-tanh", "conv1d", "conv2d",
                                    "conv3d"])
def test_penalty_gradient_matches_finite_differences(critic):
    model = (conv_critic(int(critic[-2]), np.float64) if critic.startswith("conv") else
             mlp_critic(critic, np.float64))
    x = _inputs(model, n=3)
    _, grads = gradient_penalty(model, x, 10.0)
    rng = np.random.default_rng(5)
    for key, param in model.named_parameters().items():
        picks = rng.choice(param.size, min(param.size, 12), replace=False)
        numeric, error = numeric_gradient(lambda: gradient_penalty(model, x, 10.0)[0], param,
                                          picks=picks, with_error=True)
        assert_gradient_close(grads[key].reshape(-1)[picks], numeric.reshape(-1),
                              error.reshape(-1), what=f"{critic} {key}")


# ------------------------------------------------------------ critic state
def test_the_critic_is_left_as_found():
    """Gradients restored, a pending forward's cache untouched: a backward after the
    penalty gives the gradients it would have given without it."""
    model = mlp_critic("tanh", np.float64)
    x = _inputs(model)
    model.zero_grad()
    model.forward(x, training=True)
    model.backward(np.ones((len(x), 1)))
    expected = {k: 2 * g for k, g in model.named_gradients().items()}
    model.forward(x, training=True)
    before = {k: g.copy() for k, g in model.named_gradients().items()}
    penalty, grads = gradient_penalty(model, x + 0.5, 3.0)
    assert penalty > 0 and any(np.any(g != 0) for g in grads.values())
    for key, grad in model.named_gradients().items():
        np.testing.assert_array_equal(grad, before[key], err_msg=key)
    model.backward(np.ones((len(x), 1)))
    for key, grad in model.named_gradients().items():
        np.testing.assert_array_equal(grad, expected[key], err_msg=key)
    with pytest.raises(RuntimeError, match="without a matching forward"):
        model.backward(np.ones((len(x), 1)))


def test_graph_and_nested_chains_give_the_sequential_result():
    model = mlp_critic("softplus", np.float64)
    x = _inputs(model)
    expected = gradient_penalty(model, x)
    inner = Sequential([L.Dense(6), L.Softplus()], name="inner")
    nested = Sequential([L.Dense(8), L.Softplus(), inner, L.Dense(1)], seed=0,
                        dtype="float64", input_shape=(5,))
    start = hg.Input((5,))
    h = start
    for layer in (L.Dense(8), L.Softplus(), L.Dense(6), L.Softplus(),
                  L.Dense(1)):
        h = layer(h)
    graph = hg.Model(start, h, seed=0, dtype="float64")
    for critic in (nested, graph):
        for ours, theirs in zip(critic.named_parameters().values(),
                                model.named_parameters().values()):
            ours[...] = theirs
        penalty, grads = gradient_penalty(critic, x)
        assert penalty == expected[0]
        assert list(grads) == list(critic.named_parameters())
        for ours, theirs in zip(grads.values(), expected[1].values()):
            np.testing.assert_array_equal(ours, theirs)


def test_frozen_layers_get_zeros_and_change_nothing_else():
    model = mlp_critic("elu", np.float64)
    x = _inputs(model)
    expected = gradient_penalty(model, x)[1]
    model[2].trainable = False
    grads = gradient_penalty(model, x)[1]
    for key, grad in grads.items():
        want = np.zeros_like(grad) if key.startswith(model[2].name) else expected[key]
        np.testing.assert_array_equal(grad, want, err_msg=key)


def test_zero_input_gradient_and_zero_weight():
    """g = 0 gives P = weight and dP/d theta = 0 (PyTorch's norm gradient at 0 is 0);
    weight = 0 gives zeros."""
    model = mlp_critic("relu", np.float32)
    x = _inputs(model)
    assert gradient_penalty(model, x, 0.0)[0] == 0.0
    assert all(not np.any(g) for g in gradient_penalty(model, x, 0.0)[1].values())
    model.named_parameters()["dense_4.W"][...] = 0.0
    penalty, grads = gradient_penalty(model, x, 2.0)
    assert penalty == 2.0
    assert all(not np.any(g) for g in grads.values())
    assert all(g.dtype == np.float32 for g in grads.values())


# ------------------------------------------------------------------ layers
def test_layer_double_backward_keeps_the_cache_and_adds_only_w():
    dense = L.Dense(3, seed=0, dtype="float64").build((4,))
    x = np.random.default_rng(0).standard_normal((2, 4))
    dense.forward(x, training=True)
    dy, q = np.ones((2, 3)), np.ones((2, 4))
    dx = dense.input_gradient(dy)
    np.testing.assert_array_equal(dx, dy @ dense.parameters["W"].T)
    d_dy, d_x = dense.double_backward(q, dy)
    assert d_x is None
    np.testing.assert_array_equal(d_dy, q @ dense.parameters["W"])
    np.testing.assert_array_equal(dense.gradients["W"], q.T @ dy)
    assert not np.any(dense.gradients["b"])
    np.testing.assert_array_equal(dense.backward(dy), dx)  # the cache was still there
    for method, args in (("input_gradient", (dy,)), ("double_backward", (q, dy)),
                         ("discard_cache", ())):
        with pytest.raises(RuntimeError, match=rf"{method}\(\) called without a matching"):
            getattr(dense, method)(*args)


def test_which_layers_have_a_second_order_pass():
    assert all(make().supports_double_backward() for make in ACTIVATIONS.values())
    for layer in (L.Dense(2), L.Conv1D(2, 3), L.Conv2D(2, 3), L.ConvTranspose2D(2, 3),
                  L.Flatten(), L.Reshape((-1,))):
        assert layer.supports_double_backward(), layer
    for layer in (L.Softmax(), L.LogSoftmax(), L.Dropout(0.5), L.BatchNorm(),
                  L.MaxPool2D(2)):
        assert not layer.supports_double_backward(), layer
    flatten = L.Flatten()
    flatten.forward(np.ones((2, 3, 2)), training=True)
    np.testing.assert_array_equal(flatten.double_backward(np.arange(12.0).reshape(2, 3, 2),
                                                          None)[0],
                                  np.arange(12.0).reshape(2, 6))
    with pytest.raises(ValueError, match=r"^Flatten: 'q' must be a float64 array of the "
                                         r"forward input's shape \(2, 3, 2\); received"):
        flatten.double_backward(np.ones((2, 6)), None)
    softmax = L.Softmax()
    softmax.forward(np.ones((2, 3)), training=True)
    with pytest.raises(TypeError, match=r"^Softmax has no second-order \(double\) backward"):
        softmax.double_backward(np.ones((2, 3)), np.ones((2, 3)))


def test_the_second_order_layers_are_listed_from_the_registry():
    names = double_backward_layers()
    assert {"Dense", "Conv2D", "Flatten", "Tanh", "TiedDense"} <= set(names)
    assert "Softmax" not in names and "Dropout" not in names  # no second-order pass
    dropout = L.Dropout(0.5)
    dropout.forward(np.ones((2, 3)), training=True)
    with pytest.raises(TypeError, match=", ".join(names)):
        dropout.double_backward(np.ones((2, 3)), np.ones((2, 3)))


# ------------------------------------------------------------------ errors
def _bad_critics():
    relu = L.ReLU()
    start = hg.Input((3,))
    shared = L.Dense(3)
    fork = L.Dense(1)(L.Add()([L.Dense(3)(start), start]))
    return {
        "softmax": (Sequential([L.Dense(2), L.Softmax(), L.Dense(1)]), TypeError,
                    r"Softmax 'softmax_1' has no second-order \(double\) backward pass"),
        "dropout": (Sequential([L.Dense(2), L.Dropout(0.5), L.Dense(1)]), TypeError,
                    r"Dropout 'dropout_1' has no second-order"),
        "shared": (hg.Model(start, L.Dense(1)(relu(shared(relu(shared(start)))))), TypeError,
                   r"the critic calls Dense 'dense_0' more than once"),
        "not a chain": (hg.Model(start, fork), TypeError,
                        r"a graph Model critic must be a chain \(one input, one output"),
        "two outputs": (Sequential([L.Dense(2)]), ValueError,
                        r"the critic must give one output per example, shape \(4, 1\) or "
                        r"\(4,\); it gave \(4, 2\)"),
    }


@pytest.mark.parametrize("key", ["softmax", "dropout", "shared", "not a chain", "two outputs"])
def test_unsupported_critics_are_refused_and_left_clean(key):
    critic, error, message = _bad_critics()[key]
    x = np.ones((4, 3), np.float32)
    with pytest.raises(error, match=f"^gradient_penalty: {message}"):
        gradient_penalty(critic, x)
    for _, layer in critic.walk():
        assert not layer._caches, layer.label


@pytest.mark.parametrize("kwargs, error, message", [
    ({"critic": "mlp"}, TypeError, r"'critic' must be a handgrad Layer or model; received "
                                   r"'mlp' \(str\)"),
    ({"weight": -1.0}, ValueError, r"'weight' must be a finite real number >= 0; received -1.0"),
    ({"weight": float("nan")}, ValueError, r"'weight' must be a finite real number >= 0"),
    ({"weight": "10"}, TypeError, r"'weight' must be a finite real number >= 0; received '10'"),
    ({"x": np.ones((4, 5), np.float64)}, TypeError,
     r"'x' must have the critic's dtype float32; received float64"),
    ({"x": np.ones((4, 5), np.int64)}, TypeError, r"'x' must have dtype float32 or float64"),
    ({"x": np.ones((0, 5), np.float32)}, ValueError, r"'x' must be \(N, ...\) with N >= 1 "
                                                     r"examples; received an array of shape"),
])
def test_bad_arguments(kwargs, error, message):
    arguments = {"critic": mlp_critic("relu", np.float32),
                 "x": np.ones((4, 5), np.float32), "weight": 10.0, **kwargs}
    with pytest.raises(error, match=f"^gradient_penalty: {message}"):
        gradient_penalty(**arguments)
