"""The command line's arguments: the parser (every option has a line of help and
shows its default, per dataset where it depends on the dataset), the one-line error
and the dataset option."""

from __future__ import annotations

import argparse
from typing import NamedTuple

from .. import __version__
from ..testing.layer_cases import LAYER_CASES
from ..testing.numeric import FD_FACTOR
from ..zoo import networks as zoo
from .errors import UsageError
from .runners import RUNNERS
from .runners import add_arguments as add_runner_arguments


class Settings(NamedTuple):
    """A run's defaults; the first three columns are --epochs, --batch-size and --lr."""

    epochs: int
    batch_size: int
    lr: float
    optimizer: str = "adam"
    weight_decay: float | None = None  # None: the optimizer's own default
    label_smoothing: float = 0.0
    augment: dict | None = None  # handgrad.data.augmentation(**augment) on training batches


# The tuned recipes, one place: validation data inside the training set chose them (MNIST-1D:
# augmentation and label smoothing; digits: 5-fold cross-validation preferred the plain
# residual network, without augmentation or smoothing; BENCHMARKS.md gives the figures).
AUGMENT = {"mnist1d": {"shift": 4, "scale": 0.1, "noise": 0.05}}
DEFAULTS = {  # dataset (its other models) or (dataset, model) -> Settings
    "mnist1d": Settings(30, 64, 3e-3),
    ("mnist1d", "resnet"): Settings(30, 64, 3e-3, "adamw", 0.0, 0.1, AUGMENT["mnist1d"]),
    ("mnist1d", "gru"): Settings(30, 64, 6e-3),
    "digits": Settings(30, 32, 3e-3),
    ("digits", "resnet"): Settings(30, 32, 3e-3, "adamw", 0.0),
    "idx": Settings(5, 64, 1e-3),
}
DEFAULT_MODEL = {"mnist1d": "resnet", "digits": "resnet", "idx": "cnn"}
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop", "adagrad")
# What fit or a model may raise on bad data or a diverging run (not a bug in handgrad).
RUN_ERRORS = (ValueError, TypeError, ArithmeticError, MemoryError, RuntimeError, OSError)


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


def chosen_dataset(args) -> str:
    """``--dataset``, or the default of ``--model``: mnist1d, or a runner's own."""
    if args.dataset is None:
        runner = RUNNERS.get(args.model)
        args.dataset = "mnist1d" if runner is None else runner.DEFAULT_DATASET
    return args.dataset


def dataset_kind(spec) -> str:
    """``"mnist1d"``, ``"digits"``, ``"idx"`` (for ``idx:PATH``) or ``"text"`` (for
    ``text:PATH``): the DEFAULTS key."""
    for kind in ("idx", "text"):
        if spec.startswith(f"{kind}:"):
            return kind
    return spec


def settings(dataset, model) -> Settings:
    """The defaults of ``model`` on ``dataset`` (a kind of :func:`dataset_kind`)."""
    return DEFAULTS.get((dataset, model), DEFAULTS[dataset])


def _text(value) -> str:
    if isinstance(value, dict):
        return " ".join(f"{key} {_text(item)}" for key, item in value.items())
    if value is None:
        return "the optimizer's own"  # weight_decay (augment is shown by _augmentations)
    return value if isinstance(value, str) else f"{value:g}"


def per_dataset(index: int) -> str:
    """``"30 for mnist1d and digits, 5 for idx"``: column ``index`` of DEFAULTS."""
    groups: dict[str, list[str]] = {}
    for key, values in DEFAULTS.items():
        if isinstance(key, tuple):
            if DEFAULTS[key[0]][index] == values[index]:
                continue
            key = f"{key[0]} --model {key[1]}"
        groups.setdefault(_text(values[index]), []).append(key)
    return ", ".join(f"{value} for {' and '.join(keys)}" for value, keys in groups.items())


def default_models() -> str:
    """``"resnet for mnist1d and digits, cnn for idx"``."""
    groups: dict[str, list[str]] = {}
    for dataset, model in DEFAULT_MODEL.items():
        groups.setdefault(model, []).append(dataset)
    return ", ".join(f"{model} for {' and '.join(keys)}" for model, keys in groups.items())


def _augmentations() -> str:
    """The default augmentation per (dataset, model), for --no-augment's help."""
    return "; ".join(f"{key[0]} --model {key[1]}: {_text(values.augment)}"
                     for key, values in DEFAULTS.items() if values.augment)


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
    train.add_argument("--dataset",
                       help="mnist1d, digits, idx:PATH (a directory of MNIST IDX files), "
                       "text:PATH (a UTF-8 text file, for word2vec) or planted (a generated "
                       "corpus with planted word classes, for word2vec) (default: mnist1d; "
                       + ", ".join(f"{runner.DEFAULT_DATASET} for --model {name}"
                                   for name, runner in RUNNERS.items()) + ")")
    train.add_argument("--model", choices=(*zoo.MODELS, *RUNNERS),
                       help="resnet: a residual CNN (a graph model), cnn: a small CNN, mlp: "
                       "two hidden layers, gru: a GRU over the sequence (images row by row); "
                       "vae: a Bernoulli variational autoencoder, wgan-gp: a Wasserstein GAN "
                       "with gradient penalty, word2vec: word embeddings (skip-gram or CBOW), "
                       f"rbm: a restricted Boltzmann machine (default: {default_models()})")
    train.add_argument("--model-file", metavar="FILE",
                       help="fine-tune a saved model (a file written by convert, train or "
                       "save) instead of --model, with a fresh optimizer; examples are "
                       "enlarged by a whole factor, zero-padded and gray replicated to "
                       "the model's input shape (handgrad.data.fit_to_input), and the "
                       "model must output one score per class of the dataset")
    train.add_argument("--dtype", choices=("float32", "float64"),
                       help="floating-point type of the parameters and the data (default: "
                       "float32, or the --model-file's own)")
    train.add_argument("--distributed", action="store_true",
                       help="data-parallel training over MPI: start K processes with "
                       "'mpiexec -n K python -m handgrad train --distributed ...'; they train "
                       "the model one process trains (--batch-size is the global batch, each "
                       "process takes its share of every batch); rank 0 alone prints and "
                       "writes the run folder. Without mpiexec it is a one-process run. "
                       "Needs the mpi extra (pip install -e \".[mpi]\"); for --model "
                       f"{', '.join(zoo.MODELS)}")
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
    train.add_argument("--optimizer", choices=OPTIMIZERS,
                       help="the optimizer, with --lr, --weight-decay and its other default "
                       f"settings (default: {per_dataset(3)})")
    train.add_argument("--weight-decay", type=float, metavar="FLOAT",
                       help=f"the optimizer's weight decay (default: {per_dataset(4)})")
    train.add_argument("--label-smoothing", type=float, metavar="FLOAT",
                       help="label smoothing of the training loss (cross entropy); the test "
                       f"loss is plain cross entropy (default: {per_dataset(5)})")
    train.add_argument("--no-augment", dest="augment", action="store_false", default=None,
                       help="turn off the default augmentation of the training batches "
                       "(random shifts by up to 'shift' samples or pixels, circular, or filled "
                       "with zeros for mode zero, "
                       "amplitude x(1 + U(-scale, scale)), Gaussian noise of std 'noise'; "
                       f"never on validation or test data): {_augmentations()}; none for "
                       "the other models")
    train.add_argument("--blas-threads", type=int, default=1, metavar="N",
                       help="BLAS threads while training and testing: these small networks' "
                       "matrix products run fastest on one, above all on a busy machine "
                       "(0: leave the BLAS library's own setting; needs the threadpoolctl "
                       "package)")
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
    train.add_argument("--tensorboard", action="store_true",
                       help="write TensorBoard logs into <run folder>/tensorboard: the "
                       "epoch logs, histograms of the parameters, gradients and layer "
                       "outputs and the images, every epoch (tensorboard --logdir runs; "
                       "needs pip install \"handgrad[tensorboard]\")")
    train.add_argument("--quiet", action="store_true",
                       help="print only the result: no summary, progress or dataset messages")
    shared = train.add_argument_group("options of --model vae and wgan-gp")
    shared.add_argument("--latent-dim", type=int, metavar="N",
                        help="size of the latent code (default: 16 for vae, the model's own "
                        "for wgan-gp; vae draws latent.png when it is 2)")
    add_runner_arguments(train)


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
                  description="Train, evaluate, inspect, gradcheck, export and convert handgrad "
                  "models.")
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
    convert = commands.add_parser(
        "convert", help="an ONNX file as a handgrad model file",
        description="Convert an ONNX file (opset 13 or later, e.g. from torch.onnx.export) "
        "into a handgrad model file that train --model-file fine-tunes; the model takes "
        "channels-last inputs. Needs the onnx extra.")
    convert.add_argument("onnx", help="the .onnx file to read")
    convert.add_argument("out", help="the .safetensors model file to write")
    convert.add_argument("--input-shape", metavar="SIZES",
                         help="sizes for the input's open (dynamic) axes, comma-separated "
                         "in the ONNX file's axis order: N,C,H,W or C,H,W (needed when the "
                         "file leaves a size open; sizes the file fixes must match)")
    return main
