"""``python -m handgrad train``: a named model on a dataset, in its own run folder.

The run folder is ``--out`` (never overwriting a model there without ``--force``) or a
new ``runs/<dataset>-<model>[-N]``. A run that fails or is interrupted after training
started keeps the model trained so far. ``--dtype`` sets the parameters' and the data's
floating-point type; ``--distributed`` trains data-parallel under ``mpiexec -n K`` (see
:mod:`handgrad.cli.parallel`). ``--model-file`` fine-tunes a saved model instead of
building ``--model`` (see :mod:`handgrad.cli.model_file`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import tempfile
import time

import numpy as np

from .. import losses, optimizers, schedulers
from ..data.augment import augmentation
from ..io.checkpoint import save
from ..training.callbacks import History, LearningRateScheduler
from ..zoo import networks as zoo
from . import model_file, parallel
from .args import (
    DEFAULT_MODEL,
    RUN_ERRORS,
    UsageError,
    chosen_dataset,
    dataset_kind,
    load_dataset,
    reason,
)
from .args import settings as default_settings
from .generative import cmd_train_generative
from .run_folder import environment, json_safe, output_dir
from .runners import RUNNERS
from .tensorboard_logs import check_tensorboard, tensorboard_callbacks


def _plot_curves(history, path):
    try:
        from ..inspect.plots import training_curves
    except ImportError:
        print("note: matplotlib is not installed; skipping the training-curve PNG "
              '(pip install "handgrad[data]")')
        return None
    try:
        training_curves(history).savefig(path, dpi=100)
    except (OSError, ValueError, RuntimeError) as error:  # the model is saved already
        print(f"note: could not draw the training curve {path!r}: {reason(error)}")
        return None
    return path


def _settings(args):
    """The run's settings: the options given, else the defaults of the dataset and model
    (``args.model`` is filled in here when it was not given)."""
    kind = dataset_kind(chosen_dataset(args))
    if args.model is None and args.model_file is None:
        args.model = DEFAULT_MODEL[kind]
    defaults = default_settings(kind, args.model)
    given = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
             "optimizer": args.optimizer, "weight_decay": args.weight_decay,
             "label_smoothing": args.label_smoothing}
    chosen = defaults._replace(**{key: value for key, value in given.items()
                                  if value is not None})
    return chosen._replace(augment=None if args.augment is False else defaults.augment)


def _blas_threads(count):
    """A context that limits the BLAS threads to ``count`` (0: no limit), if threadpoolctl
    is installed; ``(context, the limit applied or None)``."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext(), None
    if count == 0:
        return contextlib.nullcontext(), None
    return threadpool_limits(limits=count, user_api="blas"), count


def _compile(model, run, lr):
    """The optimizer and the loss (cross-entropy, label-smoothed for training when asked)."""
    if not 0.0 <= run.label_smoothing <= 1.0:
        raise UsageError(f"--label-smoothing must be in [0, 1]; received "
                         f"{run.label_smoothing:g}")
    extra = {} if run.weight_decay is None else {"weight_decay": run.weight_decay}
    optimizer = optimizers.get(run.optimizer, lr=lr, **extra)
    loss = "cross_entropy"
    if run.label_smoothing:
        loss = functools.partial(losses.softmax_cross_entropy,
                                 label_smoothing=run.label_smoothing)
    model.compile(optimizer, loss, metrics=("accuracy",))
    return optimizer






def _cast(dataset, dtype):
    """``dataset`` with its inputs in ``dtype`` (the model's; labels unchanged)."""
    return dataclasses.replace(dataset, x_train=dataset.x_train.astype(dtype, copy=False),
                               x_test=dataset.x_test.astype(dtype, copy=False))


def _fit_examples(dataset, split):
    """How many training examples ``fit(validation_split=split)`` trains on (it holds
    out the last ``N - floor(N * (1 - split))``); refuses a split that leaves none."""
    n = len(dataset.x_train)
    cut = int(np.floor(n * (1.0 - split))) if split else n
    if not 1 <= cut <= n or (split and cut == n):
        raise UsageError(f"--validation-split {split} of the {n} training examples leaves "
                         f"{cut} to train on and {n - cut} to validate on; both need at "
                         f"least one (--validation-split 0 turns validation off)")
    return cut


def _fit(model, dataset, args, run, out):
    """Train; returns ``(history, failure)``: failure is None, an error to report (status
    1) or a KeyboardInterrupt (Ctrl-C, status 130). NumPy's overflow warnings are muted:
    a non-finite loss stops ``fit`` with a message that explains it."""
    steps = run.epochs * -(-_fit_examples(dataset, args.validation_split) // run.batch_size)
    callbacks = [history := History(), *tensorboard_callbacks(args, out)]
    if args.schedule == "cosine":
        schedule = schedulers.CosineWarmup(run.lr, max(steps, 1), int(args.warmup * steps))
        callbacks.append(LearningRateScheduler(schedule, per="step"))
    try:
        with np.errstate(all="ignore"):
            model.fit(dataset.x_train, dataset.y_train, epochs=run.epochs,
                      batch_size=run.batch_size, validation_split=args.validation_split,
                      rng=args.seed, callbacks=callbacks, verbose=0 if args.quiet else 1,
                      augment=None if run.augment is None else augmentation(**run.augment),
                      distributed=args.distributed)
    except (KeyboardInterrupt, *RUN_ERRORS) as error:
        if not args.quiet:
            print()  # end the progress bar's line
        return history, error
    return history, None


def _test(model, dataset, optimizer, run, failure, out, created, distributed=False):
    """The test set's loss and accuracy, once, at the end (plain cross-entropy; each
    process takes a share when ``distributed``); a run that failed before its first step
    removes the folder it made and reports it."""
    if failure is not None and optimizer.iterations == 0:
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(out)  # the folder this run made, if it is still empty
        raise _failure(failure, out, saved=False)
    if run.label_smoothing:  # the test loss and the saved file: plain cross-entropy
        model.compile(optimizer, "cross_entropy", metrics=("accuracy",))
    with np.errstate(all="ignore"):
        return model.evaluate(dataset.x_test, dataset.y_test, return_dict=True,
                              distributed=distributed)


def _load_average():
    """The 1-minute load average at the end of training (None where unknown)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None



def _write(out, model, metrics, history):
    """Write the run's files; if ``out`` fails, save the model elsewhere rather than lose it."""
    model_path = os.path.join(out, "model.safetensors")
    try:
        save(model, model_path)
        with open(os.path.join(out, "metrics.json"), "w") as f:
            json.dump(json_safe(metrics), f, indent=2, allow_nan=False)
    except OSError as error:
        try:
            rescue = os.path.join(tempfile.mkdtemp(prefix="handgrad-"), "model.safetensors")
            save(model, rescue)
            kept = f"the trained model was saved to {rescue} instead"
        except OSError as second:
            kept = f"saving it to a temporary folder failed too ({reason(second)})"
        raise UsageError(f"cannot write into {out!r} ({reason(error)}); {kept}",
                         status=1) from None
    curve = _plot_curves(history, os.path.join(out, "curve.png"))
    return [model_path, os.path.join(out, "metrics.json"), *([curve] if curve else [])]


def _failure(error, out, saved):
    """The UsageError that reports a training run that did not finish."""
    kept = (f"; the model from before it was saved in {out}" if saved
            else "; nothing was trained, so nothing was saved")
    if isinstance(error, KeyboardInterrupt):
        return UsageError(f"training interrupted{kept}", status=130)
    return UsageError(f"training failed: {reason(error)}{kept}", status=1)


def _prepare(args):
    """``(dataset in --dtype, settings, model, optimizer)``, every option checked before
    the run folder is made."""
    if dataset_kind(args.dataset) in ("text", "planted"):
        raise UsageError(f"--dataset {args.dataset!r} is not a classification dataset; it is "
                         f"for --model {', '.join(RUNNERS)}")
    model = None if args.model_file is None else model_file.load_for_training(args)
    dataset = _cast(load_dataset(args.dataset, verbose=not args.quiet), args.dtype)
    run = _settings(args)
    if model is not None:
        dataset = model_file.fit_dataset(model, dataset, args)
    try:
        if model is None:
            model = zoo.build(args.model, dataset, seed=args.seed, dtype=args.dtype)
        optimizer = _compile(model, run, run.lr)
    except (ValueError, TypeError, MemoryError) as error:
        raise UsageError(reason(error)) from None
    _fit_examples(dataset, args.validation_split)
    if args.blas_threads < 0:
        raise UsageError(f"--blas-threads must be an int >= 0; received {args.blas_threads}")
    return dataset, run, model, optimizer


def _processes(world):
    """``", data-parallel on K processes"`` for --distributed (what ``mpiexec -n K``
    started), else nothing."""
    return f", data-parallel on {world.size} processes" if world.size > 1 else ""


def cmd_train(args):
    chosen_dataset(args)
    if args.model_file is not None and args.model is not None:
        raise UsageError(f"give --model or --model-file, not both; received --model "
                         f"{args.model} and --model-file {args.model_file!r}")
    if args.model_file is None and args.dtype is None:
        args.dtype = "float32"
    check_tensorboard(args)
    if args.model in RUNNERS:
        threads, _ = _blas_threads(args.blas_threads)
        with threads:
            return cmd_train_generative(args)
    world = parallel.start(args)
    if world.rank != 0:
        args.quiet = True  # rank 0 alone prints
    dataset, run, model, optimizer = parallel.everywhere(_prepare, args)
    epochs, batch_size, lr = run.epochs, run.batch_size, run.lr
    out, created = parallel.from_rank_zero(output_dir, args)
    created = created and world.rank == 0
    if not args.quiet:
        model.summary()
        validation = (f"validating on {args.validation_split:.0%} of the training set"
                      if args.validation_split else "no validation")
        augmented = ("augmenting the training batches (" + ", ".join(
            f"{key} {value}" for key, value in run.augment.items()) + ")"
            if run.augment else "no augmentation")
        print(f"training {args.model or args.model_file} on {dataset.name} "
              f"({len(dataset.x_train)} train / "
              f"{len(dataset.x_test)} test examples, {dataset.num_classes} classes) for "
              f"{epochs} epochs, batch {batch_size}, {args.dtype}, {run.optimizer} lr {lr:g} "
              f"({args.schedule} schedule), label smoothing {run.label_smoothing:g}, "
              f"{augmented}, {validation}{_processes(world)}; writing to {out}")
    threads, blas_threads = _blas_threads(args.blas_threads)
    with threads:
        start = time.perf_counter()
        history, failure = _fit(model, dataset, args, run, out)
        seconds = time.perf_counter() - start
        result = parallel.everywhere(_test, model, dataset, optimizer, run, failure, out,
                                     created, args.distributed)
    if world.rank != 0:  # rank 0 writes the files and reports a failure
        if failure is not None:
            raise SystemExit(_failure(failure, out, saved=True).status)
        return 0
    metrics = {
        "dataset": args.dataset, "model": args.model, "model_file": args.model_file,
        "dtype": args.dtype,
        "optimizer": run.optimizer, "lr": lr,
        "weight_decay": getattr(optimizer, "weight_decay", None),
        "label_smoothing": run.label_smoothing, "augment": run.augment,
        "schedule": args.schedule, "warmup": args.warmup, "epochs": epochs,
        "epochs_run": len(history.epoch), "steps_run": int(optimizer.iterations),
        "stopped_by": None if failure is None else reason(failure), "batch_size": batch_size,
        "validation_split": args.validation_split, "seed": args.seed,
        "blas_threads": blas_threads, "processes": world.size,
        "load_average": _load_average(),
        "train_seconds": round(seconds, 2), "test_loss": result["loss"],
        "test_accuracy": result["accuracy"], "environment": environment(),
        "history": history.history,
    }
    paths = _write(out, model, metrics, history)
    print(f"test accuracy: {result['accuracy']:.4f}  (test loss {result['loss']:.4f}, "
          f"{len(dataset.x_test)} test examples, {seconds:.1f}s training)")
    print(f"wrote {', '.join(paths)}")
    if failure is not None:
        raise _failure(failure, out, saved=True)
    return 0
