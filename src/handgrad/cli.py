"""``python -m handgrad``: train, evaluate, inspect and gradcheck from the command line.

Bad options and bad files print one line (``handgrad: error: ...``) and exit
with status 2; ``gradcheck`` exits with 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from . import optimizers, schedulers, zoo
from .callbacks import LearningRateScheduler
from .inspect import confusion_counts, save_pictures
from .io import load_checkpoint, save
from .layer_cases import LAYER_CASES, describe_layer
from .testing import gradcheck

DEFAULTS = {  # dataset or (dataset, model) -> (epochs, batch size, learning rate)
    "mnist1d": (30, 64, 3e-3),
    ("mnist1d", "gru"): (30, 64, 6e-3),
    "digits": (30, 32, 3e-3),
    "idx": (5, 64, 1e-3),
}


class UsageError(Exception):
    """A bad option or file: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _load_dataset(spec):
    from .data import load_dataset

    try:
        return load_dataset(spec)
    except (ValueError, FileNotFoundError, ImportError) as error:
        raise UsageError(str(error)) from None


def _format_confusion(matrix):
    width = max(len(str(matrix.max())), 3)
    head = "true\\pred " + " ".join(f"{c:>{width}}" for c in range(len(matrix)))
    rows = [f"{r:>9} " + " ".join(f"{v:>{width}}" for v in row) for r, row in enumerate(matrix)]
    return "\n".join([head, *rows])


def _plot_curves(history, path):
    try:
        from .plot import training_curves
    except ImportError:
        print("note: matplotlib is not installed; skipping the training-curve PNG "
              '(pip install "handgrad[data]")')
        return None
    figure = training_curves(history)
    figure.savefig(path, dpi=100)
    return path


def cmd_train(args):
    dataset = _load_dataset(args.dataset)
    kind = "idx" if args.dataset.startswith("idx:") else args.dataset
    epochs, batch_size, lr = DEFAULTS.get((kind, args.model), DEFAULTS[kind])
    epochs = args.epochs if args.epochs is not None else epochs
    batch_size = args.batch_size if args.batch_size is not None else batch_size
    lr = args.lr if args.lr is not None else lr
    try:
        model = zoo.build(args.model, dataset, seed=args.seed)
        optimizer = optimizers.get(args.optimizer, lr=lr)
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None
    model.compile(optimizer, "cross_entropy", metrics=("accuracy",))
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the output directory {args.out!r}: {error}") from None
    steps = epochs * -(-len(dataset.x_train) // batch_size)
    schedule = schedulers.CosineWarmup(lr, max(steps, 1), warmup_steps=steps // 20)
    if not args.quiet:
        model.summary()
    start = time.perf_counter()
    history = model.fit(dataset.x_train, dataset.y_train, epochs=epochs, batch_size=batch_size,
                        validation_data=(dataset.x_test, dataset.y_test), rng=args.seed,
                        callbacks=[LearningRateScheduler(schedule)],
                        verbose=0 if args.quiet else 1)
    seconds = time.perf_counter() - start
    result = model.evaluate(dataset.x_test, dataset.y_test)
    model_path = os.path.join(args.out, "model.safetensors")
    save(model, model_path)
    metrics = {
        "dataset": args.dataset, "model": args.model, "optimizer": args.optimizer, "lr": lr,
        "epochs": epochs, "batch_size": batch_size, "seed": args.seed,
        "train_seconds": round(seconds, 2), "test_loss": result["loss"],
        "test_accuracy": result["accuracy"], "history": history.history,
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    curve = _plot_curves(history, os.path.join(args.out, "curve.png"))
    print(f"test accuracy: {result['accuracy']:.4f}  (test loss {result['loss']:.4f}, "
          f"{seconds:.1f}s training)")
    print(f"wrote {model_path}, {os.path.join(args.out, 'metrics.json')}"
          + (f", {curve}" if curve else ""))
    return 0


def _load_model(args):
    """(model, dataset) from ``args.model`` and ``args.dataset``, checked to fit."""
    try:
        checkpoint = load_checkpoint(args.model)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"cannot load model {args.model!r}: {error}") from None
    model = checkpoint.model
    dataset = _load_dataset(args.dataset)
    if tuple(model.input_shape) != tuple(dataset.input_shape):
        raise UsageError(f"model expects inputs {tuple(model.input_shape)} but dataset "
                         f"{args.dataset!r} has {tuple(dataset.input_shape)}")
    return model, dataset


def cmd_evaluate(args):
    model, dataset = _load_model(args)
    logits = model.predict(dataset.x_test)
    predicted = np.argmax(logits, axis=-1)
    accuracy = float(np.mean(predicted == dataset.y_test))
    print(f"test accuracy: {accuracy:.4f}  ({len(predicted)} examples)")
    print(_format_confusion(confusion_counts(dataset.y_test, predicted, dataset.num_classes)))
    return 0


def cmd_inspect(args):
    """Summary, then filters/feature maps (conv models), the test confusion matrix and
    the gradient norms of a short training probe on a copy of the model, as PNGs."""
    model, dataset = _load_model(args)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError('inspect draws its pictures with matplotlib, which is not '
                         'installed (pip install "handgrad[data]")') from None
    out = args.out if args.out is not None else os.path.dirname(os.path.abspath(args.model))
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the output directory {out!r}: {error}") from None
    model.summary()
    paths = save_pictures(model, dataset, out, probe_steps=args.probe_steps, seed=args.seed)
    print(f"wrote {', '.join(paths)}")
    return 0


def cmd_gradcheck(args):
    names = args.layers or sorted(LAYER_CASES)
    unknown = [n for n in names if n not in LAYER_CASES]
    if unknown:
        raise UsageError(f"unknown layer(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(LAYER_CASES))}")
    rng = np.random.default_rng(args.seed)
    rows, failures = [], 0
    for name in names:
        for _ in range(args.configs):
            layer, shape = LAYER_CASES[name](rng)
            x = rng.standard_normal((2, *shape))
            result = gradcheck(layer, x, rng=rng, tolerance=args.tolerance)
            failures += not result.passed
            rows.append((name, describe_layer(layer), f"{result.max_error:.2e}",
                         "pass" if result.passed else "FAIL"))
    widths = [max(len(r[i]) for r in rows + [("layer", "config", "max rel err", "")])
              for i in range(4)]
    print(f"{'layer':<{widths[0]}}  {'config':<{widths[1]}}  {'max rel err':>{widths[2]}}  ok")
    for row in rows:
        print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}")
    print(f"{len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def cmd_export(args):
    """Write a saved model as an ONNX file (channels-last input and output, like handgrad)."""
    try:
        model = load_checkpoint(args.model).model
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"cannot load model {args.model!r}: {error}") from None
    from .onnx_export import export_onnx

    try:
        export_onnx(model, args.onnx)
    except ImportError as error:
        raise UsageError(str(error)) from None
    except (OSError, ValueError, TypeError) as error:
        raise UsageError(f"cannot export {args.model!r}: {error}") from None
    print(f"wrote {args.onnx}")
    return 0


def _parser():
    parser = _Parser(prog="python -m handgrad", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    train = commands.add_parser("train", help="train a named model on a dataset")
    train.add_argument("--dataset", default="mnist1d",
                       help="mnist1d, digits or idx:PATH (a directory of MNIST IDX files)")
    train.add_argument("--model", default="cnn", choices=zoo.MODELS)
    train.add_argument("--epochs", type=int)
    train.add_argument("--batch-size", type=int)
    train.add_argument("--lr", type=float)
    train.add_argument("--optimizer", default="adam",
                       choices=("sgd", "adam", "adamw", "rmsprop", "adagrad"))
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", default=os.path.join("runs", "latest"))
    train.add_argument("--quiet", action="store_true", help="no summary or progress")
    evaluate = commands.add_parser("evaluate", help="accuracy and confusion matrix")
    evaluate.add_argument("model", help="a model file written by train")
    evaluate.add_argument("--dataset", default="mnist1d")
    inspect = commands.add_parser(
        "inspect", help="summary and PNG pictures of a model",
        description="Print the summary (with receptive fields and parameter memory) and "
        "write filters.png and feature_maps.png (models with a convolution), "
        "confusion_matrix.png (test set) and gradient_norms.png: the per-layer gradient "
        "norms of --probe-steps training steps on a copy of the model (the file is not "
        "changed).")
    inspect.add_argument("model", help="a model file written by train")
    inspect.add_argument("--dataset", default="mnist1d")
    inspect.add_argument("--out", help="directory for the PNGs (default: the model file's)")
    inspect.add_argument("--probe-steps", type=int, default=20,
                         help="train steps of the gradient-norm probe (on a copy)")
    inspect.add_argument("--seed", type=int, default=0)
    check = commands.add_parser("gradcheck", help="backward vs finite differences")
    check.add_argument("layers", nargs="*", help=f"layer names (default: all {len(LAYER_CASES)})")
    check.add_argument("--configs", type=int, default=3, help="random configurations per layer")
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--tolerance", type=float, default=1e-6)
    export = commands.add_parser("export", help="write a saved model as ONNX (opset 17)")
    export.add_argument("model", help="a model file written by train or save")
    export.add_argument("--onnx", required=True, metavar="OUT", help="the .onnx file to write")
    return parser


def _check_args(args):
    for name in ("epochs", "batch_size", "configs", "probe_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1; received {value}")
    for name in ("lr", "tolerance"):
        value = getattr(args, name, None)
        if value is not None and not value > 0:
            raise UsageError(f"--{name} must be > 0; received {value}")


def main(argv=None):
    try:
        args = _parser().parse_args(argv)
        if args.command is None:
            raise UsageError("choose a command: train, evaluate, inspect, gradcheck or export "
                             "(see --help)")
        _check_args(args)
        command = {"train": cmd_train, "evaluate": cmd_evaluate, "inspect": cmd_inspect,
                   "gradcheck": cmd_gradcheck, "export": cmd_export}
        return command[args.command](args)
    except UsageError as error:
        print(f"handgrad: error: {error}", file=sys.stderr)
        return 2
