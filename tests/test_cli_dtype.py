"""``train --dtype``: the parameters, the optimizer state and the data in float32 (the
default) or float64, recorded in metrics.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli_support import assert_usage_error, quick_train, run_main, write_small
from handgrad import io as hio
from handgrad.cli.args import AUGMENT
from handgrad.data import Dataset
from handgrad.data.augment import augmentation
from handgrad.zoo import networks


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_small(tmp_path_factory.mktemp("data") / "data")


def _saved(out):
    """(metrics, {name: dtype} of the saved parameters, {dtype} of the optimizer state)."""
    metrics = json.loads((out / "metrics.json").read_text())
    checkpoint = hio.load_checkpoint(out / "model.safetensors")
    parameters = {name: value.dtype
                  for name, value in checkpoint.model.named_parameters().items()}
    state = {value.dtype for slots in checkpoint.optimizer.state.values()
             for value in (slots.values() if isinstance(slots, dict) else [slots])
             if isinstance(value, np.ndarray) and value.dtype.kind == "f"}
    return metrics, parameters, state


@pytest.mark.parametrize(("argv", "dtype"), [((), "float32"),
                                              (("--dtype", "float64"), "float64"),
                                              (("--dtype", "float32"), "float32")])
def test_the_saved_model_and_metrics_have_the_chosen_dtype(data_dir, tmp_path, argv, dtype):
    out = tmp_path / "run"
    code, _, err = quick_train("--dataset", f"idx:{data_dir}", "--batch-size", 16,
                               "--out", out, *argv)
    assert code == 0, err
    metrics, parameters, state = _saved(out)
    assert metrics["dtype"] == dtype
    assert parameters and set(parameters.values()) == {np.dtype(dtype)}, parameters
    assert state == {np.dtype(dtype)}  # Adam's moments follow the parameters
    assert metrics["steps_run"] == 4 and np.isfinite(metrics["test_loss"])


def test_a_float64_graph_model_trains_and_its_batch_norm_state_is_float64(data_dir, tmp_path):
    out = tmp_path / "run"
    code, stdout, err = run_main(["train", "--dataset", f"idx:{data_dir}", "--model", "resnet",
                                  "--epochs", 1, "--batch-size", 32, "--dtype", "float64",
                                  "--out", out])
    assert code == 0, err
    assert "float64" in stdout  # the run's description line names the dtype
    model = hio.load(out / "model.safetensors")
    assert model.dtype == np.float64
    arrays = {**model.named_parameters(), **dict(model.named_buffers())}
    assert any("bn" in name for name in arrays)  # BatchNorm's running statistics are there
    assert {value.dtype for value in arrays.values()} == {np.dtype(np.float64)}, arrays


@pytest.mark.parametrize(("recipe", "shape"), [(AUGMENT["mnist1d"], (4, 40, 1)),
                                               ({"shift": 1, "mode": "zero"}, (4, 8, 8, 1))])
def test_the_augmentations_keep_float64(recipe, shape):
    x = np.random.default_rng(0).standard_normal(shape)
    assert augmentation(**recipe)(x, np.random.default_rng(1)).dtype == np.float64


def test_an_unknown_dtype_is_refused_in_one_line(data_dir):
    assert_usage_error(*quick_train("--dataset", f"idx:{data_dir}", "--dtype", "float16"),
                       "--dtype", "float16", "float32", "float64")


@pytest.mark.parametrize("name", networks.MODELS)
@pytest.mark.parametrize("shape", [(12, 1), (8, 8, 1)], ids=["1d", "2d"])
def test_every_zoo_network_is_built_in_the_dtype_asked(name, shape):
    rng = np.random.default_rng(0)
    data = Dataset(rng.standard_normal((4, *shape)), np.arange(4) % 3,
                   rng.standard_normal((2, *shape)), np.arange(2), num_classes=3, name="tiny")
    for dtype in ("float64", "float32", None):
        model = networks.build(name, data, seed=0, dtype=dtype)
        expected = np.dtype(dtype or "float32")  # float32 by default
        assert {a.dtype for a in model.named_parameters().values()} == {expected}
        assert model.predict(data.x_test.astype(expected)).dtype == expected
