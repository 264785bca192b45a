"""Normalization layers against their ``torch.nn`` twins over several training steps
(forward, every gradient, running statistics, then evaluation outputs), plus the
running-statistics modes the generic contract (tests/test_layers_contract.py, where
batch norm runs without running statistics) does not cover, and bad input.

Weights are copied handgrad -> torch: gamma -> ``weight``, beta -> ``bias`` (same
shapes). Inputs are moved from channels-last (N, *S, C) to (N, C, *S) for every torch
module but ``nn.LayerNorm``, which normalizes trailing axes in both libraries.
"""

import copy
import json

import numpy as np
import pytest

from handgrad import io
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import gradcheck

from optable import assert_close

torch = pytest.importorskip("torch")
nn = torch.nn

TOLERANCES = [(np.float64, 1e-10), (np.float32, 1e-4)]
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}

# (handgrad layer, torch module, per-example input shape, move the channel axis)
TWINS = {
    "BatchNorm-1d": (lambda: L.BatchNorm(momentum=0.2), lambda: nn.BatchNorm1d(3, momentum=0.2),
                     (3,), True),
    "BatchNorm-seq": (lambda: L.BatchNorm(eps=1e-3), lambda: nn.BatchNorm1d(4, eps=1e-3),
                      (6, 4), True),
    "BatchNorm-2d": (lambda: L.BatchNorm(), lambda: nn.BatchNorm2d(3), (4, 5, 3), True),
    "BatchNorm-2d-plain": (lambda: L.BatchNorm(affine=False),
                           lambda: nn.BatchNorm2d(2, affine=False), (3, 4, 2), True),
    "BatchNorm-untracked": (lambda: L.BatchNorm(track_running_stats=False),
                            lambda: nn.BatchNorm1d(3, track_running_stats=False), (5, 3), True),
    "LayerNorm-shape": (lambda: L.LayerNorm((4, 5)), lambda: nn.LayerNorm((4, 5)), (3, 4, 5),
                        False),
    "LayerNorm-axes-nobias": (lambda: L.LayerNorm(axes=1, bias=False),
                              lambda: nn.LayerNorm(6, bias=False), (3, 6), False),
    "LayerNorm-plain": (lambda: L.LayerNorm(5, elementwise_affine=False, eps=1e-3),
                        lambda: nn.LayerNorm(5, elementwise_affine=False, eps=1e-3), (5,), False),
    "GroupNorm-2d": (lambda: L.GroupNorm(2), lambda: nn.GroupNorm(2, 6), (3, 4, 6), True),
    "GroupNorm-1d-plain": (lambda: L.GroupNorm(3, affine=False),
                           lambda: nn.GroupNorm(3, 6, affine=False), (5, 6), True),
    "InstanceNorm-1d-tracked": (
        lambda: L.InstanceNorm(affine=True, track_running_stats=True, momentum=0.3),
        lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True, momentum=0.3),
        (7, 3), True),
    "InstanceNorm-2d": (lambda: L.InstanceNorm(), lambda: nn.InstanceNorm2d(2), (4, 5, 2), True),
}


def to_torch(a, moved, requires_grad=False):
    t = torch.tensor(np.ascontiguousarray(np.moveaxis(a, -1, 1) if moved else a))
    return t.requires_grad_(requires_grad)


def from_torch(t, moved):
    a = t.detach().numpy()
    return np.moveaxis(a, 1, -1) if moved else a


def torch_params(module):
    return {"gamma": module.weight, "beta": module.bias}


@pytest.mark.parametrize("dtype, rtol", TOLERANCES, ids=["float64", "float32"])
@pytest.mark.parametrize("key", list(TWINS))
def test_layer_matches_torch_over_training_steps_then_eval(key, dtype, rtol):
    make_layer, make_module, shape, moved = TWINS[key]
    layer, module = make_layer(), make_module().to(TORCH_DTYPE[dtype])
    rng = np.random.default_rng(len(key))
    layer.build(shape, dtype=dtype)
    with torch.no_grad():  # random affine parameters, copied into torch
        for name, tensor in torch_params(module).items():
            if name in layer.parameters:
                layer.parameters[name][...] = rng.standard_normal(tensor.shape).astype(dtype)
                tensor.copy_(torch.tensor(layer.parameters[name]))
    assert set(layer.buffers) == ({"running_mean", "running_var"}
                                  if module.__dict__.get("track_running_stats") else set())
    for step in range(3):  # gradients accumulate over the steps in both libraries
        x = (2 * rng.standard_normal((4, *shape)) + step).astype(dtype)
        tx = to_torch(x, moved, requires_grad=True)
        y, ty = layer.forward(x), module(tx)
        assert y.dtype == dtype
        assert_close(y, from_torch(ty, moved), rtol, f"forward {step}")
        dy = rng.standard_normal(y.shape).astype(dtype)
        dx = layer.backward(dy)
        ty.backward(to_torch(dy, moved))
        assert dx.dtype == dtype
        assert_close(dx, from_torch(tx.grad, moved), rtol, f"dx {step}")
        for name, tensor in torch_params(module).items():
            if tensor is not None:
                assert_close(layer.gradients[name], tensor.grad.numpy(), rtol, f"d{name} {step}")
    for name, value in layer.buffers.items():
        assert value.dtype == dtype
        assert_close(value, getattr(module, name).numpy(), rtol, name)
    module.eval()
    x = rng.standard_normal((3, *shape)).astype(dtype)
    y_eval = layer.forward(x, training=False)
    assert_close(y_eval, from_torch(module(to_torch(x, moved)), moved), rtol, "eval forward")


def test_default_initialization_matches_torch():
    layer = L.BatchNorm().build((5, 3))
    module = nn.BatchNorm1d(3)
    np.testing.assert_array_equal(layer.parameters["gamma"], module.weight.detach().numpy())
    np.testing.assert_array_equal(layer.parameters["beta"], module.bias.detach().numpy())
    np.testing.assert_array_equal(layer.buffers["running_mean"], module.running_mean.numpy())
    np.testing.assert_array_equal(layer.buffers["running_var"], module.running_var.numpy())
    assert layer.parameters["gamma"].dtype == np.float32
    assert set(L.LayerNorm(axes=2).build((3, 4)).parameters) == {"gamma", "beta"}
    assert L.LayerNorm(axes=2).build((3, 4)).parameters["gamma"].shape == (3, 4)
    assert L.InstanceNorm().build((5, 3)).parameters == {}
    assert L.InstanceNorm().buffers == {}
    assert set(L.GroupNorm(2, affine=False).build((4,)).parameters) == set()


# ------------------------------------------------------------ running statistics
RUNNING = {
    "BatchNorm": (lambda: L.BatchNorm(momentum=0.3, dtype="float64"), (5, 3)),
    "InstanceNorm": (lambda: L.InstanceNorm(affine=True, track_running_stats=True,
                                            dtype="float64"), (6, 2)),
}
running = pytest.mark.parametrize("name", list(RUNNING))


def fresh(name, seed=0):
    make, shape = RUNNING[name]
    layer = make()
    x = np.random.default_rng(100 + seed).standard_normal((4, *shape)) + 1.0
    return layer, x


@running
def test_eval_uses_running_statistics_and_changes_nothing(name):
    layer, x = fresh(name)
    y_train = layer.forward(x)
    layer.clear_caches()
    mean, var = (layer.buffers[k].copy() for k in ("running_mean", "running_var"))
    assert not np.array_equal(mean, 0) and not np.array_equal(var, 1)
    y1, y2 = layer.forward(x, training=False), layer.forward(x, training=False)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(layer.buffers["running_mean"], mean)
    np.testing.assert_array_equal(layer.buffers["running_var"], var)
    with pytest.raises(RuntimeError, match="backward"):
        layer.backward(y1)
    expected = (x - mean) / np.sqrt(var + layer.eps) * layer.parameters["gamma"] \
        + layer.parameters["beta"]
    assert_close(y1, expected, 1e-12, "eval = affine of the running statistics")
    assert np.max(np.abs(y1 - y_train)) > 1e-2


@running
def test_frozen_layer_still_updates_running_statistics(name):
    layer, x = fresh(name)
    layer.trainable = False
    y = layer.forward(x)
    assert not np.array_equal(layer.buffers["running_mean"], 0)
    layer.backward(np.ones_like(y) + x)
    assert all(not np.any(g) for g in layer.gradients.values())


@running
def test_gradcheck_and_two_forwards_two_backwards_with_running_statistics(name):
    layer, x = fresh(name)
    result = gradcheck(layer, x, rng=0)  # (its dy is drawn from rng=0, x from seed 100)
    assert result.passed, result.errors
    layer.zero_grad()
    x2 = x[:3] * 2
    y1, y2 = layer.forward(x), layer.forward(x2)
    dy1, dy2 = np.cos(y1), np.sin(y2)
    dx2, dx1 = layer.backward(dy2), layer.backward(dy1)
    total = {k: g.copy() for k, g in layer.gradients.items()}
    separate = {k: 0.0 for k in total}
    for xi, dyi, dxi in ((x, dy1, dx1), (x2, dy2, dx2)):
        layer.zero_grad()
        layer.forward(xi)
        np.testing.assert_allclose(layer.backward(dyi), dxi, rtol=1e-13)
        separate = {k: separate[k] + layer.gradients[k] for k in total}
    for key in total:
        np.testing.assert_allclose(total[key], separate[key], rtol=1e-12)


@running
def test_config_and_buffers_round_trip(name, tmp_path):
    layer, x = fresh(name)
    model = Sequential([layer], name="norm")
    for _ in range(2):
        model.forward(x)
    model.clear_caches()
    config = json.loads(json.dumps(layer.get_config()))
    assert type(layer).from_config(config).get_config() == layer.get_config()
    path = tmp_path / "model.safetensors"
    io.save(model, path)
    loaded = io.load(path)
    for key, value in model.named_buffers().items():
        np.testing.assert_array_equal(loaded.named_buffers()[key], value)
    np.testing.assert_array_equal(loaded.forward(x, training=False),
                                  model.forward(x, training=False))


def test_sequential_eval_mode_selects_running_statistics():
    model = Sequential([L.Dense(4, dtype="float64", seed=0), L.BatchNorm(dtype="float64")])
    x = np.random.default_rng(0).standard_normal((6, 3))
    y_train = model.forward(x)
    model.clear_caches()
    y_eval = model.eval().forward(x)
    bn = model[1]
    h = model[0].forward(x, training=False)
    np.testing.assert_allclose(y_eval, (h - bn.buffers["running_mean"])
                               / np.sqrt(bn.buffers["running_var"] + 1e-5), rtol=1e-12)
    assert not np.allclose(y_eval, y_train)


def test_float64_input_into_float32_layer_with_running_statistics():
    layer = L.BatchNorm(affine=False)
    layer.forward(np.zeros((4, 3), np.float32) + np.arange(4, dtype=np.float32)[:, None])
    assert layer.buffers["running_mean"].dtype == np.float32
    with pytest.raises(TypeError, match=r"input dtype float64 does not match.*float32 running"):
        layer.forward(np.zeros((4, 3)))


# ----------------------------------------------------------------------- errors
def test_wrong_feature_size_after_build():
    layer = L.BatchNorm()
    layer.forward(np.ones((2, 5, 3), np.float32))
    with pytest.raises(ValueError, match=r"BatchNorm: was built for inputs whose trailing axes are "
                                         r"\(3,\).*received per-example shape \(5, 4\)"):
        layer.forward(np.ones((2, 5, 4), np.float32))
    ln = L.LayerNorm(axes=2)
    ln.forward(np.ones((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"LayerNorm: was built .*\(3, 4\)"):
        ln.forward(np.ones((2, 4, 4), np.float32))


def test_batch_norm_with_one_example_in_training():
    layer = L.BatchNorm()
    with pytest.raises(ValueError, match=r"more than 1 value per channel when training"):
        layer.forward(np.ones((1, 3), np.float32))
    assert layer.forward(np.ones((1, 3), np.float32), training=False).shape == (1, 3)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        L.InstanceNorm().forward(np.ones((2, 1, 3), np.float32))


@pytest.mark.parametrize("make, shape, error, pattern", [
    (lambda: L.LayerNorm(4), (3, 5), ValueError, r"normalized_shape \(4,\).*\(3, 5\)"),
    (lambda: L.LayerNorm((2, 5)), (3, 5), ValueError, "normalized_shape"),
    (lambda: L.LayerNorm(axes=3), (3, 5), ValueError, r"LayerNorm: expects inputs"),
    (lambda: L.GroupNorm(4), (3, 6), ValueError,
     r"GroupNorm: 'num_groups' 4 must divide the number of channels.*6 channels"),
    (lambda: L.InstanceNorm(), (6,), ValueError, r"InstanceNorm: expects inputs \(N, L, C\)"),
])
def test_layer_rejects_an_incompatible_input(make, shape, error, pattern):
    with pytest.raises(error, match=pattern):
        make().forward(np.ones((2, *shape), np.float32))
    with pytest.raises(error, match=pattern):
        make().output_shape(shape)


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: L.BatchNorm(momentum=1.5), ValueError, "BatchNorm: 'momentum' must be"),
    (lambda: L.BatchNorm(momentum=None), TypeError, "BatchNorm: 'momentum' must be"),
    (lambda: L.BatchNorm(eps=-1), ValueError, "'eps' must be"),
    (lambda: L.BatchNorm(affine=1), TypeError, "'affine' must be a bool"),
    (lambda: L.InstanceNorm(track_running_stats="no"), TypeError, "'track_running_stats'"),
    (lambda: L.GroupNorm(0), ValueError, "GroupNorm: 'num_groups' must be an int >= 1"),
    (lambda: L.GroupNorm(2.0), TypeError, "'num_groups' must be an int"),
    (lambda: L.LayerNorm(4, axes=1), ValueError, "give 'normalized_shape' or 'axes', not both"),
    (lambda: L.LayerNorm(axes=0), ValueError, "'axes' must be an int >= 1"),
    (lambda: L.LayerNorm(axes=1.0), TypeError, "'axes' must be an int"),
    (lambda: L.LayerNorm((4, 0)), ValueError, "'normalized_shape' must hold ints >= 1"),
    (lambda: L.LayerNorm(elementwise_affine="yes"), TypeError, "'elementwise_affine'"),
])
def test_bad_config(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


def test_output_shape_and_copy_keep_state():
    layer = L.GroupNorm(2)
    assert layer.output_shape((4, 5, 6)) == (4, 5, 6)
    twin = copy.deepcopy(layer)
    assert twin.get_config() == layer.get_config()
