"""``python -m handgrad convert`` (an ONNX file from torch.onnx.export as a handgrad model
file) and ``train --model-file`` (fine-tuning it on a built-in dataset fitted to its input
shape by ``handgrad.data.fit_to_input``), with their one-line errors."""

from __future__ import annotations

import io
import json
import warnings

import numpy as np
import pytest

from cli_support import assert_usage_error, run_main
from handgrad import io as hio
from handgrad.data import fit_to_input
from handgrad.testing import assert_close

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")


def _small_cnn(classes=10):
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes)).eval()


def _export(net, path, size=16, dynamic=True):
    """``net`` exported by torch.onnx.export (opset 17) to ``path``; with ``dynamic`` the
    batch, height and width are left open (named sizes)."""
    axes = {"image": {0: "batch", 2: "height", 3: "width"}} if dynamic else None
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation warning
        torch.onnx.export(net, (torch.randn(2, 3, size, size),), buffer, dynamo=False,
                          opset_version=17, input_names=["image"], dynamic_axes=axes)
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("convert")
    net = _small_cnn()
    return net, _export(net, folder / "cnn.onnx")


@pytest.fixture(scope="module")
def converted(exported, tmp_path_factory):
    """``(net, path)``: the small CNN converted at 16x16 by the command."""
    net, onnx_path = exported
    out = tmp_path_factory.mktemp("model") / "cnn.safetensors"
    code, stdout, err = run_main(["convert", onnx_path, out, "--input-shape", "3,16,16"])
    assert code == 0 and err == "", err
    assert stdout.strip().startswith(f"wrote {out}: input shape (16, 16, 3)")
    return net, out


# --------------------------------------------------------------------------- convert


def test_convert_writes_a_model_file_that_computes_torchs_outputs(converted):
    net, path = converted
    model = hio.load(path)
    assert model.input_shape == (16, 16, 3)
    x = torch.randn(4, 3, 16, 16)  # another batch size than the export's
    with torch.no_grad():
        expected = net(x).numpy()
    actual = model.predict(np.moveaxis(x.numpy(), 1, -1))
    assert_close(actual, expected, dtype=np.float32, terms=model.count_params())


def test_input_shape_may_give_the_batch(exported, converted, tmp_path):
    _, onnx_path = exported
    out = tmp_path / "batch.safetensors"
    code, _, err = run_main(["convert", onnx_path, out, "--input-shape", "5,3,16,16"])
    assert code == 0 and err == ""
    ours, theirs = hio.load(out), hio.load(converted[1])
    assert ours.input_shape == (16, 16, 3)
    x = np.random.default_rng(0).standard_normal((2, 16, 16, 3)).astype(np.float32)
    np.testing.assert_array_equal(ours.predict(x), theirs.predict(x))


def test_a_file_with_fixed_sizes_needs_no_input_shape(tmp_path):
    onnx_path = _export(_small_cnn(), tmp_path / "fixed.onnx", size=12, dynamic=False)
    code, _, err = run_main(["convert", onnx_path, tmp_path / "fixed.safetensors"])
    assert code == 0 and err == ""
    assert hio.load(tmp_path / "fixed.safetensors").input_shape == (12, 12, 3)


@pytest.mark.parametrize("argv, fragments", [
    (["missing.onnx", "m.safetensors"], ["the ONNX file", "missing.onnx", "does not exist"]),
    (["{onnx}", "m.npz"], ["must end in .safetensors", "'m.npz'"]),
    (["{onnx}.txt", "m.safetensors"], ["must be an .onnx file", ".onnx.txt"]),
    (["{onnx}", "m.safetensors"], ["'image'", "open sizes ['batch', 3, 'height', 'width']",
                                   "--input-shape 3,32,32"]),
    (["{onnx}", "m.safetensors", "--input-shape", "3,x,16"],
     ["--input-shape must be sizes >= 1", "'3,x,16'"]),
    (["{onnx}", "m.safetensors", "--input-shape", "3,0,16"], ["'3,0,16'"]),
    (["{onnx}", "m.safetensors", "--input-shape", ""], ["received ''"]),
    (["{onnx}", "m.safetensors", "--input-shape", "16,16"],
     ["has 2 sizes", "4 axes ['batch', 3, 'height', 'width']"]),
    (["{onnx}", "m.safetensors", "--input-shape", "1,16,16"],
     ["sets axis 1 of the input 'image' to 1", "fixes it at 3"]),
])
def test_convert_refuses_in_one_line(exported, tmp_path, monkeypatch, argv, fragments):
    monkeypatch.chdir(tmp_path)
    argv = [a.format(onnx=exported[1]) for a in argv]
    assert_usage_error(*run_main(["convert", *argv]), *fragments)
    assert not (tmp_path / "m.safetensors").exists()


def test_convert_refuses_a_corrupt_file(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage, not a protobuf")
    assert_usage_error(*run_main(["convert", tmp_path / "bad.onnx", tmp_path / "m.safetensors"]),
                       "cannot read the ONNX file", "bad.onnx")


# ------------------------------------------------------------------ train --model-file


def test_train_fine_tunes_a_converted_model(converted, tmp_path):
    pytest.importorskip("sklearn")  # the digits dataset
    from handgrad.data import load_digits

    _, path = converted
    code, _, err = run_main(["train", "--model-file", path, "--dataset", "digits",
                               "--epochs", 1, "--out", tmp_path, "--quiet"])
    assert code == 0 and err == "", err
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["model_file"] == str(path) and metrics["model"] is None
    assert metrics["dtype"] == "float32" and metrics["steps_run"] > 0
    trained, start = hio.load(tmp_path / "model.safetensors"), hio.load(path)
    assert trained.input_shape == (16, 16, 3)
    assert not np.array_equal(trained.named_parameters()["8.W"], start.named_parameters()["8.W"])
    # the test set was fitted as fit_to_input fits it: the saved model reproduces the result
    data = load_digits()
    logs = trained.evaluate(fit_to_input(data.x_test, (16, 16, 3)), data.y_test,
                            return_dict=True)
    assert logs["accuracy"] == metrics["test_accuracy"]


def test_the_default_run_folder_is_named_after_the_model_file(converted, tmp_path,
                                                               monkeypatch):
    pytest.importorskip("sklearn")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "--model-file", converted[1], "--dataset", "digits",
                               "--epochs", 1, "--quiet", "--validation-split", 0])
    assert code == 0 and err == "", err
    assert (tmp_path / "runs" / "digits-cnn" / "model.safetensors").is_file()


@pytest.mark.parametrize("case, argv, fragments", [
    ("classes", ["--dataset", "digits"], ["5 output classes", "'digits' has 10 classes"]),
    ("small", ["--dataset", "digits"], ["does not fit dataset 'digits'", "shape (8, 8, 1)",
                                        "takes (4, 4, 3)", "never cropped"]),
    ("rank", ["--dataset", "mnist1d"], ["does not fit dataset 'mnist1d'", "(40, 1)",
                                        "(16, 16, 3)", "another number of axes"]),
    ("model", ["--model", "cnn"], ["give --model or --model-file, not both"]),
    ("dtype", ["--dtype", "float64"], ["--dtype float64 differs from the float32"]),
    ("missing", [], ["cannot load model", "nothing.safetensors"]),
])
def test_train_refuses_a_model_file_that_does_not_fit(converted, tmp_path, case, argv,
                                                      fragments):
    pytest.importorskip("sklearn")
    if case == "rank":
        pytest.importorskip("mnist1d")
    path = {"missing": tmp_path / "nothing.safetensors", "classes": tmp_path / "five.safetensors",
            "small": tmp_path / "small.safetensors"}.get(case, converted[1])
    if case in ("classes", "small"):
        size, classes = (4, 10) if case == "small" else (16, 5)
        onnx_path = _export(_small_cnn(classes), tmp_path / "net.onnx", size, dynamic=False)
        assert run_main(["convert", onnx_path, path])[0] == 0
    code, out, err = run_main(["train", "--model-file", path, "--epochs", 1, "--quiet",
                               "--out", tmp_path / "run", *argv])
    assert_usage_error(code, out, err, *fragments)
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------- fit_to_input


def test_fit_to_input_enlarges_pads_and_replicates_gray():
    x = np.random.default_rng(0).random((3, 8, 8, 1), dtype=np.float32)
    y = fit_to_input(x, (21, 20, 3))  # factor 2 (16x16), then 5 / 4 rows, 2 / 2 columns
    assert y.shape == (3, 21, 20, 3) and y.dtype == np.float32
    source = np.arange(16) // 2  # the source pixel of each enlarged row and column
    for c in range(3):
        np.testing.assert_array_equal(y[:, 2:18, 2:18, c], x[:, source][:, :, source, 0])
    inside = np.zeros((21, 20), bool)
    inside[2:18, 2:18] = True
    assert not y[:, ~inside].any()
    assert fit_to_input(x, (8, 8, 1)) is x


@pytest.mark.parametrize("x_shape, shape, fragment", [
    ((8, 8, 1), (4, 4, 1), "smaller along axis 1"),
    ((8, 8, 1), (8, 4, 1), "smaller along axis 2"),
    ((8, 8, 1), (16, 16), "another number of axes"),
    ((8, 8, 3), (16, 16, 2), "3 channels cannot become 2"),
])
def test_fit_to_input_refuses_what_does_not_fit(x_shape, shape, fragment):
    with pytest.raises(ValueError, match=fragment):
        fit_to_input(np.zeros((2, *x_shape), np.float32), shape)
