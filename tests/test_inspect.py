"""``handgrad.inspect``: receptive fields, parameter memory, the summary table, confusion
counts, the gradient-norm logger and probe, and ``python -m handgrad inspect``."""

from __future__ import annotations

import contextlib
import copy
import io as stdio
import shutil
import sys

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import losses
from handgrad.cli import commands as cli
from handgrad.data import write_idx
from handgrad.inspect import (
    ReceptiveField,
    conv_layers,
    format_bytes,
    gradient_probe,
    next_field,
    parameter_bytes,
    receptive_fields,
)
from handgrad.metrics import confusion_counts
from handgrad.model import Sequential
from handgrad.testing import assert_close
from handgrad.training.callbacks import GradientNormLogger, layer_gradient_norms

from custom_layers import Doubled


def fields(layers, input_shape):
    model = Sequential(layers, input_shape=input_shape, seed=0)
    return [str(field) for _, field in receptive_fields(model)]


def window(size, jump):
    return ReceptiveField("window", tuple(size), tuple(jump))


# ------------------------------------------------------------ receptive fields by hand
def test_two_3x3_convolutions_see_5x5():
    assert fields([L.Conv2D(2, 3), L.ReLU(), L.Conv2D(2, 3)], (12, 12, 1)) == [
        "3x3 (jump 1)", "3x3 (jump 1)", "5x5 (jump 1)"]


def test_conv_pool_conv_sees_8_with_jump_2():
    # 1 -> 1 + 2 = 3 -> 3 + 1 * 1 = 4 (jump 2) -> 4 + 2 * 2 = 8
    assert fields([L.Conv1D(2, 3), L.MaxPool1D(2), L.Conv1D(2, 3)], (20, 1)) == [
        "3 (jump 1)", "4 (jump 2)", "8 (jump 2)"]
    assert fields([L.Conv2D(2, 3, padding=1), L.AvgPool2D(2), L.Conv2D(2, 3, padding="same")],
                  (12, 12, 1))[-1] == "8x8 (jump 2)"


def test_dilation_stride_and_per_axis_kernels():
    # dilated 3-tap conv spans 1 + 2 * 2 = 5; a (3, 5) kernel with stride (1, 2), then a
    # 2x2 pool with stride 1: 5 + 1 * 1 = 6 rows, 9 + 1 * 2 = 11 columns, jumps (1, 2).
    assert fields([L.Conv1D(2, 3, dilation=2)], (20, 1)) == ["5 (jump 1)"]
    assert fields([L.Conv2D(2, 3, dilation=2), L.Conv2D(2, (1, 5), stride=(1, 2)),
                   L.MaxPool2D(2, stride=1)], (30, 30, 1)) == [
        "5x5 (jump 1)", "5x9 (jump 1x2)", "6x11 (jump 1x2)"]
    # A dilated max pool: kernel 2, dilation 3 spans 4 positions; stride defaults to 2.
    assert fields([L.MaxPool1D(2, dilation=3), L.Conv1D(1, 2)], (30, 1)) == [
        "4 (jump 2)", "6 (jump 2)"]


def test_pointwise_layers_keep_the_field_and_flattening_sees_everything():
    assert fields([L.Conv1D(4, 5), L.Tanh(), L.Dropout(0.5), L.Dense(3),
                   L.GlobalMaxPool1D(), L.Dense(2)], (16, 2)) == [
        "5 (jump 1)", "5 (jump 1)", "5 (jump 1)", "5 (jump 1)", "whole input",
        "whole input"]
    assert fields([L.Conv2D(2, 3), L.Flatten(), L.Dense(2)], (6, 6, 1))[1:] == [
        "whole input", "whole input"]


def test_transposed_convolution_has_no_single_window():
    assert fields([L.Conv2D(2, 3), L.ConvTranspose2D(2, 2, stride=2), L.Conv2D(2, 3),
                   L.Flatten()], (8, 8, 1)) == ["3x3 (jump 1)", "n/a", "n/a", "whole input"]


def test_nested_sequential_and_residual_blocks():
    block = Sequential([L.Conv1D(4, 3, padding=1), L.ReLU(), L.Conv1D(4, 3, padding=1)])
    assert fields([L.Conv1D(4, 3, padding=1), L.Residual(block),
                   Sequential([L.MaxPool1D(2), L.Conv1D(4, 3, padding=1)])], (16, 4)) == [
        "3 (jump 1)", "7 (jump 1)", "12 (jump 2)"]
    # A strided shortcut: the larger window of the two branches (same jump).
    strided = L.Residual(L.Conv1D(4, 5, stride=2, padding=2),
                         shortcut=L.Conv1D(4, 1, stride=2))
    assert fields([strided], (16, 4)) == ["5 (jump 2)"]


def test_wavenet_block_uses_its_causal_dilated_kernel():
    assert fields([L.Conv1D(4, 2), L.WaveNetBlock(4, kernel_size=2, dilation=4)], (32, 1)) \
        == ["2 (jump 1)", "6 (jump 1)"]


def test_next_field_rules_on_special_fields():
    conv = L.Conv1D(2, 3)
    assert next_field(conv, ReceptiveField("whole")) == ReceptiveField("whole")
    assert next_field(conv, ReceptiveField("none")) == ReceptiveField("none")
    assert next_field(L.Flatten(), ReceptiveField("n/a")) == ReceptiveField("whole")
    assert next_field(conv, window((4,), (2,))) == window((8,), (2,))


class Custom(L.Layer):
    def _forward(self, x, training):
        return x, None


def test_unknown_layers_are_not_guessed():
    assert fields([L.Conv1D(2, 3), Custom()], (10, 1)) == ["3 (jump 1)", "n/a"]
    # a container is followed step by step only when it says it is a chain
    doubled = Doubled(L.Conv1D(2, 3, padding=1))
    assert fields([L.Conv1D(2, 3), doubled], (10, 2)) == ["3 (jump 1)", "n/a"]
    assert conv_layers(Sequential([doubled])) == [doubled.inner]


class WideConv(L.Conv1D):
    pass


class Norm(L.LayerNorm):
    pass


class Memory(L.GRU):
    pass


def test_subclasses_follow_their_family():
    # a convolution's window, a normalization's point-wise rule, a recurrent layer's
    # whole input: recognized by the family base class, whatever the class is called
    assert fields([WideConv(2, 3), Norm(), WideConv(2, 3, dilation=2), Memory(3)],
                  (12, 1)) == ["3 (jump 1)", "3 (jump 1)", "7 (jump 1)", "whole input"]


def test_inputs_without_spatial_axes_have_no_field():
    model = Sequential([L.Dense(4), L.ReLU(), L.Dense(2)], input_shape=(3,), seed=0)
    assert {str(f) for _, f in receptive_fields(model)} == {"-"}
    assert "Receptive field" not in model.summary(print_fn=None)


def test_receptive_fields_needs_a_built_sequential():
    with pytest.raises(ValueError, match="receptive_fields: 'model' must be a built Sequential"):
        receptive_fields(Sequential([L.Conv1D(2, 3)]))
    with pytest.raises(ValueError, match="receptive_fields"):
        receptive_fields(L.Conv1D(2, 3))
    residual = L.Residual(L.Conv1D(2, 3, padding=1)).build((8, 2))  # branches, not a chain
    with pytest.raises(ValueError, match="receptive_fields: 'model' must be a built Sequential"):
        receptive_fields(residual)


def gradient_extent(model, length, position):
    """Indices of the input positions whose gradient is non-zero for the output at
    ``position``: the receptive field measured by backpropagation."""
    for value in model.named_parameters().values():
        value[...] = np.abs(value) + 0.1  # positive weights: no cancellation to zero
    x = np.random.default_rng(0).standard_normal((1, length, 2))
    y = model.forward(x)
    dy = np.zeros_like(y)
    dy[0, position] = 1.0
    touched = np.flatnonzero(np.any(model.backward(dy)[0] != 0, axis=-1))
    return touched.min(), touched.max()


@pytest.mark.parametrize("seed", range(6))
def test_receptive_field_matches_the_gradient_footprint(seed):
    """Random conv / average-pool stacks: the computed size is the span of input positions
    with a non-zero gradient, and moving one output position moves it by the jump."""
    rng = np.random.default_rng(seed)
    layers = []
    for _ in range(3):
        k, s, d = (int(v) for v in rng.integers(1, [4, 3, 4]))
        layers.append(L.Conv1D(2, k, stride=s, dilation=d))
        if rng.random() < 0.5:
            layers.append(L.AvgPool1D(int(rng.integers(1, 4)), stride=int(rng.integers(1, 3))))
    model = Sequential(layers, input_shape=(400, 2), dtype="float64", seed=seed)
    field = receptive_fields(model)[-1][1]
    position = model.output_shape((400, 2))[0] // 2
    first, last = gradient_extent(model, 400, position)
    assert last - first + 1 == field.size[0]
    next_first, _ = gradient_extent(model, 400, position + 1)
    assert next_first - first == field.jump[0]


# ------------------------------------------------------------------- memory and summary
def test_parameter_bytes_counts_dtype_sizes():
    dense32 = L.Dense(3).build((4,))
    dense64 = L.Dense(3, dtype="float64").build((4,))
    assert parameter_bytes(dense32) == 15 * 4 and parameter_bytes(dense64) == 15 * 8
    assert parameter_bytes(L.ReLU()) == 0
    model = Sequential([L.Dense(3), L.Dense(2)], input_shape=(4,), seed=0)
    assert parameter_bytes(model) == (15 + 8) * 4


@pytest.mark.parametrize(("count", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (1024 ** 2, "1.0 MiB"), (5 * 1024 ** 3, "5.0 GiB"), (3 * 1024 ** 5, "3072.0 TiB")])
def test_format_bytes(count, text):
    assert format_bytes(count) == text


def test_summary_shows_memory_and_receptive_field_columns():
    model = Sequential([L.Conv2D(8, 3, name="conv"), L.MaxPool2D(2, name="pool"),
                        L.Flatten(name="flat"), L.Dense(10, name="fc")],
                       input_shape=(9, 9, 1), seed=0)
    text = model.summary(print_fn=None)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert rows["conv"] == ["conv", "(Conv2D)", "(None,", "7,", "7,", "8)", "80", "320", "B",
                            "3x3", "(jump", "1)"]
    assert rows["pool"] == ["pool", "(MaxPool2D)", "(None,", "3,", "3,", "8)", "0", "0", "B",
                            "4x4", "(jump", "2)"]
    assert rows["flat"][-5:] == ["0", "0", "B", "whole", "input"]
    assert rows["fc"][-5:] == ["730", "2.9", "KiB", "whole", "input"]  # 2920 bytes
    assert rows["Layer"] == ["Layer", "(type)", "Output", "shape", "Params", "Memory",
                             "Receptive", "field"]
    assert "Parameter memory: 3.2 KiB" in text  # (80 + 730) * 4 = 3240 bytes


# --------------------------------------------------------------- walking and confusion
def test_walk_gives_parameter_style_paths():
    inner = Sequential([L.Conv1D(2, 3, padding=1, name="c")], name="inner")
    model = Sequential([L.Conv1D(2, 3, name="c"), L.Residual(inner, name="res"),
                        L.Flatten(name="f")], input_shape=(10, 2), seed=0)
    paths = [path for path, _ in model.walk()]
    assert paths == ["", "c", "res", "res.block", "res.block.c", "f"]
    assert conv_layers(model) == [model["c"], inner["c"]]
    prefixes = {key.rpartition(".")[0] for key in model.named_parameters()}
    assert prefixes <= set(paths)


def test_confusion_counts_match_a_loop():
    rng = np.random.default_rng(0)
    y_true, y_pred = rng.integers(0, 4, 50), rng.integers(0, 4, 50)
    expected = np.zeros((4, 4), dtype=np.int64)
    for t, p in zip(y_true, y_pred):
        expected[t, p] += 1
    counts = confusion_counts(y_true, y_pred, 4)
    np.testing.assert_array_equal(counts, expected)
    assert counts.dtype == np.int64
    scores = np.eye(4)[y_pred] + 0.1 * rng.random((50, 4))
    np.testing.assert_array_equal(confusion_counts(y_true, scores, 4), expected)


@pytest.mark.parametrize(("args", "error", "match"), [
    (([0, 1], [0, 1], 0), ValueError, "'num_classes' must be an int >= 1"),
    (([0, 1], [0, 1], 2.0), ValueError, "'num_classes' must be an int >= 1"),
    (([0, 2], [0, 1], 2), ValueError, r"'y_true' labels must lie in \[0, 2\)"),
    (([0, 1], [-1, 1], 2), ValueError, r"'y_pred' labels must lie in \[0, 2\)"),
    (([0.0, 1.0], [0, 1], 2), TypeError, "'y_true' must be a 1-D array of integer labels"),
    (([0, 1], [[[0]]], 2), TypeError, "'y_pred' must be a 1-D array of integer labels"),
    (([0, 1, 1], [0, 1], 2), ValueError, "'y_true' and 'y_pred' must have the same length"),
])
def test_confusion_counts_bad_inputs(args, error, match):
    with pytest.raises(error, match=f"confusion_counts: {match}"):
        confusion_counts(*args)


# ------------------------------------------------------- gradient norms and the probe
def small_model(seed=0):
    return Sequential([L.Conv1D(3, 3, name="conv"), L.Tanh(), L.Flatten(),
                       L.Dense(3, name="fc")], input_shape=(8, 2), dtype="float64",
                      seed=seed).compile("sgd", "cross_entropy")


def small_data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 8, 2)), rng.integers(0, 3, n)


def test_layer_gradient_norms_are_per_layer_l2_norms():
    model = small_model()
    x, y = small_data()
    _, dlogits = losses.softmax_cross_entropy(model.forward(x), y)
    model.backward(dlogits)
    norms = layer_gradient_norms(model)
    grads = model.named_gradients()
    assert set(norms) == {"conv", "fc"}
    for layer in norms:
        parts = [grads[f"{layer}.{k}"] for k in ("W", "b")]
        expected = np.sqrt(sum(np.sum(g**2) for g in parts))
        # a sum of squares (in any order) of every entry, then its root
        assert_close(norms[layer], expected, dtype=np.float64, terms=sum(g.size for g in parts),
                     scale=expected, what=layer)


def test_gradient_norm_logger_records_each_step_and_epoch_means():
    model = small_model()
    initial = copy.deepcopy(model)
    x, y = small_data()
    per_step, per_epoch = GradientNormLogger(), GradientNormLogger(per="epoch")
    model.fit(x, y, epochs=2, batch_size=6, shuffle=False, callbacks=[per_step, per_epoch],
              verbose=0)
    assert per_step.steps == [1, 2, 3, 4] and per_epoch.steps == [1, 2]
    # The first step's norms are those of the initial model on the first batch.
    _, dlogits = losses.softmax_cross_entropy(initial.forward(x[:6]), y[:6])
    initial.backward(dlogits)
    for layer, value in layer_gradient_norms(initial).items():
        # the same model, batch and kernels: the same gradients
        assert per_step.norms[layer][0] == value
        steps = per_step.norms[layer]
        np.testing.assert_array_equal(per_epoch.norms[layer],
                                      [(steps[0] + steps[1]) / 2, (steps[2] + steps[3]) / 2])
    model.fit(x, y, epochs=1, batch_size=12, callbacks=[per_step], verbose=0)
    assert per_step.steps == [1]  # each fit starts a new record
    with pytest.raises(ValueError, match="GradientNormLogger: 'per' must be one of"):
        GradientNormLogger(per="batch")


def test_gradient_probe_trains_a_copy_only():
    model = small_model()
    before = {k: v.copy() for k, v in model.named_parameters().items()}
    x, y = small_data(40)
    logger = gradient_probe(model, x, y, steps=3, batch_size=8, rng=1)
    assert logger.steps == [1, 2, 3] and set(logger.norms) == {"conv", "fc"}
    assert all(np.all(np.isfinite(v)) and min(v) > 0 for v in logger.norms.values())
    for key, value in model.named_parameters().items():
        np.testing.assert_array_equal(value, before[key])
    assert model.optimizer.iterations == 0
    uncompiled = Sequential([L.Flatten(), L.Dense(3)], input_shape=(8, 2), seed=0)
    assert gradient_probe(uncompiled, x.astype(np.float32), y, steps=2).steps == [1, 2]
    with pytest.raises(ValueError, match="gradient_probe: 'steps' must be an int >= 1"):
        gradient_probe(model, x, y, steps=0)


# ------------------------------------------------------------------ the inspect command
def run_main(argv):
    out, err = stdio.StringIO(), stdio.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A digits CNN trained for one epoch with the CLI."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("sklearn")  # the digits dataset
    out_dir = tmp_path_factory.mktemp("trained")
    code, _, err = run_main(["train", "--dataset", "digits", "--model", "cnn", "--epochs", 1,
                             "--batch-size", 256, "--quiet", "--out", out_dir])
    assert code == 0, err
    return out_dir / "model.safetensors"


def assert_usage_error(result, *fragments):
    code, out, err = result
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("handgrad: error: "), err
    for fragment in fragments:
        assert fragment in lines[0]


def assert_picture(path):
    from matplotlib.image import imread

    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.std() > 0.01  # not blank


def test_inspect_prints_the_summary_and_writes_the_pictures(trained, tmp_path):
    out_dir = tmp_path / "pictures"
    code, out, err = run_main(["inspect", trained, "--dataset", "digits", "--out", out_dir,
                               "--probe-steps", 2])
    assert code == 0 and err == ""
    assert "Receptive field" in out and "10x10 (jump 2)" in out and "Parameter memory" in out
    names = ["filters.png", "feature_maps.png", "confusion_matrix.png", "gradient_norms.png"]
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(names)
    for name in names:
        assert_picture(out_dir / name)
        assert str(out_dir / name) in out


def test_inspect_writes_next_to_the_model_by_default(trained, tmp_path):
    model_path = tmp_path / "copy.safetensors"
    shutil.copy(trained, model_path)
    code, _, err = run_main(["inspect", model_path, "--dataset", "digits", "--probe-steps", 1])
    assert code == 0, err
    assert (tmp_path / "gradient_norms.png").exists() and (tmp_path / "filters.png").exists()


def test_inspect_usage_errors(trained, tmp_path, monkeypatch):
    missing = tmp_path / "missing.safetensors"
    assert_usage_error(run_main(["inspect", missing, "--dataset", "digits"]),
                       "cannot load model", "missing.safetensors")
    assert_usage_error(run_main(["inspect", trained, "--dataset", "nope"]), "'nope'")
    mnist = tmp_path / "mnist"
    mnist.mkdir()
    for split, n in (("train", 4), ("t10k", 2)):
        write_idx(mnist / f"{split}-images-idx3-ubyte", np.zeros((n, 28, 28), np.uint8))
        write_idx(mnist / f"{split}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8))
    assert_usage_error(run_main(["inspect", trained, "--dataset", f"idx:{mnist}"]),
                       "model expects inputs (8, 8, 1)", "(28, 28, 1)")
    assert_usage_error(run_main(["inspect", trained, "--dataset", "digits",
                                 "--probe-steps", 0]), "--probe-steps must be >= 1")
    assert_usage_error(run_main(["inspect"]), "model")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    assert_usage_error(run_main(["inspect", trained, "--dataset", "digits", "--out",
                                 tmp_path]), "matplotlib")
