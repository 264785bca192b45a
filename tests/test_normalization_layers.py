"""Normalization layers against their ``torch.nn`` twins over several training steps
(forward, every gradient, running statistics, then evaluation outputs), plus the
running-statistics modes the generic contract (tests/test_layers_contract.py, where
batch norm runs without running statistics) does not cover, and bad input.

Weights are copied handgrad -> torch: gamma -> ``weight``, beta -> ``bias`` (same
shapes). Inputs are moved from channels-last (N, *S, C) to (N, C, *S) for every torch
module but ``nn.LayerNorm``, which normalizes trailing axes in both libraries.
"""

import copy
import functools
import json

import numpy as np
import pytest

from handgrad import io
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import assert_close, gradcheck

from tolerances import assert_outputs_close, condition_bounds

torch = pytest.importorskip("torch")
nn = torch.nn

TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}

# (handgrad layer, torch module, per-example input shape, move the channel axis); small
# shapes: the tolerances are measured with one run per input entry
TWINS = {
    "BatchNorm-1d": (lambda: L.BatchNorm(momentum=0.2), lambda: nn.BatchNorm1d(3, momentum=0.2),
                     (3,), True),
    "BatchNorm-seq": (lambda: L.BatchNorm(eps=1e-3), lambda: nn.BatchNorm1d(4, eps=1e-3),
                      (6, 4), True),
    "BatchNorm-2d": (lambda: L.BatchNorm(), lambda: nn.BatchNorm2d(3), (3, 4, 3), True),
    "BatchNorm-2d-plain": (lambda: L.BatchNorm(affine=False),
                           lambda: nn.BatchNorm2d(2, affine=False), (3, 4, 2), True),
    "BatchNorm-cumulative": (lambda: L.BatchNorm(momentum=None),
                             lambda: nn.BatchNorm1d(4, momentum=None), (5, 4), True),
    "BatchNorm-untracked": (lambda: L.BatchNorm(track_running_stats=False),
                            lambda: nn.BatchNorm1d(3, track_running_stats=False), (5, 3), True),
    "LayerNorm-shape": (lambda: L.LayerNorm((4, 5)), lambda: nn.LayerNorm((4, 5)), (2, 4, 5),
                        False),
    "LayerNorm-axes-nobias": (lambda: L.LayerNorm(axes=1, bias=False),
                              lambda: nn.LayerNorm(6, bias=False), (3, 6), False),
    "LayerNorm-plain": (lambda: L.LayerNorm(5, elementwise_affine=False, eps=1e-3),
                        lambda: nn.LayerNorm(5, elementwise_affine=False, eps=1e-3), (5,), False),
    "RMSNorm-shape": (lambda: L.RMSNorm((4, 5)), lambda: nn.RMSNorm((4, 5)), (2, 4, 5), False),
    "RMSNorm-axes-eps": (lambda: L.RMSNorm(axes=1, eps=1e-3), lambda: nn.RMSNorm(6, eps=1e-3),
                         (3, 6), False),
    "RMSNorm-plain": (lambda: L.RMSNorm(5, elementwise_affine=False),
                      lambda: nn.RMSNorm(5, elementwise_affine=False), (5,), False),
    "GroupNorm-2d": (lambda: L.GroupNorm(2), lambda: nn.GroupNorm(2, 6), (2, 3, 6), True),
    "GroupNorm-1d-plain": (lambda: L.GroupNorm(3, affine=False),
                           lambda: nn.GroupNorm(3, 6, affine=False), (5, 6), True),
    "InstanceNorm-1d-tracked": (
        lambda: L.InstanceNorm(affine=True, track_running_stats=True, momentum=0.3),
        lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True, momentum=0.3),
        (7, 3), True),
    "InstanceNorm-2d": (lambda: L.InstanceNorm(), lambda: nn.InstanceNorm2d(2), (3, 4, 2), True),
}


STEPS = 3  # training steps: gradients accumulate and running statistics move


def to_torch(a, moved, requires_grad=False):
    t = torch.tensor(np.ascontiguousarray(np.moveaxis(a, -1, 1) if moved else a))
    return t.requires_grad_(requires_grad)


def from_torch(t, moved):
    a = t.detach().numpy()
    return np.moveaxis(a, 1, -1) if moved else a


def torch_params(module):
    return {"gamma": module.weight, "beta": getattr(module, "bias", None)}  # RMSNorm: no bias


def draw(key):
    """float64 data of a twin: random affine parameters, each step's x and dy, and an
    evaluation batch."""
    make_layer, _, shape, _ = TWINS[key]
    rng = np.random.default_rng(len(key))
    layer = make_layer().build(shape, dtype=np.float64)
    data = {name: rng.standard_normal(p.shape) for name, p in layer.parameters.items()}
    for step in range(STEPS):
        data[f"x{step}"] = 2 * rng.standard_normal((4, *shape)) + step
        data[f"dy{step}"] = rng.standard_normal((4, *shape))  # a norm keeps x's shape
    data["x_eval"] = rng.standard_normal((3, *shape))
    return data


def run_handgrad(key, data, dtype):
    """The steps, then evaluation, on a fresh layer: {output: array}."""
    make_layer, _, shape, _ = TWINS[key]
    layer = make_layer().build(shape, dtype=dtype)
    for name, value in layer.parameters.items():
        value[...] = data[name]
    out = {}
    for step in range(STEPS):
        out[f"y{step}"] = layer.forward(data[f"x{step}"])
        out[f"dx{step}"] = layer.backward(data[f"dy{step}"])
        out.update({f"d{name}{step}": g.copy() for name, g in layer.gradients.items()})
    out.update({name: value.copy() for name, value in layer.buffers.items()
                if name != "num_batches_tracked"})  # the counter: test_cumulative_average
    out["eval"] = layer.forward(data["x_eval"], training=False)
    return out


def run_torch(key, data, dtype):
    """The same through the torch module, in the keys of :func:`run_handgrad`."""
    _, make_module, _, moved = TWINS[key]
    module = make_module().to(TORCH_DTYPE[dtype])
    params = {k: t for k, t in torch_params(module).items() if t is not None}
    with torch.no_grad():
        for name, tensor in params.items():
            tensor.copy_(torch.tensor(data[name]))
    out = {}
    for step in range(STEPS):
        tx = to_torch(data[f"x{step}"], moved, requires_grad=True)
        ty = module(tx)
        ty.backward(to_torch(data[f"dy{step}"], moved))
        out[f"y{step}"], out[f"dx{step}"] = from_torch(ty, moved), from_torch(tx.grad, moved)
        out.update({f"d{name}{step}": t.grad.numpy().copy() for name, t in params.items()})
    if module.__dict__.get("track_running_stats"):
        out.update({name: getattr(module, name).numpy() for name in ("running_mean",
                                                                     "running_var")})
    module.eval()
    out["eval"] = from_torch(module(to_torch(data["x_eval"], moved)), moved)
    return out


@functools.cache
def bounds(key):
    """(terms, scale) of each output, measured in float64. They serve the float32 run
    too: rounding the data to float32 changes these sizes by a relative 6e-8."""
    data = draw(key)
    return condition_bounds(lambda: run_handgrad(key, data, np.float64), data.values())


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("key", list(TWINS))
def test_layer_matches_torch_over_training_steps_then_eval(key, dtype):
    data = {name: value.astype(dtype) for name, value in draw(key).items()}
    ours, theirs = run_handgrad(key, data, dtype), run_torch(key, data, dtype)
    assert set(ours) == set(theirs)
    assert all(value.dtype == dtype for value in ours.values())
    assert_outputs_close(ours, theirs, bounds(key), dtype)


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
    gamma, beta = layer.parameters["gamma"], layer.parameters["beta"]
    inv_std = 1 / np.sqrt(var + layer.eps)
    expected = (x - mean) * inv_std * gamma + beta
    size = (np.abs(x) + np.abs(mean)) * inv_std * np.abs(gamma) + np.abs(beta)  # a few roundings
    assert_close(y1, expected, scale=size.max(), what="eval = affine of the running statistics")
    assert np.max(np.abs(y1 - y_train)) > 1e-2  # a property: the two modes differ


@running
def test_a_frozen_layer_runs_in_inference_mode(name):
    """Keras's rule: a frozen layer normalizes with its running statistics and keeps them
    (PyTorch's requires_grad=False would still update them)."""
    layer, x = fresh(name)
    layer.forward(x)  # running statistics unlike the next batch's
    kept = {k: v.copy() for k, v in layer.buffers.items()}
    expected = layer.forward(2 * x, training=False)
    layer.trainable = False
    y = layer.forward(2 * x)
    for key, value in kept.items():
        np.testing.assert_array_equal(layer.buffers[key], value, err_msg=key)
    np.testing.assert_array_equal(y, expected)
    dx = layer.backward(np.ones_like(y) + x)
    gamma = layer.parameters["gamma"]  # evaluation: dx = gamma dy / sqrt(running_var + eps)
    want = gamma * (np.ones_like(y) + x) / np.sqrt(kept["running_var"] + layer.eps)
    assert_close(dx, want, scale=np.abs(want).max(), what="frozen dx")
    assert all(not np.any(g) for g in layer.gradients.values())


def test_a_frozen_backbone_keeps_its_batch_norm_statistics_during_fit():
    """trainable=False set on a container reaches its BatchNorm: fit leaves the running
    statistics of the frozen backbone alone (they used to move, here by about 1.1)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)) + 1.5
    y = rng.integers(0, 2, 64)
    moved = {}
    for frozen in (False, True):
        backbone = Sequential([L.Dense(6), L.BatchNorm()], name="backbone")
        model = Sequential([backbone, L.Dense(2)], seed=0, dtype="float64")
        model.build((4,))
        backbone.trainable = not frozen
        kept = backbone[1].buffers["running_mean"].copy()
        model.compile("sgd", "cross_entropy")
        model.fit(x, y, epochs=2, batch_size=16, rng=0, verbose=0)
        moved[frozen] = np.abs(backbone[1].buffers["running_mean"] - kept).max()
    assert moved[True] == 0.0
    assert moved[False] > 0.1  # trainable, the statistics do move


@pytest.mark.parametrize("make", [lambda: L.BatchNorm(momentum=0.99),
                                  lambda: L.InstanceNorm(momentum=0.9,
                                                         track_running_stats=True)])
def test_a_keras_style_momentum_warns_with_torchs_meaning(make):
    with pytest.warns(UserWarning, match=r"PyTorch's momentum.*running = \(1 - momentum\) \* "
                                         r"running \+ momentum \* batch.*write momentum=0\.1?"):
        make()


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
        # the same kernel on the same values; the running statistics do not enter training
        np.testing.assert_array_equal(layer.backward(dyi), dxi)
        separate = {k: separate[k] + layer.gradients[k] for k in total}
    for key in total:  # 0 + g2 + g1 == 0 + g1 + g2: two additions commute exactly
        np.testing.assert_array_equal(total[key], separate[key])


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
    mean, inv_std = bn.buffers["running_mean"], 1 / np.sqrt(bn.buffers["running_var"] + bn.eps)
    assert_close(y_eval, (h - mean) * inv_std, scale=np.max((np.abs(h) + np.abs(mean)) * inv_std),
                 what="eval = running statistics")
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
    (lambda: L.BatchNorm(16), ValueError, r"BatchNorm: received momentum=16.*PyTorch's "
     r"BatchNorm2d\(16\).*output size only \(the input size comes from the data\): write "
     r"BatchNorm\(\)"),
    (lambda: L.InstanceNorm(8), ValueError, r"InstanceNorm1d\(8\).*write InstanceNorm\(\)"),
    (lambda: L.GroupNorm(2, 16), ValueError, r"GroupNorm: received eps=16.*PyTorch's "
     r"GroupNorm\(2, 16\).*write GroupNorm\(2\)"),
    (lambda: L.BatchNorm(momentum="0.1"), TypeError, "BatchNorm: 'momentum' must be"),
    (lambda: L.BatchNorm(eps=-1), ValueError, "'eps' must be"),
    (lambda: L.BatchNorm(affine=1), TypeError, "'affine' must be a bool"),
    (lambda: L.InstanceNorm(track_running_stats="no"), TypeError, "'track_running_stats'"),
    (lambda: L.GroupNorm(0), ValueError, "GroupNorm: 'num_groups' must be an int >= 1"),
    (lambda: L.GroupNorm(2.0), TypeError, "'num_groups' must be an int"),
    (lambda: L.LayerNorm(4, axes=1), ValueError, "give 'normalized_shape' or 'axes', not both"),
    (lambda: L.LayerNorm(axes=0), ValueError, "'axes' must be an int >= 1"),
    (lambda: L.LayerNorm(axes=1.0), TypeError, "'axes' must be an int"),
    (lambda: L.LayerNorm((4, -1)), ValueError, "'normalized_shape' must hold ints >= 0"),
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


def test_cumulative_average_counts_batches_and_moves_with_torch():
    """momentum=None: the n-th batch has weight 1 / n (here 2 batches: the running mean is
    their means' average); the counter is torch's num_batches_tracked, both ways."""
    rng = np.random.default_rng(0)
    layer = L.BatchNorm(momentum=None).build((3,), dtype=np.float64)
    xs = [rng.standard_normal((6, 3)) + k for k in range(2)]
    for x in xs:
        layer.forward(x)
    assert int(layer.buffers["num_batches_tracked"]) == 2
    assert_close(layer.buffers["running_mean"], (xs[0].mean(0) + xs[1].mean(0)) / 2)
    layer.forward(xs[0], training=False)  # evaluation counts nothing
    assert int(layer.buffers["num_batches_tracked"]) == 2
    model = Sequential([layer], input_shape=(3,))
    state = {k.split(".", 1)[1]: v for k, v in io.to_torch_state_dict(model, numpy=True).items()}
    assert int(state["num_batches_tracked"]) == 2
    module = nn.BatchNorm1d(3, momentum=None).double()
    module.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    fresh = Sequential([L.BatchNorm(momentum=None)], input_shape=(3,), dtype="float64")
    io.from_torch(module, fresh)  # the counter is imported: the next batch weighs 1 / 3
    x = xs[1] * 2
    module(torch.tensor(x))
    fresh.forward(x)
    assert int(fresh.layers[0].buffers["num_batches_tracked"]) == 3
    assert_close(fresh.layers[0].buffers["running_mean"], module.running_mean.numpy())
    assert_close(fresh.layers[0].buffers["running_var"], module.running_var.numpy())


def test_momentum_none_without_running_statistics_uses_the_batch():
    x = np.random.default_rng(2).standard_normal((5, 3))
    layer = L.BatchNorm(momentum=None, track_running_stats=False, dtype="float64")
    module = nn.BatchNorm1d(3, momentum=None, track_running_stats=False).double()
    assert_close(layer.forward(x), module(torch.tensor(x)).detach().numpy())
    assert "num_batches_tracked" not in layer.buffers


def test_momentum_none_only_for_batch_norm():
    with pytest.raises(TypeError, match="InstanceNorm: 'momentum' must be a finite real"):
        L.InstanceNorm(momentum=None)


def test_cumulative_counter_is_saved_and_loaded(tmp_path):
    model = Sequential([L.BatchNorm(momentum=None)], input_shape=(3,), seed=0)
    for _ in range(3):
        model.forward(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32))
    io.save(model, tmp_path / "bn.safetensors")
    loaded = io.load(tmp_path / "bn.safetensors")
    assert loaded.layers[0].momentum is None
    assert int(loaded.layers[0].buffers["num_batches_tracked"]) == 3
