"""Command-line runs: a failed or interrupted run keeps its work, one folder per run,
the help shows every option and default, the MNIST-1D message, metrics.json and the
validation split (the test set is used once, at the end)."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import handgrad
from cli_support import (
    HAS_MATPLOTLIB,
    OUTPUTS,
    assert_one_line_error,
    assert_usage_error,
    quick_train,
    run_main,
    write_small,
)
from handgrad import io as hio
from handgrad.cli import args as _cli_args
from handgrad.cli import train as _cli_train
from handgrad.data import load_idx
from handgrad.data import loaders as loaders_module
from handgrad.model import Sequential
from handgrad.ops._engine import dispatch as _accel


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_small(tmp_path_factory.mktemp("data") / "data")


# ------------------------------------------- failed and interrupted runs keep their work


def test_a_diverging_run_fails_in_one_line_and_keeps_the_model(data_dir, tmp_path):
    out = tmp_path / "run"
    code, stdout, err = quick_train("--dataset", f"idx:{data_dir}", "--lr", 1e30,
                                    "--optimizer", "sgd", "--batch-size", 8, "--out", out)
    assert_one_line_error(code, stdout, err, "training failed", "detect_anomaly",
                          f"saved in {out}", status=1)
    metrics = json.loads((out / "metrics.json").read_text(),
                         parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert metrics["stopped_by"] and metrics["steps_run"] >= 1
    assert hio.load_checkpoint(out / "model.safetensors").optimizer.iterations == \
        metrics["steps_run"]


@pytest.mark.parametrize("steps", [0, 3])
def test_ctrl_c_keeps_the_model_trained_so_far(data_dir, tmp_path, monkeypatch, steps):
    train_step = Sequential.train_step
    calls = []

    def interrupted(self, x, y):
        if len(calls) == steps:
            raise KeyboardInterrupt
        calls.append(len(x))
        return train_step(self, x, y)

    monkeypatch.setattr(Sequential, "train_step", interrupted)
    out = tmp_path / "run"
    code, stdout, err = quick_train("--dataset", f"idx:{data_dir}", "--batch-size", 8,
                                    "--out", out)
    assert_one_line_error(code, stdout, err, "training interrupted", status=130)
    if steps == 0:
        assert "nothing was trained" in err and not out.exists()  # its empty folder is gone
        out.mkdir()  # a folder the user made is kept, even empty
        assert quick_train("--dataset", f"idx:{data_dir}", "--out", out)[0] == 130
        assert out.is_dir() and not any(out.iterdir())
    else:
        assert f"saved in {out}" in err
        checkpoint = hio.load_checkpoint(out / "model.safetensors")
        assert checkpoint.optimizer.iterations == steps
        assert json.loads((out / "metrics.json").read_text())["steps_run"] == steps


def test_a_failed_save_puts_the_model_elsewhere(data_dir, tmp_path, monkeypatch):
    save = _cli_train.save

    def full_disk(model, path):
        if str(path).startswith(str(tmp_path)):
            raise OSError(28, "No space left on device")
        save(model, path)

    monkeypatch.setattr(_cli_train, "save", full_disk)
    code, out, err = quick_train("--dataset", f"idx:{data_dir}", "--out", tmp_path / "run")
    assert_one_line_error(code, out, err, "No space left on device",
                          "the trained model was saved to", status=1)
    rescued = Path(err.split("was saved to ")[1].split(" instead")[0])
    try:
        assert hio.load(rescued).input_shape == (8, 8, 1)
    finally:
        rescued.unlink()
        rescued.parent.rmdir()


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="the curve needs matplotlib")
def test_a_curve_that_cannot_be_drawn_is_a_note(data_dir, tmp_path, monkeypatch):
    from handgrad.inspect import plots as plot

    def broken(history):
        raise RuntimeError("no backend")

    monkeypatch.setattr(plot, "training_curves", broken)
    code, out, err = quick_train("--dataset", f"idx:{data_dir}", "--out", tmp_path)
    assert code == 0 and err == "" and "could not draw the training curve" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json", "model.safetensors"]


# ------------------------------------------------------------- 5. one folder per run


def test_each_default_run_gets_its_own_folder(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    (runs / "data-mlp-2").mkdir(parents=True)  # empty: reused
    (runs / "data-cnn").write_text("a file, not a folder: skipped")
    first = quick_train("--dataset", f"idx:{data_dir}")
    kept = (runs / "idx-data-mlp" / "model.safetensors").read_bytes()
    second = quick_train("--dataset", f"idx:{data_dir}", "--seed", 1)
    third = quick_train("--dataset", f"idx:{data_dir}", "--seed", 2)
    cnn = run_main(["train", "--dataset", f"idx:{data_dir}", "--epochs", 1, "--quiet"])
    folders = ["idx-data-mlp", "idx-data-mlp-2", "idx-data-mlp-3", "idx-data-cnn"]
    for (code, out, err), folder in zip([first, second, third, cnn], folders, strict=True):
        assert code == 0 and err == ""
        assert out.splitlines()[-1].startswith(f"wrote {os.path.join('runs', folder, '')}")
        assert sorted(p.name for p in (runs / folder).iterdir()) == OUTPUTS
    assert (runs / "idx-data-mlp" / "model.safetensors").read_bytes() == kept
    assert (runs / "data-mlp-2").is_dir() and not any((runs / "data-mlp-2").iterdir())


def test_an_explicit_out_is_never_overwritten_without_force(data_dir, tmp_path):
    out = tmp_path / "run"
    assert quick_train("--dataset", f"idx:{data_dir}", "--out", out)[0] == 0
    before = {name: (out / name).read_bytes() for name in OUTPUTS}
    result = quick_train("--dataset", f"idx:{data_dir}", "--out", out, "--seed", 1)
    assert_usage_error(*result, repr(str(out)), "--force", "model.safetensors")
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == before
    code, _, err = quick_train("--dataset", f"idx:{data_dir}", "--out", out, "--seed", 1,
                               "--force")
    assert code == 0 and err == ""
    assert (out / "model.safetensors").read_bytes() != before["model.safetensors"]
    assert json.loads((out / "metrics.json").read_text())["seed"] == 1


def test_an_explicit_out_with_other_files_is_used(data_dir, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    code, out, _ = quick_train("--dataset", f"idx:{data_dir}", "--out", tmp_path)
    assert code == 0 and f"wrote {tmp_path / 'model.safetensors'}" in out
    assert (tmp_path / "notes.txt").read_text() == "mine"


# --------------------------------------------------------------------------- 6. --help


def _subcommands():
    parser = _cli_args.parser()
    return next(a for a in parser._actions if a.choices and a.dest == "command").choices


def _flat(text):
    return " ".join(text.split())


@pytest.mark.parametrize("command", ["train", "evaluate", "inspect", "gradcheck", "export"])
def test_help_has_a_line_and_the_default_for_every_option(command):
    subparser = _subcommands()[command]
    text = _flat(subparser.format_help())
    for action in subparser._actions:
        assert action.help, action.dest
        assert _flat(action.help.split("%(default)")[0]) in text
        name = action.option_strings[-1] if action.option_strings else action.dest
        assert name in text
        if action.option_strings and action.default not in (None, False, "==SUPPRESS=="):
            assert f"(default: {action.default})" in text, name


def _defaults_in_help(column):
    """{dataset or (dataset, model): value} read back from the per-dataset help text."""
    found = {}
    for group in _cli_args.per_dataset(column).split(", "):
        value, names = group.split(" for ")
        for name in names.split(" and "):
            key = tuple(name.split(" --model ")) if " --model " in name else name
            found[key] = float(value)
    return found


@pytest.mark.parametrize("column, option", [(0, "--epochs"), (1, "--batch-size"), (2, "--lr")])
def test_help_shows_the_per_dataset_defaults(column, option):
    found = _defaults_in_help(column)
    for key, values in _cli_args.DEFAULTS.items():
        base = key[0] if isinstance(key, tuple) else key
        assert found.get(key, found[base]) == values[column], key
    text = _flat(_subcommands()["train"].format_help())
    assert f"{option} " in text and _flat(_cli_args.per_dataset(column)) in text


def test_help_explains_the_learning_rate_schedule():
    text = _flat(_subcommands()["train"].format_help())
    assert "--schedule {cosine,constant}" in text and "(default: cosine)" in text
    assert "warms up linearly" in text and "cosine" in text and "(default: 0.05)" in text


def test_train_uses_the_defaults_the_help_shows(data_dir, tmp_path):
    code, _, _ = run_main(["train", "--dataset", f"idx:{data_dir}", "--model", "mlp",
                           "--quiet", "--out", tmp_path])
    assert code == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    expected = _cli_args.DEFAULTS["idx"]
    assert (metrics["epochs"], metrics["batch_size"], metrics["lr"]) == expected[:3]
    assert (metrics["optimizer"], metrics["augment"]) == (expected.optimizer, None)
    assert (metrics["schedule"], metrics["validation_split"]) == ("cosine", 0.1)


def test_top_level_help_and_version():
    result = subprocess.run([sys.executable, "-m", "handgrad", "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == ""
    for command in _subcommands():
        assert command in result.stdout
    code, out, _ = run_main(["train", "--dataset", "digits", "--validation-split", "1"])
    assert code == 2 and out == ""
    version = subprocess.run([sys.executable, "-m", "handgrad", "--version"],
                             capture_output=True, text=True, timeout=120)
    assert version.stdout.strip() == f"handgrad {handgrad.__version__}"


# ------------------------------------------------------- 7. the MNIST-1D generation line


@pytest.fixture
def small_mnist1d(monkeypatch):
    """MNIST-1D with 200 signals, in a cache of its own (the real one is left alone)."""
    mnist1d_data = pytest.importorskip("mnist1d.data")
    real_args = mnist1d_data.get_dataset_args

    def small_args(as_dict=False):
        args = real_args()
        args.num_samples = 200
        return args

    monkeypatch.setattr(mnist1d_data, "get_dataset_args", small_args)
    fresh = functools.lru_cache(maxsize=4)(loaders_module._generate_mnist1d.__wrapped__)
    monkeypatch.setattr(loaders_module, "_generate_mnist1d", fresh)
    return real_args().seed


def test_load_mnist1d_says_what_it_generates_only_when_asked(small_mnist1d, capsys):
    loaders_module.load_mnist1d(seed=5, verbose=True)
    out = capsys.readouterr().out
    assert out.startswith("generating MNIST-1D (seed 5, ") and out.count("\n") == 1
    assert "... 160 train / 40 test examples in " in out and out.endswith(" s\n")
    loaders_module.load_mnist1d(seed=5, verbose=True)  # cached: nothing to say
    loaders_module.load_mnist1d(seed=6)  # not asked
    assert capsys.readouterr().out == ""
    with pytest.raises(TypeError, match=r"load_mnist1d: 'verbose' must be a bool"):
        loaders_module.load_mnist1d(verbose="yes")


@pytest.mark.parametrize("quiet", [False, True])
def test_train_on_mnist1d_says_what_happens_first(small_mnist1d, tmp_path, quiet):
    code, out, err = run_main(["train", "--epochs", 1, "--out", tmp_path,
                               *(["--quiet"] if quiet else [])])
    assert code == 0 and err == ""
    line = f"generating MNIST-1D (seed {small_mnist1d}, "
    if quiet:
        assert line not in out
    else:
        assert out.startswith(line) and "160 train / 40 test examples in" in out.splitlines()[0]
        assert "Epoch 1/1" in out and out.index(line) < out.index("Epoch 1/1")


# ------------------------------------------------------------------- 8. metrics.json


@pytest.mark.parametrize("compiled", [False, True])
def test_metrics_record_versions_and_compiled_kernels(data_dir, tmp_path, compiled):
    with _accel.use_compiled(compiled):
        assert quick_train("--dataset", f"idx:{data_dir}", "--out", tmp_path)[0] == 0
    environment = json.loads((tmp_path / "metrics.json").read_text())["environment"]
    numba = (importlib.metadata.version("numba") if importlib.util.find_spec("numba")
             else None)
    assert environment == {
        "handgrad": handgrad.__version__, "numpy": np.__version__, "numba": numba,
        "python": platform.python_version(),
        "compiled_kernels": compiled and _accel.available(),
    }


# --------------------------------------------------- 9. validation split, test set once


def _spy_evaluate(monkeypatch):
    calls = []
    evaluate = Sequential.evaluate

    def spy(self, x, y, *args, **kwargs):
        calls.append(np.array(x))
        return evaluate(self, x, y, *args, **kwargs)

    monkeypatch.setattr(Sequential, "evaluate", spy)
    return calls


@pytest.mark.parametrize("split", [0.25, 0.0])
def test_validation_comes_from_the_training_set_and_the_test_set_is_used_once(
        data_dir, tmp_path, monkeypatch, split):
    calls = _spy_evaluate(monkeypatch)
    code, out, _ = quick_train("--dataset", f"idx:{data_dir}", "--epochs", 2, "--batch-size", 16,
                               "--validation-split", split, "--out", tmp_path)
    assert code == 0
    data = load_idx(data_dir)
    n_fit = math.floor(len(data.x_train) * (1 - split))
    validations = calls[:-1]
    assert len(validations) == (2 if split else 0)
    for x_val in validations:  # the tail of the training set, never the test set
        np.testing.assert_array_equal(x_val, data.x_train[n_fit:])
    np.testing.assert_array_equal(calls[-1], data.x_test)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert ("val_loss" in metrics["history"]) == bool(split)
    steps = 2 * math.ceil(n_fit / 16)
    assert hio.load_checkpoint(tmp_path / "model.safetensors").optimizer.iterations == steps
    assert metrics["history"]["lr"][-1] == 0.0  # the cosine schedule ends with the run
    assert out.count("test accuracy") == 1


def test_constant_schedule_keeps_the_learning_rate(data_dir, tmp_path):
    code, _, _ = quick_train("--dataset", f"idx:{data_dir}", "--epochs", 2, "--lr", 0.01,
                             "--schedule", "constant", "--out", tmp_path)
    assert code == 0
    assert json.loads((tmp_path / "metrics.json").read_text())["history"]["lr"] == [0.01] * 2


@pytest.mark.parametrize("split, n_train, fragments", [
    ("1", 64, ["--validation-split must be in [0, 1); received 1.0"]),
    ("-0.1", 64, ["--validation-split must be in [0, 1)"]),
    ("nan", 64, ["--validation-split must be in [0, 1)"]),
    ("1e-20", 64, ["leaves 64 to train on and 0 to validate on"]),
    ("0.5", 1, ["leaves 0 to train on and 1 to validate on"]),
])
def test_a_validation_split_that_leaves_nothing_is_refused(tmp_path, monkeypatch, split,
                                                           n_train, fragments):
    data = write_small(tmp_path / "data", n_train=n_train)
    monkeypatch.chdir(tmp_path)
    assert_usage_error(*quick_train("--dataset", f"idx:{data}", "--validation-split", split),
                       *fragments)
    assert not (tmp_path / "runs").exists()
