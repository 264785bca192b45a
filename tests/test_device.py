"""Device placement (``device="cpu" | "cuda"``, ``Layer.to``): the CPU behaviour and the
refusal without CuPy run everywhere; the GPU tests skip unless CuPy sees a GPU (the
full CuPy-against-NumPy table is ``python -m benchmarks.gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import io
from handgrad import layers as L
from handgrad._device import check_device, to_device, to_host
from handgrad.ops._engine import dispatch
from handgrad.testing import assert_close

try:
    check_device("test", "cuda")
    GPU, WHY = True, ""
except (ImportError, RuntimeError) as error:
    GPU, WHY = False, str(error)
needs_gpu = pytest.mark.skipif(not GPU, reason=f"no CUDA device: {WHY}")
no_cupy = pytest.mark.skipif(GPU, reason="CuPy and a GPU are present")


def _model(device=None):
    """The model's seed draws the weights (a layer's own seed only its random stream)."""
    return hg.Sequential([L.Dense(6), L.ReLU(), L.Dropout(0.3, seed=2), L.Dense(3)],
                         input_shape=(4,), device=device, seed=0)


@no_cupy
def test_cuda_is_refused_with_the_extra_named():
    with pytest.raises((ImportError, RuntimeError), match=r"handgrad\[cuda\]|no usable GPU"):
        L.Dense(3, device="cuda")
    model = _model()
    with pytest.raises((ImportError, RuntimeError), match=r"handgrad\[cuda\]|no usable GPU"):
        model.to("cuda")
    assert model.device == "cpu"  # refused before anything moved


def test_bad_device_names_the_argument():
    with pytest.raises(ValueError, match=r"'device' must be 'cpu' or 'cuda' .*received 'gpu'"):
        L.Dense(3, device="gpu")
    with pytest.raises(ValueError, match=r"'device'.*received 0"):
        _model().to(0)
    for indexed in ("cuda:1", "cpu:0"):  # once read as 'cuda' (GPU 0) and 'cpu'
        with pytest.raises(ValueError, match=rf"Device\(i\).use\(\).*received '{indexed}'"):
            L.Dense(3, device=indexed)


def test_to_cpu_keeps_arrays_and_tied_weights():
    model = _model()
    shared = model.layers[0].parameters["W"]
    model.layers[0].parameters["alias"] = shared  # two names, one array
    before = {k: v.copy() for k, v in model.named_parameters().items()}
    assert model.to("cpu") is model
    assert model.layers[0].parameters["alias"] is model.layers[0].parameters["W"]
    assert all(layer.device == "cpu" for _, layer in model.walk())
    for key, value in model.named_parameters().items():
        np.testing.assert_array_equal(value, before[key])


def test_to_device_moves_nested_batches_and_passes_the_rest():
    x, labels = np.ones((2, 3), np.float32), np.arange(2)
    moved = to_device(({"a": x}, [labels, None], 3), "cpu")
    assert moved[0]["a"] is x and moved[1][0] is labels and moved[1][1] is None
    assert moved[2] == 3 and to_host(x) is x


def test_engine_never_takes_foreign_arrays():
    """The numba kernels are for exact NumPy arrays; anything else (CuPy) takes xp code."""

    class Foreign(np.ndarray):
        pass

    assert not dispatch.enabled(np.zeros(3).view(Foreign))


# ------------------------------------------------------- both devices, the same numbers
def _same(got, want, exact, terms):
    """Bit for bit through the NumPy stand-in (the same arithmetic); on a GPU within the
    float32 tolerance of ``terms`` summed terms."""
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        assert_close(got, want, dtype=np.float32, terms=terms)


def _same_seed_same_numbers(device, exact=False):
    """Initialization and dropout masks are drawn on the host, so they match exactly."""
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    cpu, other = _model(), _model(device)
    assert other.device == device and all(layer.device == device for _, layer in other.walk())
    for key, value in cpu.named_parameters().items():
        moved = other.named_parameters()[key]
        assert to_host(moved) is not moved, f"{key} is not a device array"
        np.testing.assert_array_equal(to_host(moved), value, err_msg=key)
    y_cpu = cpu.forward(x, training=True)
    y_other = other.forward(to_device(x, device), training=True)
    assert to_host(y_other) is not y_other, "the model's output is not a device array"
    np.testing.assert_array_equal(to_host(y_other) == 0, y_cpu == 0)  # the same dropout mask
    _same(to_host(y_other), y_cpu, exact, terms=6)


def _fit_matches_cpu_and_saves_host_arrays(device, tmp_path, exact=False):
    """Plain SGD: its update is linear in the gradient, so the devices' rounding stays at
    the level of the sums (Adam divides by sqrt(v) and turns the rounding of near-zero
    gradients into steps of the learning rate's size). ``rng`` fixes the shuffling."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = rng.integers(0, 3, 64)
    losses, models = {}, {}
    for where in ("cpu", device):
        model = models[where] = _model(where)
        model.compile("sgd", "cross_entropy", metrics=["accuracy"])
        history = model.fit(x, y, epochs=2, batch_size=16, verbose=0, rng=0).history
        losses[where] = [float(v) for v in history["loss"]]
        predicted = model.predict(x)
        assert type(predicted) is np.ndarray, f"predict on {where}: {type(predicted)}"
    _same(np.array(losses[device]), np.array(losses["cpu"]), exact, terms=64)
    io.save(models[device], tmp_path / "m.safetensors")
    back = io.load(tmp_path / "m.safetensors", device=device)
    assert back.device == device
    for key, value in models[device].named_parameters().items():
        np.testing.assert_array_equal(to_host(back.named_parameters()[key]), to_host(value),
                                      err_msg=key)
    assert back.to("cpu").device == "cpu"


def test_same_seed_same_numbers_through_the_device_path(numpy_as_cupy):
    _same_seed_same_numbers("cuda", exact=True)


def test_fit_through_the_device_path_matches_cpu(numpy_as_cupy, tmp_path):
    _fit_matches_cpu_and_saves_host_arrays("cuda", tmp_path, exact=True)


@needs_gpu
def test_same_seed_same_numbers_on_both_devices():
    _same_seed_same_numbers("cuda")


@needs_gpu
def test_fit_on_gpu_matches_cpu_and_saves_host_arrays(tmp_path):
    _fit_matches_cpu_and_saves_host_arrays("cuda", tmp_path)
