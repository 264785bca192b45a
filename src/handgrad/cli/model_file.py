"""Saved models on the command line: loading a model file in one line of error, checking
that it classifies a dataset, and ``train --model-file``'s fit of the dataset to the
model's input shape (:func:`handgrad.data.fit_to_input`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..data import fit_to_input
from ..io.checkpoint import load_checkpoint
from .args import RUN_ERRORS, UsageError, reason


def load_model_checkpoint(path):
    """Any failure to read or rebuild the file is the file's fault: one line."""
    try:
        return load_checkpoint(path)
    except Exception as error:  # every load failure is reported in one line, none escapes
        message = reason(error)
        where = "" if str(path) in message else f" {path!r}"  # name the file once
        raise UsageError(f"cannot load model{where}: {message}") from None


def check_classifier(model, path, dataset, spec):
    """``model`` (from ``path``) maps its inputs to one score per class of ``dataset``
    (named ``spec`` on the command line)."""
    try:
        outputs = tuple(model.output_shape(tuple(model.input_shape)))
    except RUN_ERRORS as error:
        raise UsageError(f"cannot run {path!r}: {reason(error)}") from None
    if len(outputs) != 1:
        raise UsageError(f"the model's outputs have shape {outputs}, not (classes,): it is not "
                         f"a classifier of dataset {spec!r}")
    if outputs[0] != dataset.num_classes:
        raise UsageError(f"the model has {outputs[0]} output classes but dataset "
                         f"{spec!r} has {dataset.num_classes} classes")


def load_for_training(args):
    """The model of ``--model-file`` (``--model`` is refused with it by ``cmd_train``);
    fills in ``args.dtype`` with the model's (and refuses another ``--dtype``: the file's
    parameters are not converted)."""
    model = load_model_checkpoint(args.model_file).model
    dtype = np.dtype(model.dtype).name
    if args.dtype is not None and args.dtype != dtype:
        raise UsageError(f"--dtype {args.dtype} differs from the {dtype} parameters of "
                         f"--model-file {args.model_file!r}; leave --dtype out to train in "
                         f"{dtype}")
    args.dtype = dtype
    if isinstance(model.input_shape, list):
        raise UsageError(f"--model-file {args.model_file!r} takes {len(model.input_shape)} "
                         f"inputs; train feeds a model with one")
    return model


def fit_dataset(model, dataset, args):
    """``dataset`` with its examples fitted to ``model``'s input shape, checked to fit
    its classes."""
    shape = tuple(model.input_shape)
    try:
        if dataset.input_shape != shape:
            dataset = dataclasses.replace(dataset, x_train=fit_to_input(dataset.x_train, shape),
                                          x_test=fit_to_input(dataset.x_test, shape))
    except ValueError as error:
        raise UsageError(f"--model-file {args.model_file!r} does not fit dataset "
                         f"{args.dataset!r}: {reason(error).removeprefix('fit_to_input: ')}"
                         ) from None
    except MemoryError:
        raise UsageError(f"fitting dataset {args.dataset!r} {dataset.input_shape} to the "
                         f"model's inputs {shape} needs more memory than there is") from None
    check_classifier(model, args.model_file, dataset, args.dataset)
    return dataset
