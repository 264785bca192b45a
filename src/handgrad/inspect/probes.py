"""Probes that run a model: the gradient-norm probe (a short training run on a copy)
and the pictures behind ``python -m handgrad inspect``."""

from __future__ import annotations

import copy
import os

from .._checks import as_generator, is_int
from ..training.callbacks import GradientNormLogger
from . import plots as plot
from .summary import conv_layers


def gradient_probe(model, x, y, steps=20, batch_size=32, rng=0, per="step"):
    """Train a deep copy of ``model`` for ``steps`` batches and return the
    :class:`~handgrad.training.GradientNormLogger` of that run; ``model`` is untouched.

    The copy keeps the model's optimizer (and its state) when it was compiled, else it
    is compiled with Adam and cross-entropy."""
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if not is_int(value) or value < 1:
            raise ValueError(f"gradient_probe: '{name}' must be an int >= 1; received "
                             f"{value!r}")
    rng = as_generator("gradient_probe", "rng", rng)
    probe = copy.deepcopy(model)
    if probe.optimizer is None or probe.loss_fn is None:
        probe.compile("adam", "cross_entropy", metrics=())
    take = rng.permutation(len(x))[: steps * batch_size]
    logger = GradientNormLogger(per=per)
    probe.fit(x[take], y[take], epochs=1, batch_size=batch_size, callbacks=[logger], rng=rng,
              verbose=0)
    return logger


def save_pictures(model, dataset, out_dir, probe_steps=20, seed=0) -> list:
    """Write filters.png and feature_maps.png (when the model has a convolution),
    confusion_matrix.png (test set) and gradient_norms.png (a ``probe_steps``-step
    :func:`gradient_probe` on the training set) into ``out_dir``; returns the paths."""
    x_test = dataset.x_test.astype(model.dtype, copy=False)
    figures = {}
    if conv_layers(model):
        figures["filters"] = plot.filters(model)
        figures["feature_maps"] = plot.feature_maps(model, x_test[0])
    predicted = model.predict(x_test)
    figures["confusion_matrix"] = plot.confusion_matrix(dataset.y_test, predicted,
                                                        dataset.num_classes)
    logger = gradient_probe(model, dataset.x_train.astype(model.dtype, copy=False),
                            dataset.y_train, steps=probe_steps, rng=seed)
    figures["gradient_norms"] = plot.gradient_norms(logger)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, figure in figures.items():
        paths.append(os.path.join(out_dir, f"{name}.png"))
        figure.savefig(paths[-1], dpi=100)
    return paths
