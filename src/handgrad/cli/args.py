"""The command line's arguments: the parser (every option has a line of help and
shows its default, per dataset where it depends on the dataset), the one-line error
and the dataset option."""

from __future__ import annotations

import argparse

from .. import __version__
from ..testing.layer_cases import LAYER_CASES
from ..testing.numeric import FD_FACTOR
from ..zoo import networks as zoo

DEFAULTS = {  # dataset or (dataset, model) -> (epochs, batch size, learning rate)
    "mnist1d": (30, 64, 3e-3),
    ("mnist1d", "gru"): (30, 64, 6e-3),
    "digits": (30, 32, 3e-3),
    "idx": (5, 64, 1e-3),
}
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop", "adagrad")
# What fit or a model may raise on bad data or a diverging run (not a bug in handgrad).
RUN_ERRORS = (ValueError, TypeError, ArithmeticError, MemoryError, RuntimeError, OSError)


class UsageError(Exception):
    """A bad option, file or dataset, or a failed run: reported in one line."""

    def __init__(self, message, status=2):
        super().__init__(message)
        self.status = status


def reason(error) -> str:
    """The message of ``error``, or its type when it has none (``MemoryError()``)."""
    return str(error) or type(error).__name__


def load_dataset(spec, verbose=False):
    """The dataset named by ``--dataset``; any failure is a UsageError."""
    from ..data import load_dataset as load

    try:
        return load(spec, verbose=verbose)
    except (ValueError, TypeError, OSError, ImportError, MemoryError) as error:
        raise UsageError(f"cannot load dataset {spec!r}: {reason(error)}") from None


def per_dataset(index: int) -> str:
    """``"30 for mnist1d and digits, 5 for idx"``: column ``index`` of DEFAULTS."""
    groups: dict[str, list[str]] = {}
    for key, values in DEFAULTS.items():
        if isinstance(key, tuple):
            if DEFAULTS[key[0]][index] == values[index]:
                continue
            key = f"{key[0]} --model {key[1]}"
        groups.setdefault(f"{values[index]:g}", []).append(key)
    return ", ".join(f"{value} for {' and '.join(keys)}" for value, keys in groups.items())


class _Formatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless it already names its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (action.option_strings and "(default" not in text and default is not None
                and default is not False and default != argparse.SUPPRESS):
            text += " (default: %(default)s)"
        return text


def _train(commands):
    train = commands.add_parser(
        "train", help="train a named model on a dataset",
        description="Train a named model (see --model) on a dataset, validating after each "
        "epoch on a split of the training set; the test set is evaluated once, at the end. "
        "Writes model.safetensors, metrics.json and curve.png into the run folder.")
    train.add_argument("--dataset", default="mnist1d",
                       help="mnist1d, digits or idx:PATH (a directory of MNIST IDX files)")
    train.add_argument("--model", default="cnn", choices=zoo.MODELS,
                       help="cnn: a small CNN, mlp: two hidden layers, gru: a GRU over the "
                       "sequence (images row by row)")
    train.add_argument("--epochs", type=int,
                       help=f"passes over the training set (default: {per_dataset(0)})")
    train.add_argument("--batch-size", type=int,
                       help=f"examples per optimizer step (default: {per_dataset(1)})")
    train.add_argument("--lr", type=float,
                       help=f"peak learning rate (default: {per_dataset(2)})")
    train.add_argument("--schedule", default="cosine", choices=("cosine", "constant"),
                       help="learning-rate schedule: cosine warms up linearly from 0 to --lr "
                       "over the first --warmup of the steps, then decays to 0 along a "
                       "cosine; constant keeps --lr")
    train.add_argument("--warmup", type=float, default=0.05, metavar="FRACTION",
                       help="fraction of the steps spent warming up (cosine schedule)")
    train.add_argument("--optimizer", default="adam", choices=OPTIMIZERS,
                       help="the optimizer, with its default settings and --lr")
    train.add_argument("--validation-split", type=float, default=0.1, metavar="FRACTION",
                       help="fraction of the training set held out to validate after each "
                       "epoch (0: no validation)")
    train.add_argument("--seed", type=int, default=0,
                       help="seed of the weights, the shuffling and the validation split")
    train.add_argument("--out", metavar="DIR",
                       help="folder for the run's files; refuses one that holds a model, "
                       "unless --force (default: a new folder runs/<dataset>-<model>, with "
                       "-2, -3, ... appended when it is taken)")
    train.add_argument("--force", action="store_true",
                       help="overwrite the model, metrics and curve already in --out")
    train.add_argument("--quiet", action="store_true",
                       help="print only the result: no summary, progress or dataset messages")


def _inspect(commands):
    inspect = commands.add_parser(
        "inspect", help="summary and PNG pictures of a model",
        description="Print the summary (with receptive fields and parameter memory) and "
        "write filters.png and feature_maps.png (models with a convolution), "
        "confusion_matrix.png (test set) and gradient_norms.png: the per-layer gradient "
        "norms of --probe-steps training steps on a copy of the model (the file is not "
        "changed).")
    inspect.add_argument("model", help="a model file written by train")
    inspect.add_argument("--dataset", default="mnist1d",
                         help="the dataset the model was trained on: mnist1d, digits or "
                         "idx:PATH")
    inspect.add_argument("--out", metavar="DIR",
                         help="directory for the PNGs (default: the model file's)")
    inspect.add_argument("--probe-steps", type=int, default=20,
                         help="train steps of the gradient-norm probe (on a copy)")
    inspect.add_argument("--seed", type=int, default=0, help="seed of the probe's batches")


def parser() -> argparse.ArgumentParser:
    """The parser; a bad option raises :class:`UsageError` instead of exiting."""

    class Parser(argparse.ArgumentParser):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("formatter_class", _Formatter)
            super().__init__(*args, **kwargs)

        def error(self, message):
            raise UsageError(message)

    main = Parser(prog="python -m handgrad",
                  description="Train, evaluate, inspect, gradcheck and export handgrad models.")
    main.add_argument("--version", action="version", version=f"handgrad {__version__}")
    commands = main.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    _train(commands)
    evaluate = commands.add_parser(
        "evaluate", help="test accuracy and confusion matrix of a saved model",
        description="Print the test accuracy and the confusion matrix of a saved model.")
    evaluate.add_argument("model", help="a model file written by train")
    evaluate.add_argument("--dataset", default="mnist1d",
                          help="the dataset the model was trained on: mnist1d, digits or "
                          "idx:PATH")
    _inspect(commands)
    check = commands.add_parser(
        "gradcheck", help="backward vs finite differences, in float64",
        description="Compare each layer's backward pass with central finite differences "
        "on random configurations, in float64.")
    check.add_argument("layers", nargs="*", help=f"layer names (default: all {len(LAYER_CASES)})")
    check.add_argument("--configs", type=int, default=3, help="random configurations per layer")
    check.add_argument("--seed", type=int, default=0, help="seed of the configurations")
    check.add_argument("--tolerance", type=float,
                       help="fixed relative error to pass (default: within "
                       f"{FD_FACTOR:g}x the error the finite differences measure for "
                       "themselves)")
    export = commands.add_parser(
        "export", help="write a saved model as ONNX (opset 17)",
        description="Write a saved model as an ONNX file (opset 17, channels-last input and "
        "output, like handgrad); needs the onnx extra.")
    export.add_argument("model", help="a model file written by train or save")
    export.add_argument("--onnx", required=True, metavar="OUT", help="the .onnx file to write")
    return main
