"""The command line on bad input: the class counts of model and dataset, IDX data
without examples or with absurd labels, and every failure to load a model file or a
dataset, or to use an output path, reported in one line without a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_support import (
    CLASSES,
    HAS_MATPLOTLIB,
    MNIST_NAMES,
    assert_one_line_error,
    assert_usage_error,
    quick_train,
    run_main,
    save_small_model,
    write_small,
)
from handgrad.cli import run_folder as _cli_run_folder
from handgrad.data import Dataset, load_idx, read_idx
from handgrad.data.idx import MAX_CLASSES


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_small(tmp_path_factory.mktemp("data") / "data")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    return save_small_model(tmp_path_factory.mktemp("model") / "model.safetensors")


# ------------------------------------------------- 1. class count of model and dataset


@pytest.mark.parametrize("command", ["evaluate", "inspect"])
@pytest.mark.parametrize("num_classes", [5, 12])
def test_a_class_count_mismatch_names_both_numbers(model_file, tmp_path, command, num_classes):
    data = write_small(tmp_path / "data", num_classes=num_classes)
    out = ["--out", tmp_path / "pictures"] if command == "inspect" else []
    result = run_main([command, model_file, "--dataset", f"idx:{data}", *out])
    assert_usage_error(*result, f"the model has {CLASSES} output classes",
                       f"has {num_classes} classes")
    assert not (tmp_path / "pictures").exists()


def test_a_matching_class_count_evaluates(model_file, data_dir):
    code, out, err = run_main(["evaluate", model_file, "--dataset", f"idx:{data_dir}"])
    assert code == 0 and err == ""
    assert out.startswith("test accuracy: ") and "(32 examples)" in out


# ------------------------------------------------------ 2. IDX data without examples


@pytest.mark.parametrize("overrides, fragments", [
    ({MNIST_NAMES[2]: np.zeros((0, 8, 8), np.uint8), MNIST_NAMES[3]: np.zeros(0, np.uint8)},
     ["holds no test examples"]),
    ({MNIST_NAMES[0]: np.zeros((0, 8, 8), np.uint8), MNIST_NAMES[1]: np.zeros(0, np.uint8)},
     ["holds no train examples"]),
    ({MNIST_NAMES[1]: np.zeros(60, np.uint8)}, ["holds 64 images", "holds 60 labels"]),
    ({MNIST_NAMES[3]: np.zeros(33, np.uint8)}, ["holds 32 images", "holds 33 labels"]),
    ({MNIST_NAMES[0]: np.zeros((64, 0, 8), np.uint8)}, ["every size >= 1"]),
    ({MNIST_NAMES[0]: np.zeros((64, 8, 8), np.float32)}, ["must hold uint8 images"]),
    ({MNIST_NAMES[3]: np.zeros(32, np.float32)}, ["1-D array of integer labels"]),
])
def test_idx_data_without_usable_examples_is_refused_before_training(tmp_path, monkeypatch,
                                                                      overrides, fragments):
    data = write_small(tmp_path / "data", overrides=overrides)
    monkeypatch.chdir(tmp_path)
    assert_usage_error(*quick_train("--dataset", f"idx:{data}"), "cannot load dataset",
                       *fragments)
    assert not (tmp_path / "runs").exists()  # no run folder: training never started


def test_a_dataset_needs_examples_in_both_splits():
    x, y = np.zeros((3, 2, 1), np.float32), np.zeros(3, np.int64)
    empty = (np.zeros((0, 2, 1), np.float32), np.zeros(0, np.int64))
    with pytest.raises(ValueError, match=r"Dataset: 'x_test' must hold at least one example"):
        Dataset(x, y, *empty, num_classes=2, name="no test")
    with pytest.raises(ValueError, match=r"Dataset: 'x_train' must hold at least one example"):
        Dataset(*empty, x, y, num_classes=2, name="no train")
    with pytest.raises(ValueError, match=r"'x_train' must hold at least one example with"):
        Dataset(np.zeros((3, 0, 1), np.float32), y, x, y, num_classes=2, name="no values")


# ------------------------------------------------------------ 3. absurd label values


@pytest.mark.parametrize("labels, found", [
    (np.array([2**31 - 1] + [0] * 63, np.int32), "the label 2147483647"),
    (np.array([MAX_CLASSES] + [0] * 63, np.int32), f"the label {MAX_CLASSES}"),
    (np.array([-1] + [0] * 63, np.int8), "a negative label (-1)"),
    (np.array([-(2**31)] + [0] * 63, np.int32), "a negative label (-2147483648)"),
])
def test_absurd_labels_are_refused_naming_the_range(tmp_path, monkeypatch, labels, found):
    data = write_small(tmp_path / "data", overrides={MNIST_NAMES[1]: labels})
    monkeypatch.chdir(tmp_path)
    assert_usage_error(*quick_train("--dataset", f"idx:{data}"), found,
                       f"labels must be class indices in [0, {MAX_CLASSES})")
    assert not (tmp_path / "runs").exists()


def test_load_idx_num_classes(tmp_path):
    data = write_small(tmp_path / "data", num_classes=7)
    assert load_idx(data).num_classes == 7
    assert load_idx(data, num_classes=20).num_classes == 20
    with pytest.raises(ValueError, match=r"train-labels.* holds the label 6; labels must be "
                                         r"class indices in \[0, 5\)$"):
        load_idx(data, num_classes=5)
    for bad in (0, 2.5, "7", True):
        with pytest.raises(ValueError, match=r"load_idx: 'num_classes' must be None or an int"):
            load_idx(data, num_classes=bad)


def test_an_idx_header_whose_size_overflows_int64_is_reported_as_truncated(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(bytes([0, 0, 0x08, 4]) + np.full(4, 2**16, ">u4").tobytes())
    with pytest.raises(ValueError, match=r"truncated: the header declares shape "
                                         r"\(65536, 65536, 65536, 65536\)"):
        read_idx(path)


# ------------------------------------------------- 4. every load failure in one line


def _split_file(blob):
    size = int.from_bytes(blob[:8], "little")
    return json.loads(blob[8:8 + size]), blob[8 + size:]


def _pack(header, data):
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


def _with_document(blob, change):
    header, data = _split_file(blob)
    document = json.loads(header["__metadata__"]["handgrad"])
    change(document)
    header["__metadata__"]["handgrad"] = json.dumps(document)
    return _pack(header, data)


def _with_entry(blob, name, change):
    """The file with the header entry of tensor ``name`` changed (the bytes kept)."""
    header, data = _split_file(blob)
    change(header[name])
    return _pack(header, data)


def _set(key, value):
    return lambda entry: entry.__setitem__(key, value)


def _fractional_end(entry):
    begin, end = entry["data_offsets"]
    entry["data_offsets"] = [begin, end - 0.1]  # e.g. 2559.9: truncates to a valid offset


def _set_layers(value):
    return lambda document: document["model"]["config"].__setitem__("layers", value)


def _set_document(key, value):
    return lambda document: document.__setitem__(key, value)


W, OPTIM = "param/dense_1.W", "optim/exp_avg/dense_1.W"  # (64, 10) in the model file
BAD_MODEL_FILES = {  # name -> bytes from the valid file's bytes (None: not created)
    "absent": None,
    "empty": lambda blob: b"",
    "text": lambda blob: b"this is not a model at all",
    "png": lambda blob: b"\x89PNG\r\n\x1a\n" + bytes(64),
    "short-header": lambda blob: blob[:4],
    "truncated": lambda blob: blob[: len(blob) - 10],
    "huge-header-length": lambda blob: (2**62).to_bytes(8, "little") + b"{}",
    "header-not-json": lambda blob: (8).to_bytes(8, "little") + b"not json",
    "header-a-list": lambda blob: _pack([1, 2], b""),
    "foreign": lambda blob: _pack({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
                                  bytes(4)),
    "layers-5": lambda blob: _with_document(blob, _set_layers([5])),
    "layers-a-string": lambda blob: _with_document(blob, _set_layers("dense")),
    "unknown-layer": lambda blob: _with_document(
        blob, _set_layers([{"class": "Nope", "config": {}}])),
    "model-a-string": lambda blob: _with_document(blob, _set_document("model", "x")),
    "format-99": lambda blob: _with_document(blob, _set_document("format", 99)),
    "loss-a-number": lambda blob: _with_document(blob, _set_document("loss", 5)),
    "optimizer-a-list": lambda blob: _with_document(blob, _set_document("optimizer", [1])),
    "shape-a-string": lambda blob: _with_entry(blob, W, _set("shape", ["64", 10])),
    "offset-a-float": lambda blob: _with_entry(blob, W, _fractional_end),
    "negative-dimension": lambda blob: _with_entry(blob, W, _set("shape", [-64, -10])),
    "overflowing-shape": lambda blob: _with_entry(blob, W, _set("shape", [2**32, 2**32])),
    "unknown-dtype": lambda blob: _with_entry(blob, W, _set("dtype", "F99")),
    "offsets-past-the-end": lambda blob: _with_entry(blob, W, _set("data_offsets", [0, 10**9])),
    "weight-shape-changed": lambda blob: _with_entry(blob, W, _set("shape", [10, 64])),
    "optimizer-state-shape": lambda blob: _with_entry(blob, OPTIM, _set("shape", [10, 64])),
}


@pytest.fixture(scope="module")
def bad_models(model_file, tmp_path_factory):
    directory = tmp_path_factory.mktemp("bad-models")
    blob = model_file.read_bytes()
    header, _ = _split_file(blob)
    assert header[W]["shape"] == [64, 10] and header[OPTIM]["shape"] == [64, 10]
    for name, make in BAD_MODEL_FILES.items():
        if make is not None:
            (directory / f"{name}.safetensors").write_bytes(make(blob))
    (directory / "a-directory.safetensors").mkdir()
    return directory


@pytest.mark.parametrize("name", [*BAD_MODEL_FILES, "a-directory"])
def test_every_bad_model_file_is_one_line(bad_models, data_dir, tmp_path, name):
    path = bad_models / f"{name}.safetensors"
    result = run_main(["evaluate", path, "--dataset", f"idx:{data_dir}"])
    assert_usage_error(*result, "cannot load model", str(path))
    assert_usage_error(*run_main(["export", path, "--onnx", tmp_path / "m.onnx"]),
                       "cannot load model")
    assert not (tmp_path / "m.onnx").exists()


def test_a_valid_model_file_is_not_refused(model_file, data_dir):
    """The control of the test above: its source file loads."""
    code, _, err = run_main(["evaluate", model_file, "--dataset", f"idx:{data_dir}"])
    assert code == 0 and err == ""


def _garbage(directory):
    rng = np.random.default_rng(1)
    for name in MNIST_NAMES:
        (directory / name).write_bytes(b"\x07" + rng.integers(0, 256, 300, np.uint8).tobytes())


def _corrupt(name, content):
    def make(directory):
        (directory / name).write_bytes(content)
    return make


BAD_DATASETS = {  # name -> (make the directory's contents, a fragment of the message)
    "garbage": (_garbage, "bad magic number"),
    "bad-magic": (_corrupt(MNIST_NAMES[0], b"\x01\x02\x08\x03" + bytes(12)), "bad magic"),
    "unknown-type": (_corrupt(MNIST_NAMES[1], b"\x00\x00\x42\x01" + bytes(4)),
                     "unknown IDX type code 0x42"),
    "short": (_corrupt(MNIST_NAMES[2], b"\x00\x00"), "too short"),
    "truncated": (_corrupt(MNIST_NAMES[3], bytes([0, 0, 8, 1, 0, 0, 0, 32]) + bytes(5)),
                  "truncated"),
    "broken-gzip": (_corrupt(MNIST_NAMES[0], b"\x1f\x8b" + bytes(20)), "not a valid gzip"),
    "overflowing-header": (_corrupt(MNIST_NAMES[0], bytes([0, 0, 8, 4]) +
                                    np.full(4, 2**16, ">u4").tobytes()), "truncated"),
    "labels-a-directory": (lambda d: ((d / MNIST_NAMES[1]).unlink(),
                                      (d / MNIST_NAMES[1]).mkdir()), "no train labels file"),
}


@pytest.mark.parametrize("name", list(BAD_DATASETS))
@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_every_bad_dataset_is_one_line(model_file, tmp_path, monkeypatch, name, command):
    directory = write_small(tmp_path / name)
    make, fragment = BAD_DATASETS[name]
    make(directory)
    monkeypatch.chdir(tmp_path)
    argv = (["train", "--quiet"] if command == "train" else ["evaluate", model_file])
    assert_usage_error(*run_main([*argv, "--dataset", f"idx:{directory}"]),
                       f"cannot load dataset 'idx:{directory}'", fragment)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("spec, fragment", [
    ("idx:{tmp}/absent", "does not exist"),
    ("idx:{tmp}/a-file", "does not exist"),
    ("idx:{tmp}/empty", "no train images file"),
])
def test_a_missing_dataset_is_one_line(tmp_path, spec, fragment):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "empty").mkdir()
    spec = spec.format(tmp=tmp_path)
    assert_usage_error(*quick_train("--dataset", spec), f"cannot load dataset {spec!r}", fragment)


def test_an_unreadable_dataset_file_is_one_line(tmp_path, monkeypatch):
    directory = write_small(tmp_path / "data")
    read_bytes = Path.read_bytes

    def refuse(path):
        if path.name == MNIST_NAMES[2]:
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert_usage_error(*quick_train("--dataset", f"idx:{directory}", "--out", tmp_path / "o"),
                       "Permission denied", MNIST_NAMES[2])


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="file permissions do not bind the superuser")
def test_a_model_file_without_read_permission_is_one_line(model_file, data_dir, tmp_path):
    path = tmp_path / "locked.safetensors"
    path.write_bytes(model_file.read_bytes())
    path.chmod(0)
    assert_usage_error(*run_main(["evaluate", path, "--dataset", f"idx:{data_dir}"]),
                       "cannot load model", "Permission denied")


@pytest.mark.parametrize("out, fragment", [
    ("{tmp}/a-file", "cannot create the output directory"),
    ("{tmp}/a-file/below", "cannot create the output directory"),
])
def test_an_unusable_out_is_one_line(data_dir, tmp_path, out, fragment):
    (tmp_path / "a-file").write_text("x")
    out = out.format(tmp=tmp_path)
    assert_usage_error(*quick_train("--dataset", f"idx:{data_dir}", "--out", out), repr(out),
                       fragment)
    assert (tmp_path / "a-file").read_text() == "x"


def test_an_out_without_write_permission_is_refused_before_training(data_dir, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setattr(_cli_run_folder.os, "access", lambda path, mode: False)
    assert_usage_error(*quick_train("--dataset", f"idx:{data_dir}", "--out", tmp_path / "o"),
                       "cannot write into the output directory")


@pytest.mark.parametrize("target", ["missing/m.onnx", "a-directory"])
def test_inspect_and_export_outputs_that_cannot_be_written(model_file, data_dir, tmp_path,
                                                           target):
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "a-file").write_text("x")
    code, out, err = run_main(["export", model_file, "--onnx", tmp_path / target])
    assert_one_line_error(code, out, err)
    result = run_main(["inspect", model_file, "--dataset", f"idx:{data_dir}", "--out",
                       tmp_path / "a-file"])
    assert_usage_error(*result, "cannot create the output directory" if HAS_MATPLOTLIB
                       else "matplotlib, which is not installed")


@pytest.mark.parametrize("argv, fragments", [
    (["evaluate", "{bad}/a-directory.safetensors"], ["cannot load model"]),
    (["evaluate", "{bad}/layers-5.safetensors"], ["cannot load model"]),
    (["train", "--dataset", "idx:{bad}"], ["cannot load dataset", "no train images file"]),
])
def test_python_dash_m_prints_no_traceback(bad_models, argv, fragments):
    argv = [a.format(bad=bad_models) for a in argv]
    result = subprocess.run([sys.executable, "-m", "handgrad", *argv], capture_output=True,
                            text=True, timeout=120)
    assert_usage_error(result.returncode, result.stdout, result.stderr, *fragments)
