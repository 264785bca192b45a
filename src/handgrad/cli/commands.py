"""``python -m handgrad``: train, evaluate, inspect, gradcheck, export and convert from the
command line.

Bad options, bad files and failed runs print one line (``handgrad: error: ...``),
never a traceback, and exit with status 2 (a bad option, file or dataset), 1 (training
failed) or 130 (interrupted); ``gradcheck`` exits with 1 when a check fails.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ..inspect.probes import save_pictures
from ..metrics import confusion_counts
from ..testing.layer_cases import LAYER_CASES, describe_layer
from ..testing.numeric import gradcheck
from .args import RUN_ERRORS, UsageError, load_dataset, parser, reason
from .convert import cmd_convert
from .model_file import check_classifier, load_model_checkpoint
from .train import cmd_train


def _format_confusion(matrix):
    width = max(len(str(matrix.max())), 3)
    head = "true\\pred " + " ".join(f"{c:>{width}}" for c in range(len(matrix)))
    rows = [f"{r:>9} " + " ".join(f"{v:>{width}}" for v in row) for r, row in enumerate(matrix)]
    return "\n".join([head, *rows])


def _load_model(args):
    """(model, dataset) from ``args.model`` and ``args.dataset``, checked to fit."""
    model = load_model_checkpoint(args.model).model
    dataset = load_dataset(args.dataset, verbose=True)
    input_shape = tuple(getattr(model, "input_shape", None) or ())
    if input_shape != tuple(dataset.input_shape):
        raise UsageError(f"model expects inputs {input_shape} but dataset "
                         f"{args.dataset!r} has {tuple(dataset.input_shape)}")
    check_classifier(model, args.model, dataset, args.dataset)
    return model, dataset


def cmd_evaluate(args):
    model, dataset = _load_model(args)
    try:
        logits = model.predict(dataset.x_test.astype(model.dtype, copy=False))
    except RUN_ERRORS as error:
        raise UsageError(f"cannot evaluate {args.model!r}: {reason(error)}", status=1) from None
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
        raise UsageError(f"cannot create the output directory {out!r}: {reason(error)}"
                         ) from None
    model.summary()
    try:
        paths = save_pictures(model, dataset, out, probe_steps=args.probe_steps, seed=args.seed)
    except RUN_ERRORS as error:
        raise UsageError(f"cannot inspect {args.model!r}: {reason(error)}", status=1) from None
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
    model = load_model_checkpoint(args.model).model
    from ..io.onnx.export import export_onnx

    try:
        export_onnx(model, args.onnx)
    except ImportError as error:
        raise UsageError(str(error)) from None
    except (OSError, ValueError, TypeError) as error:
        raise UsageError(f"cannot export {args.model!r}: {reason(error)}") from None
    print(f"wrote {args.onnx}")
    return 0


def _check_args(args):
    for name in ("epochs", "batch_size", "configs", "probe_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1; received {value}")
    for name in ("lr", "tolerance"):
        value = getattr(args, name, None)
        if value is not None and not 0 < value < float("inf"):
            raise UsageError(f"--{name} must be a finite number > 0; received {value}")
    for name in ("validation_split", "warmup"):
        value = getattr(args, name, None)
        if value is not None and not 0 <= value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be in [0, 1); received {value}")


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "inspect": cmd_inspect,
            "gradcheck": cmd_gradcheck, "export": cmd_export, "convert": cmd_convert}


def main(argv=None):
    try:
        args = parser().parse_args(argv)
        if args.command is None:
            raise UsageError(f"choose a command: {', '.join(COMMANDS)} (see --help)")
        _check_args(args)
        return COMMANDS[args.command](args)
    except UsageError as error:
        print(f"handgrad: error: {error}", file=sys.stderr)
        return error.status
    except KeyboardInterrupt:
        print("handgrad: interrupted", file=sys.stderr)
        return 130
