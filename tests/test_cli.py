"""``python -m handgrad``: train, evaluate, gradcheck and the one-line usage errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cli_support import assert_usage_error, run_main, write_mnist_dir
from handgrad import io as hio
from handgrad.cli import args as _cli_args
from handgrad.io import safetensors as _safetensors
from handgrad.testing import assert_close

pytest.importorskip("sklearn")  # the digits dataset


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """One `train --dataset digits --epochs 1` run shared by the tests below."""
    out_dir = tmp_path_factory.mktemp("run")
    return (*run_main(["train", "--dataset", "digits", "--epochs", 1, "--out", out_dir]),
            out_dir)


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    return write_mnist_dir(tmp_path_factory.mktemp("mnist"))


# ---------------------------------------------------------------------- train


def test_train_writes_model_metrics_and_curve(digits_run):
    code, out, err, out_dir = digits_run
    assert code == 0 and err == ""
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "curve.png", "metrics.json", "model.safetensors"]
    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert metrics["dataset"] == "digits" and metrics["epochs"] == 1
    assert metrics["model"] == "resnet" and metrics["optimizer"] == "adamw"  # the default
    assert metrics["augment"] == _cli_args.DEFAULTS[("digits", "resnet")].augment
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["test_loss"] > 0
    assert len(metrics["history"]["loss"]) == 1 and len(metrics["history"]["val_loss"]) == 1
    png = (out_dir / "curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert "Total params" in out  # the summary
    assert sum(line.startswith("Epoch 1/1 ") for line in out.splitlines()) == 1
    assert f"test accuracy: {metrics['test_accuracy']:.4f}" in out
    assert "model.safetensors" in out.splitlines()[-1]
    # the saved model reproduces the reported accuracy
    from handgrad.data import load_digits

    model, data = hio.load(out_dir / "model.safetensors"), load_digits()
    assert model.input_shape == (8, 8, 1)
    logs = model.evaluate(data.x_test, data.y_test, return_dict=True)
    assert logs["accuracy"] == metrics["test_accuracy"]


def test_train_on_an_idx_directory(mnist_dir, tmp_path):
    code, out, err = run_main(["train", "--dataset", f"idx:{mnist_dir}", "--epochs", 1,
                               "--batch-size", 16, "--lr", 1e-3, "--optimizer", "sgd",
                               "--out", tmp_path, "--quiet"])
    assert code == 0 and err == ""
    assert "Epoch" not in out and "Total params" not in out
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["dataset"] == f"idx:{mnist_dir}"
    assert (metrics["epochs"], metrics["batch_size"], metrics["lr"]) == (1, 16, 1e-3)
    checkpoint = hio.load_checkpoint(tmp_path / "model.safetensors")
    assert checkpoint.model.input_shape == (28, 28, 1)
    assert checkpoint.optimizer.iterations == 4  # 64 examples / 16


def test_train_mlp_on_idx(mnist_dir, tmp_path):
    code, _, _ = run_main(["train", "--dataset", f"idx:{mnist_dir}", "--model", "mlp",
                           "--epochs", 1, "--out", tmp_path, "--quiet"])
    assert code == 0
    model = hio.load(tmp_path / "model.safetensors")
    assert type(model[0]).__name__ == "Flatten"


# ------------------------------------------------------------------- evaluate


def test_evaluate_prints_accuracy_and_confusion_matrix(digits_run):
    *_, out_dir = digits_run
    code, out, err = run_main(["evaluate", out_dir / "model.safetensors", "--dataset", "digits"])
    assert code == 0 and err == ""
    metrics = json.loads((out_dir / "metrics.json").read_text())
    lines = out.splitlines()
    assert lines[0] == f"test accuracy: {metrics['test_accuracy']:.4f}  (359 examples)"
    assert lines[1].split() == ["true\\pred", *map(str, range(10))]
    matrix = np.array([[int(v) for v in line.split()] for line in lines[2:]])
    assert matrix.shape == (10, 11) and np.array_equal(matrix[:, 0], np.arange(10))
    counts = matrix[:, 1:]
    assert counts.sum() == 359
    # a mean of 359 zeros and ones, however its batches group them
    assert_close(np.trace(counts) / 359, metrics["test_accuracy"], dtype=np.float64, terms=359,
                 scale=1.0, what="test accuracy")
    from handgrad.data import load_digits

    assert np.array_equal(counts.sum(axis=1), np.bincount(load_digits().y_test, minlength=10))


def test_evaluate_on_a_dataset_of_another_shape(digits_run, mnist_dir):
    *_, out_dir = digits_run
    result = run_main(["evaluate", out_dir / "model.safetensors", "--dataset",
                       f"idx:{mnist_dir}"])
    assert_usage_error(*result, "model expects inputs (8, 8, 1)", "(28, 28, 1)")


# ------------------------------------------------------------------ gradcheck


def test_gradcheck_prints_a_table():
    code, out, err = run_main(["gradcheck", "Conv2D", "Dense", "--configs", 1])
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["layer", "config", "max", "rel", "err", "ok"]
    assert [line.split()[0] for line in lines[1:3]] == ["Conv2D", "Dense"]
    assert all(line.endswith("pass") for line in lines[1:3])
    assert lines[-1] == "2 passed, 0 failed"


def test_gradcheck_reports_failures_with_status_1():
    code, out, _ = run_main(["gradcheck", "Dense", "--configs", 2, "--tolerance", "1e-30"])
    assert code == 1
    assert out.count("FAIL") == 2 and out.splitlines()[-1] == "0 passed, 2 failed"


def test_gradcheck_with_an_unknown_layer():
    result = run_main(["gradcheck", "Dense", "Conv9D"])
    assert_usage_error(*result, "unknown layer(s) Conv9D", "Conv2D")


# ------------------------------------------------------------- usage errors


@pytest.fixture(scope="module")
def bad_files(digits_run, tmp_path_factory):
    *_, out_dir = digits_run
    directory = tmp_path_factory.mktemp("bad")
    blob = (out_dir / "model.safetensors").read_bytes()
    (directory / "truncated.safetensors").write_bytes(blob[: len(blob) // 2])
    (directory / "garbage.safetensors").write_bytes(b"this is not a model at all")
    tensors, _ = _safetensors.read(out_dir / "model.safetensors")
    _safetensors.write(directory / "foreign.safetensors", tensors)
    write_mnist_dir(directory / "partial", files=["train-images-idx3-ubyte",
                                                  "train-labels-idx1-ubyte"])
    (directory / "empty").mkdir()
    return directory


@pytest.mark.parametrize("argv, fragments", [
    (["train", "--epochs", 0], ["--epochs must be >= 1; received 0"]),
    (["train", "--batch-size", -4], ["--batch-size must be >= 1; received -4"]),
    (["train", "--lr", -1], ["--lr must be a finite number > 0; received -1.0"]),
    (["train", "--lr", "nan"], ["--lr must be a finite number > 0"]),
    (["train", "--lr", "inf"], ["--lr must be a finite number > 0; received inf"]),
    (["train", "--warmup", "1"], ["--warmup must be in [0, 1); received 1.0"]),
    (["train", "--schedule", "step"], ["--schedule", "'step'", "cosine"]),
    (["gradcheck", "--tolerance", "0"], ["--tolerance must be a finite number > 0"]),
    (["train", "--epochs", "three"], ["--epochs", "three"]),
    (["train", "--dataset", "nope"], ["'nope'", "digits"]),
    (["train", "--model", "nope"], ["--model", "'nope'"]),
    (["train", "--optimizer", "lbfgs"], ["--optimizer", "'lbfgs'"]),
    (["train", "--dataset", "idx:"], ["idx:PATH"]),
    (["train", "--dataset", "idx:{bad}/missing"], ["missing", "does not exist"]),
    (["train", "--dataset", "idx:{bad}/empty"], ["no train images file"]),
    (["train", "--dataset", "idx:{bad}/partial"], ["no test images file"]),
    (["evaluate", "{bad}/absent.safetensors"], ["cannot load model", "absent.safetensors"]),
    (["evaluate", "{bad}/truncated.safetensors"], ["cannot load model", "truncated"]),
    (["evaluate", "{bad}/garbage.safetensors"], ["cannot load model", "garbage"]),
    (["evaluate", "{bad}/foreign.safetensors"], ["not a handgrad model file"]),
    (["gradcheck", "--configs", 0], ["--configs must be >= 1"]),
    (["frobnicate"], ["frobnicate"]),
    ([], ["choose a command"]),
])
def test_bad_options_print_one_line_and_exit_2(bad_files, argv, fragments):
    argv = [str(a).format(bad=bad_files) for a in argv]
    assert_usage_error(*run_main(argv), *fragments)


def test_a_model_file_with_a_corrupted_config_is_a_usage_error(digits_run, tmp_path):
    *_, out_dir = digits_run
    tensors, metadata = _safetensors.read(out_dir / "model.safetensors")
    document = json.loads(metadata["handgrad"])
    document["model"]["config"]["layers"][0]["config"]["out_channels"] = "many"
    path = tmp_path / "config.safetensors"
    _safetensors.write(path, tensors, {"handgrad": json.dumps(document)})
    assert_usage_error(*run_main(["evaluate", path, "--dataset", "digits"]),
                       "cannot load model")


def test_an_out_path_that_is_a_file_is_a_usage_error(mnist_dir, tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    result = run_main(["train", "--dataset", f"idx:{mnist_dir}", "--epochs", 1, "--quiet",
                       "--out", blocker])
    assert_usage_error(*result, "taken")


# ---------------------------------------------------------------- subprocess


@pytest.mark.parametrize("argv, status", [
    (["gradcheck", "Dense", "--configs", "1"], 0),
    (["train", "--epochs", "0"], 2),
    (["evaluate", "{bad}/truncated.safetensors", "--dataset", "digits"], 2),
])
def test_python_dash_m_exit_status_and_no_traceback(bad_files, argv, status):
    argv = [a.format(bad=bad_files) for a in argv]
    result = subprocess.run([sys.executable, "-m", "handgrad", *argv], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr
    if status == 2:
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("handgrad: error: ")
    else:
        assert result.stderr == "" and result.stdout.endswith("1 passed, 0 failed\n")
