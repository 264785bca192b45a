"""Helpers shared by the command-line tests: run ``cli.main`` in-process and check
the one-line errors; write small MNIST-style IDX directories."""

from __future__ import annotations

import contextlib
import importlib.util
import io as stdio

import numpy as np

from handgrad import io as hio
from handgrad import layers as L
from handgrad.cli import commands as cli
from handgrad.data import write_idx
from handgrad.model import Sequential

MNIST_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def run_main(argv):
    """``(status, stdout, stderr)`` of ``python -m handgrad *argv``, in-process."""
    out, err = stdio.StringIO(), stdio.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(code, out, err, *fragments, status=2):
    """A single ``handgrad: error: ...`` line holding every fragment, and ``status``."""
    assert code == status, (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("handgrad: error: ")
    assert "Traceback" not in err and "Traceback" not in out
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def assert_usage_error(code, out, err, *fragments):
    """A bad option or input: one line, status 2 and nothing on stdout."""
    assert out == ""
    assert_one_line_error(code, out, err, *fragments)


def write_mnist_dir(directory, n_train=64, n_test=32, files=None, seed=0, num_classes=10,
                    size=28, overrides=None):
    """An MNIST-style directory of IDX files (labels cycle through ``num_classes``);
    ``overrides`` maps a file name to the array written instead."""
    rng = np.random.default_rng(seed)
    arrays = {
        MNIST_NAMES[0]: rng.integers(0, 256, (n_train, size, size)).astype(np.uint8),
        MNIST_NAMES[1]: (np.arange(n_train) % num_classes).astype(np.uint8),
        MNIST_NAMES[2]: rng.integers(0, 256, (n_test, size, size)).astype(np.uint8),
        MNIST_NAMES[3]: (np.arange(n_test) % num_classes).astype(np.uint8),
        **(overrides or {}),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for name in files or arrays:
        write_idx(directory / name, arrays[name])
    return directory


HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
OUTPUTS = ["curve.png"] * HAS_MATPLOTLIB + ["metrics.json", "model.safetensors"]
CLASSES = 10  # the outputs of save_small_model's model


def write_small(directory, **kwargs):
    """A tiny 8x8 MNIST-style directory (64 train / 32 test examples)."""
    return write_mnist_dir(directory, size=8, **kwargs)


def quick_train(*argv):
    """A fast run: an MLP, one epoch, no summary or progress."""
    return run_main(["train", "--model", "mlp", "--epochs", 1, "--quiet", *argv])


def save_small_model(path):
    """A model for 8x8 images with CLASSES outputs, trained one step (so it has
    optimizer state), saved to ``path``."""
    model = Sequential([L.Flatten(), L.Dense(CLASSES)], seed=0, input_shape=(8, 8, 1))
    model.compile("adam", "cross_entropy", ["accuracy"])
    rng = np.random.default_rng(0)
    model.train_step(rng.random((4, 8, 8, 1), dtype=np.float32), np.arange(4))
    hio.save(model, path)
    return path
