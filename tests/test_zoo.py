"""The default networks: training-batch augmentation (handgrad.data.augment and
fit(augment=...)), the residual CNNs written as graph Models (handgrad.zoo.resnet) and
the command line's per-(dataset, model) defaults."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import handgrad as hg
from cli_support import run_main
from handgrad import io as hio
from handgrad import layers as L
from handgrad import zoo
from handgrad.cli import args as cli_args
from handgrad.cli import train as cli_train
from handgrad.data import (
    Dataset,
    augmentation,
    compose,
    gaussian_noise,
    random_scale,
    random_shift,
)
from handgrad.testing import assert_close, gradcheck

DTYPES = [np.float32, np.float64]


def distinct(shape, dtype=np.float32, seed=0):
    """Values that are all different (so a shift is recognisable), none zero."""
    values = np.random.default_rng(seed).permutation(int(np.prod(shape))) + 1.0
    return values.reshape(shape).astype(dtype)


def _zero_shift(example, shift, axis):
    """The loop twin of mode="zero": out[t] = x[t - s], zeros where t - s is outside."""
    out = np.zeros_like(example)
    length = example.shape[axis]
    for t in range(length):
        if 0 <= t - shift < length:
            index = [slice(None)] * example.ndim
            source = list(index)
            index[axis], source[axis] = t, t - shift
            out[tuple(index)] = example[tuple(source)]
    return out


def _loop_shift(example, shifts, mode):
    out = example
    for axis, shift in enumerate(shifts):
        out = np.roll(out, shift, axis=axis) if mode == "roll" else _zero_shift(out, shift,
                                                                               axis)
    return out


# ------------------------------------------------------------------ augmentations


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 11, 2), (5, 9, 8, 3)])
@pytest.mark.parametrize("mode", ["roll", "zero"])
def test_random_shift_matches_a_loop_over_the_examples(dtype, shape, mode):
    x = distinct(shape, dtype)
    limit = 3
    out = random_shift(x, np.random.default_rng(1), limit, mode=mode)
    assert out.shape == x.shape and out.dtype == x.dtype and out is not x
    spatial = len(shape) - 2
    offsets = list(itertools.product(range(-limit, limit + 1), repeat=spatial))
    found = []
    for n in range(len(x)):  # each example is its own shift of the input, within the limit
        matches = [s for s in offsets if np.array_equal(out[n], _loop_shift(x[n], s, mode))]
        assert len(matches) == 1, (n, matches)
        found.append(matches[0])
    assert len(set(found)) > 1  # the examples are shifted independently
    assert np.array_equal(x, distinct(shape, dtype))  # the input is left as it was


def test_random_shift_per_axis_limits_and_zero_limit():
    x = distinct((8, 6, 5, 1))
    rows_only = random_shift(x, 0, (2, 0))
    for n in range(len(x)):  # the columns never move
        assert any(np.array_equal(rows_only[n], np.roll(x[n], s, axis=0)) for s in range(-2, 3))
    unchanged = random_shift(x, 0, 0)
    assert np.array_equal(unchanged, x) and unchanged is not x


@pytest.mark.parametrize("dtype", DTYPES)
def test_random_scale_multiplies_each_example_by_one_factor(dtype):
    x = distinct((40, 9, 2), dtype)
    out = random_scale(x, np.random.default_rng(3), 0.2)
    assert out.shape == x.shape and out.dtype == x.dtype
    factors = out / x
    per_example = factors[:, :1, :1]
    assert_close(factors, np.broadcast_to(per_example, factors.shape), dtype=dtype)
    assert np.all(np.abs(per_example - 1) <= 0.2) and np.ptp(per_example) > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_noise_has_the_asked_spread(dtype):
    x = np.zeros((200, 50, 4), dtype)
    sigma = 0.3
    out = gaussian_noise(x, np.random.default_rng(4), sigma)
    assert out.shape == x.shape and out.dtype == x.dtype
    n = out.size
    # the sample mean and standard deviation, within 6 standard errors of theirs
    assert abs(out.mean()) <= 6 * sigma / np.sqrt(n)
    assert abs(out.std() - sigma) <= 6 * sigma / np.sqrt(2 * n)


def test_augmentations_are_deterministic_and_draw_only_from_the_generator():
    x = distinct((16, 20, 1))
    pipeline = augmentation(shift=4, scale=0.1, noise=0.05)
    first = pipeline(x, np.random.default_rng(7))
    second = pipeline(x, np.random.default_rng(7))
    assert np.array_equal(first, second)
    assert not np.array_equal(first, pipeline(x, np.random.default_rng(8)))
    same = compose(lambda a, r: random_shift(a, r, 4), lambda a, r: random_scale(a, r, 0.1),
                   lambda a, r: gaussian_noise(a, r, 0.05))
    assert np.array_equal(same(x, np.random.default_rng(7)), first)
    assert "random_shift(max_shift=4" in repr(pipeline)
    assert np.array_equal(augmentation()(x, 0), x)  # nothing asked: nothing changes


@pytest.mark.parametrize("call, error, fragments", [
    (lambda: random_shift(np.zeros((2, 5)), 0, 1), ValueError, ["'x'", "(2, 5)"]),
    (lambda: random_shift(np.zeros((2, 5, 1), int), 0, 1), TypeError, ["'x'", "int"]),
    (lambda: random_shift([[[1.0]]], 0, 1), TypeError, ["'x'", "list"]),
    (lambda: random_shift(np.zeros((2, 5, 1)), 0, -1), ValueError, ["'max_shift'", "-1"]),
    (lambda: random_shift(np.zeros((2, 5, 1)), 0, 1.5), TypeError, ["'max_shift'", "1.5"]),
    (lambda: random_shift(np.zeros((2, 5, 4, 1)), 0, (1,)), TypeError, ["'max_shift'", "2"]),
    (lambda: random_shift(np.zeros((2, 5, 1)), 0, 1, mode="wrap"), ValueError,
     ["'mode'", "'roll'", "'wrap'"]),
    (lambda: random_shift(np.zeros((2, 5, 1)), None, 1), TypeError, ["'rng'", "None"]),
    (lambda: random_scale(np.zeros((2, 3)), 0, 1.0), ValueError, ["'amount'", "1.0"]),
    (lambda: random_scale(np.zeros((2, 3)), 0, "0.1"), TypeError, ["'amount'", "str"]),
    (lambda: gaussian_noise(np.zeros((2, 3)), 0, -0.1), ValueError, ["'sigma'", "-0.1"]),
    (lambda: gaussian_noise(np.zeros((2, 3)), 0, float("nan")), ValueError, ["'sigma'"]),
    (lambda: compose(random_scale, 3), TypeError, ["callable", "3"]),
    (lambda: augmentation(shift=-2), ValueError, ["'shift'", "-2"]),
    (lambda: augmentation(shift=2.0), TypeError, ["'shift'", "2.0"]),
    (lambda: augmentation(scale=2), ValueError, ["'scale'", "2"]),
    (lambda: augmentation(mode="edge"), ValueError, ["'mode'", "'edge'"]),
])
def test_bad_arguments_are_named(call, error, fragments):
    with pytest.raises(error) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value)


# ------------------------------------------------------------- fit(augment=...)


class Recorder:
    """An augmentation that records what it got and adds a constant."""

    def __init__(self):
        self.batches, self.rngs = [], []

    def __call__(self, x, rng):
        self.batches.append(x.copy() if not isinstance(x, list) else [a.copy() for a in x])
        self.rngs.append(rng)
        return x + 100.0 if not isinstance(x, list) else [a + 100.0 for a in x]


def _dense_model(seed=0):
    model = hg.Sequential([L.Dense(3)], seed=seed, input_shape=(4,))
    return model.compile("sgd", "cross_entropy")


def test_fit_augments_training_batches_only():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((20, 4)).astype(np.float32), rng.integers(0, 3, 20)
    x_val = np.full((6, 4), 7.0, np.float32)  # recognisable: never augmented
    recorder = Recorder()
    history = _dense_model().fit(x, y, epochs=2, batch_size=8, rng=5, verbose=0,
                                 validation_data=(x_val, y[:6]), augment=recorder)
    assert [len(b) for b in recorder.batches] == [8, 8, 4] * 2
    seen = np.concatenate(recorder.batches)
    assert not np.any(seen == 7.0)  # validation data never went through augment
    assert np.array_equal(np.sort(seen[:20], axis=0), np.sort(x, axis=0))
    assert all(r is recorder.rngs[0] and isinstance(r, np.random.Generator)
               for r in recorder.rngs)
    # the validation loss is that of the unaugmented validation set
    model = _dense_model()
    model.fit(x, y, epochs=2, batch_size=8, rng=5, verbose=0, augment=Recorder())
    assert_close(history.history["val_loss"][-1],
                 model.evaluate(x_val, y[:6], return_dict=True)["loss"], dtype=np.float32)


def test_fit_with_augment_is_reproducible_and_changes_training():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((32, 10, 1)).astype(np.float32), rng.integers(0, 3, 32)

    def trained(augment):
        model = hg.Sequential([L.Conv1D(2, 3), L.GlobalAvgPool1D(), L.Dense(3)], seed=0,
                              input_shape=(10, 1))
        model.compile("adam", "cross_entropy")
        model.fit(x, y, epochs=2, batch_size=8, rng=3, verbose=0, augment=augment)
        return model.named_parameters()

    pipeline = augmentation(shift=2, scale=0.1, noise=0.1)
    first, second, plain = trained(pipeline), trained(pipeline), trained(None)
    assert all(np.array_equal(first[k], second[k]) for k in first)
    assert any(not np.array_equal(first[k], plain[k]) for k in first)


def test_fit_hands_a_model_with_two_inputs_the_list():
    a, b = hg.Input((3,), name="a"), hg.Input((2,), name="b")
    model = hg.Model([a, b], L.Dense(2)(L.Concatenate()([a, b])), seed=0)
    model.compile("sgd", "cross_entropy")
    rng = np.random.default_rng(2)
    xa, xb = (rng.standard_normal((10, n)).astype(np.float32) for n in (3, 2))
    recorder = Recorder()
    model.fit({"a": xa, "b": xb}, rng.integers(0, 2, 10), batch_size=4, rng=0, verbose=0,
              augment=recorder)
    assert all(isinstance(batch, list) and [v.shape[1] for v in batch] == [3, 2]
               for batch in recorder.batches)


def test_fit_refuses_an_augment_that_is_not_callable():
    with pytest.raises(TypeError, match=r"'augment'.*callable.*3"):
        _dense_model().fit(np.zeros((4, 4)), np.zeros(4, int), verbose=0, augment=3)


# ------------------------------------------------------------------ the ResNets


def _by_hand(model, x):
    """The residual network's forward, its layers called one by one (inference mode)."""
    layer = {lay.name: lay for lay in model.layers}

    def call(name, value):
        return layer[name].forward(value, training=False)

    h = call("stem_relu", call("stem_bn", call("stem_conv", x)))
    stages = sorted({name.split("_")[0] for name in layer if name.startswith("stage")})
    for index, stage in enumerate(stages):
        if index:
            h = call(f"pool{index}", h)
        block = f"{stage}_block1"
        inner = call(f"{block}_relu1", call(f"{block}_bn1", call(f"{block}_conv1", h)))
        inner = call(f"{block}_bn2", call(f"{block}_conv2", inner))
        shortcut = h
        if f"{block}_proj" in layer:
            shortcut = call(f"{block}_proj_bn", call(f"{block}_proj", h))
        h = np.maximum(inner + shortcut, 0)
    return call("logits", call("gap", h))


@pytest.mark.parametrize("builder, shape", [(zoo.resnet1d, (12, 2)),
                                            (zoo.resnet2d, (6, 6, 1))])
def test_resnet_is_a_graph_with_residual_additions(builder, shape):
    widths = (3, 3, 4)[:len(shape)]
    model = builder(5, shape, widths=widths, seed=0, dtype="float64")
    assert isinstance(model, hg.Model) and model.built
    assert not any(isinstance(layer, L.Residual) for layer in model.layers)
    adds = [layer for layer in model.layers if isinstance(layer, L.Add)]
    assert len(adds) == len(widths)  # one block per stage
    rng = np.random.default_rng(0)
    for layer in model.layers:  # running statistics that are not the identity
        if isinstance(layer, L.BatchNorm):
            for name, buffer in layer.named_buffers().items():
                buffer[...] = rng.uniform(0.5, 1.5, buffer.shape) if "var" in name else \
                    rng.standard_normal(buffer.shape)
    x = rng.standard_normal((3, *shape))
    out = model.forward(x, training=False)
    assert out.shape == (3, 5)
    assert_close(out, _by_hand(model, x), dtype=np.float64, terms=64)


def test_resnet_backward_matches_finite_differences():
    model = zoo.resnet1d(3, (8, 1), widths=(2, 3), stem_kernel=3, seed=1, dtype="float64")
    x = np.random.default_rng(0).standard_normal((4, 8, 1))
    result = gradcheck(model, x, rng=0, max_entries=12)
    assert result.passed, result.errors


def test_resnet_defaults_and_bad_arguments():
    assert zoo.resnet1d(seed=0).count_params() == 134_090  # the tuned network
    with pytest.raises(ValueError, match=r"'kernel'.*odd.*4"):
        zoo.resnet1d(kernel=4)
    with pytest.raises(TypeError, match=r"'blocks'.*3 ints"):
        zoo.resnet1d(blocks=(1, 1))
    with pytest.raises(ValueError, match=r"'input_shape'.*\(L, C\)"):
        zoo.resnet(10, (4,), widths=(2,))
    with pytest.raises(ValueError, match="too small"):
        zoo.resnet(10, (1, 1), widths=(2, 2))


def _dataset(shape, num_classes=4, n=8):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, *shape)).astype(np.float32)
    y = rng.integers(0, num_classes, n)
    return Dataset(x, y, x, y, num_classes=num_classes, name="toy")


@pytest.mark.parametrize("shape", [(40, 1), (8, 8, 1)])
def test_build_gives_a_fresh_resnet_for_the_dataset(shape):
    dataset = _dataset(shape)
    first, second = zoo.build("resnet", dataset, seed=3), zoo.build("resnet", dataset, seed=3)
    assert first is not second and isinstance(first, hg.Model)
    assert first.predict(dataset.x_test).shape == (8, 4)
    params = first.named_parameters()
    assert all(np.array_equal(v, second.named_parameters()[k]) for k, v in params.items())
    assert "resnet" in zoo.MODELS and {"cnn", "mlp", "gru"} <= set(zoo.MODELS)


# ------------------------------------------------------------ command-line defaults


def _args(*argv):
    return cli_args.parser().parse_args(["train", *argv])


@pytest.mark.parametrize("dataset", ["mnist1d", "digits"])
def test_resnet_is_the_default_model_with_its_recipe(dataset):
    args = _args("--dataset", dataset)
    run = cli_train._settings(args)
    assert args.model == "resnet" and run.optimizer == "adamw"
    assert run == cli_args.DEFAULTS[(dataset, "resnet")] and run.weight_decay == 0
    # MNIST-1D's recipe augments and smooths; digits' cross-validated one does neither
    assert (run.augment is not None, run.label_smoothing > 0) == (
        (True, True) if dataset == "mnist1d" else (False, False))
    off = cli_train._settings(_args("--dataset", dataset, "--no-augment"))
    assert off.augment is None and off[:6] == run[:6]
    mine = cli_train._settings(_args("--dataset", dataset, "--optimizer", "sgd",
                                     "--label-smoothing", "0", "--weight-decay", "0.5"))
    assert (mine.optimizer, mine.label_smoothing, mine.weight_decay) == ("sgd", 0.0, 0.5)


@pytest.mark.parametrize("model", ["cnn", "mlp", "gru"])
def test_the_other_models_keep_their_defaults(model):
    run = cli_train._settings(_args("--model", model))
    assert run.optimizer == "adam" and run.augment is None and run.label_smoothing == 0
    assert run[:3] == cli_args.DEFAULTS.get(("mnist1d", model), cli_args.DEFAULTS["mnist1d"])[:3]
    assert cli_train._settings(_args("--dataset", "idx:somewhere")).optimizer == "adam"


def test_help_names_the_augmentation_and_the_default_model():
    text = " ".join(cli_args.parser()._subparsers._group_actions[0].choices["train"]
                    .format_help().split())
    assert "--no-augment" in text and "shift 4 scale 0.1 noise 0.05" in text
    assert "resnet for mnist1d and digits, cnn for idx" in text
    assert "adamw for mnist1d --model resnet" in text


def test_a_digits_run_records_its_recipe(tmp_path):
    pytest.importorskip("sklearn")
    code, _, err = run_main(["train", "--dataset", "digits", "--epochs", "1", "--quiet",
                               "--out", tmp_path])
    assert code == 0 and err == "", err
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    recipe = cli_args.DEFAULTS[("digits", "resnet")]
    assert (metrics["model"], metrics["optimizer"]) == ("resnet", "adamw")
    assert metrics["augment"] == recipe.augment
    assert metrics["label_smoothing"] == recipe.label_smoothing
    assert metrics["weight_decay"] == 0 and metrics["blas_threads"] in (1, None)
    # the saved model has a plain cross-entropy and reproduces the reported test figures
    loaded = hio.load(tmp_path / "model.safetensors")
    from handgrad.data import load_digits

    data = load_digits()
    logs = loaded.evaluate(data.x_test, data.y_test, return_dict=True)
    assert logs["accuracy"] == metrics["test_accuracy"]
    code, _, _ = run_main(["train", "--dataset", "digits", "--epochs", "1", "--quiet",
                           "--label-smoothing", "0.1", "--out", tmp_path / "smoothed"])
    assert code == 0
    smoothed = json.loads((tmp_path / "smoothed" / "metrics.json").read_text())
    assert smoothed["label_smoothing"] == 0.1 and smoothed["test_loss"] != metrics["test_loss"]


def test_bad_label_smoothing_is_a_usage_error(tmp_path):
    pytest.importorskip("sklearn")
    code, _, err = run_main(["train", "--dataset", "digits", "--label-smoothing", "1.5",
                               "--out", tmp_path])
    assert code == 2 and "--label-smoothing" in err and "1.5" in err



def test_feature_maps_of_a_graph_model():
    pytest.importorskip("matplotlib")
    from handgrad.inspect import plots

    model = zoo.resnet1d(3, (8, 1), widths=(2, 3), stem_kernel=3, seed=0)
    x = np.random.default_rng(0).standard_normal((8, 1)).astype(np.float32)
    maps = []
    plots._collect_graph(model, x[None], maps)
    convs = [layer for layer in model.layers if isinstance(layer, L.Conv1D)]
    assert [label.split()[0] for label, _ in maps] == [conv.name for conv in convs]
    assert_close(maps[0][1], convs[0].forward(x[None], training=False)[0], dtype=np.float32)
    figure = plots.feature_maps(model, x)
    assert len(figure.axes) >= len(convs) + 1  # the input and one panel per convolution
