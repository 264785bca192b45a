"""Keras's TensorBoard callback: ``fit``'s logs, the parameters, gradients and layer
outputs as TensorBoard event files (``tensorboard --logdir <log_dir>``), written with
the ``tensorboard`` package (``pip install "handgrad[tensorboard]"``, no TensorFlow).

Two runs, as Keras writes them: ``<log_dir>/train`` and ``<log_dir>/validation``.

========================================  ============================================
``epoch_<key>`` (train)                   every epoch log (``loss``, metrics, ``lr``,
                                          ``seconds``) and ``examples_per_second`` of
                                          the training batches; step: the epoch (0-based)
``epoch_<key>`` (validation)              the ``val_<key>`` logs, so that they share a
                                          chart with the training curve
``batch_<key>`` (train)                   with ``update_freq`` "batch" or n: the step's
                                          logs every n steps; step: steps so far
``parameters/<name>``, ``gradients/...``  every ``histogram_freq`` epochs: histograms of
                                          each parameter and of its gradient after the
                                          epoch's last step
``gradient_norm/<layer>``                 the L2 norm of each layer's gradients there
``outputs/<layer>``                       histograms of each layer's output on a fixed
                                          batch (inference mode)
``filters/<layer>``, ``samples``,         with ``write_images``: the first convolution's
``reconstructions`` (images)              kernel, and a generative model's samples and
                                          reconstructions of the fixed batch
========================================  ============================================
"""

from __future__ import annotations

import functools
import os

import numpy as np

from .._checks import describe, is_int
from .._device import to_device
from ..data.batching import take
from ..layers.conv import ConvND
from . import summaries
from .callbacks import layer_gradient_norms
from .hooks import Callback

__all__ = ["TensorBoard"]

FIXED_ROWS = 64  # the fixed batch keeps at most this many examples
SAMPLES = 16
RECONSTRUCTIONS = 8


def _copy_rows(x, rows):
    """The first ``rows`` examples of ``x`` (an array, a list or a dict of arrays), copied."""
    part = take(x, slice(0, rows))
    if isinstance(part, dict):
        return {key: None if v is None else v.copy() for key, v in part.items()}
    if isinstance(part, (list, tuple)):
        return [None if v is None else v.copy() for v in part]
    return part.copy()


def _arrays(value):
    """The arrays of a layer's output (one, or a list or tuple of them)."""
    if isinstance(value, (list, tuple)):
        return [a for item in value for a in _arrays(item)]
    return [value] if hasattr(value, "shape") else []


class TensorBoard(Callback):
    """``TensorBoard(log_dir, histogram_freq=1, update_freq="epoch", write_images=False,
    *, batch=None)``: what it writes is tabled in :mod:`handgrad.training.tensorboard`.

    ``histogram_freq``: the histograms, gradient norms and images every that many epochs
    (epochs 0, k, 2k, ...; 0: none). ``update_freq``: ``"epoch"`` (scalars per epoch
    only), ``"batch"`` or an int n (also each n-th training step's logs). ``write_images``:
    the first convolution's filters, and for a model with ``sample(n, rng=...)`` (the
    VAE, WGAN-GP, RBM) 16 samples from a fixed seed, and with ``reconstruct(x)`` (the
    VAE) the fixed batch's first 8 examples over their reconstructions.

    The fixed batch is ``batch`` (inputs as the model's ``forward`` takes them) or, when
    None, the first inputs the model's own ``forward`` receives in ``fit``'s first
    validation (else in its first training step), at most 64 examples, kept for every
    later epoch; a model whose steps never call its ``forward`` (the VAE, the RBM) gets
    layer outputs and reconstructions only from ``batch``. A model that keeps no
    gradients (the RBM hands its CD-k gradients to its optimizer) gets none written.
    Files are flushed after every epoch and closed when ``fit`` ends; under MPI only rank
    0 writes."""

    rank_zero_only = True

    def __init__(self, log_dir, histogram_freq=1, update_freq="epoch", write_images=False,
                 *, batch=None):
        op = "TensorBoard"
        if not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir):
            raise TypeError(f"{op}: 'log_dir' must be a non-empty str or path; received "
                            f"{describe(log_dir)}")
        if not is_int(histogram_freq) or histogram_freq < 0:
            raise ValueError(f"{op}: 'histogram_freq' must be an int >= 0; received "
                             f"{describe(histogram_freq)}")
        if isinstance(update_freq, str) and update_freq in ("epoch", "batch"):
            every = 0 if update_freq == "epoch" else 1
        elif is_int(update_freq) and update_freq >= 1:
            every = int(update_freq)
        else:
            raise ValueError(f"{op}: 'update_freq' must be 'epoch', 'batch' or an int >= 1; "
                             f"received {describe(update_freq)}")
        if not isinstance(write_images, bool):
            raise TypeError(f"{op}: 'write_images' must be a bool; received "
                            f"{describe(write_images)}")
        if write_images and histogram_freq == 0:
            raise ValueError(f"{op}: write_images=True writes the images every "
                             f"histogram_freq epochs; give histogram_freq >= 1 (received 0)")
        self.records = summaries.Records(op)
        self.log_dir, self.histogram_freq = os.fspath(log_dir), histogram_freq
        self.update_freq, self.write_images, self._every = update_freq, write_images, every
        self.batch = batch
        self.steps = 0  # training steps seen, across fit calls: the step of batch scalars
        self._writers, self._seen, self._armed = {}, {}, {}
        self._fitting, self._histograms, self._gradients, self._speed = False, False, None, None

    # ------------------------------------------------------------- writing
    def _write(self, run, step, values):
        if run not in self._writers:
            self._writers[run] = self.records.EventFileWriter(os.path.join(self.log_dir, run))
        self._writers[run].add_event(self.records.event(step, values))

    def _scalars(self, run, step, prefix, logs):
        self._write(run, step, [self.records.scalar(f"{prefix}{key}", value)
                                for key, value in logs.items()])

    def close(self):
        """Flush and close the event files (``fit`` does it when it ends)."""
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    # ------------------------------------------------------- the fixed batch
    def _arm(self, kind):
        """Keep the first input of the model's next forward as the ``kind`` batch."""
        if self.batch is not None or kind in self._seen or kind in self._armed:
            return

        def keep(layer, x, y):
            self._seen.setdefault(kind, _copy_rows(x, FIXED_ROWS))
            self._disarm(kind)

        self._armed[kind] = self.model.register_forward_hook(keep)

    def _disarm(self, kind):
        handle = self._armed.pop(kind, None)
        if handle is not None:
            handle.remove()

    def fixed_batch(self):
        """``batch``, else the kept validation inputs, else the training ones (or None)."""
        if self.batch is not None:  # given on the host: placed with the model
            return to_device(self.batch, getattr(self.model, "device", "cpu"))
        return self._seen.get("validation", self._seen.get("train"))

    # --------------------------------------------------------------- hooks
    def on_train_begin(self, logs=None):
        self._fitting = True
        self._arm("train")

    def on_epoch_begin(self, epoch, logs=None):
        self._histograms = bool(self.histogram_freq) and epoch % self.histogram_freq == 0
        self._gradients = self._speed = None

    def on_train_batch_end(self, batch, logs=None):
        self._disarm("train")
        self.steps += 1
        if self._every and self.steps % self._every == 0:
            self._scalars("train", self.steps, "batch_", logs)

    def _keep_gradients(self):
        """The last training step's gradients, once an epoch, before validation (a GAN's
        test step zeroes them) or at the epoch's end without it."""
        if self._histograms and self._gradients is None:
            self._gradients = {key: np.array(summaries.host(g)) for key, g in
                               self.model.named_gradients(trainable_only=True).items()}

    def set_epoch_examples(self, examples, seconds):
        self._speed = examples / seconds if seconds > 0 else None

    def on_test_begin(self, logs=None):
        if self._fitting:
            self._keep_gradients()
            self._arm("validation")

    def on_test_end(self, logs=None):
        self._disarm("validation")

    def on_epoch_end(self, epoch, logs=None):
        self._keep_gradients()
        train = {k: v for k, v in logs.items() if not k.startswith("val_")}
        if self._speed is not None:
            train["examples_per_second"] = self._speed
        self._scalars("train", epoch, "epoch_", train)
        validation = {k[4:]: v for k, v in logs.items() if k.startswith("val_")}
        if validation:
            self._scalars("validation", epoch, "epoch_", validation)
        if self._histograms:
            self._write("train", epoch, self._histogram_values())
            if self.write_images:
                self._write("train", epoch, self._images())
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        self._fitting = False
        for kind in tuple(self._armed):
            self._disarm(kind)
        self.close()

    # ---------------------------------------------------------- histograms
    def _histogram_values(self) -> list:
        """Parameters, gradients (unless all zero or none kept), gradient norms, outputs."""
        records, model = self.records, self.model
        values = [records.histogram(f"parameters/{key}", value)
                  for key, value in model.named_parameters().items()]
        gradients = self._gradients or {}
        if any(g.any() for g in gradients.values()):
            values += [records.histogram(f"gradients/{key}", g)
                       for key, g in gradients.items()]
            values += [records.scalar(f"gradient_norm/{layer}", norm) for layer, norm
                       in layer_gradient_norms(model, gradients).items()]
        values += [records.histogram(f"outputs/{path}", np.concatenate(arrays))
                   for path, arrays in self.layer_outputs().items()]
        return values

    def layer_outputs(self) -> dict:
        """``{layer path: [its outputs raveled]}`` of every leaf layer on the fixed batch
        (inference mode); empty without one."""
        batch = self.fixed_batch()
        if batch is None:
            return {}
        outputs = {}

        def record(path, layer, x, y):
            outputs.setdefault(path, []).extend(summaries.host(a).ravel() for a in _arrays(y))

        handles = [layer.register_forward_hook(functools.partial(record, path))
                   for path, layer in self.model.walk()
                   if path and next(iter(layer.children()), None) is None]
        try:
            self.model.forward(batch, training=False)
        finally:
            for handle in handles:
                handle.remove()
        return {path: arrays for path, arrays in outputs.items() if arrays}

    # --------------------------------------------------------------- images
    def _images(self) -> list:
        records, model = self.records, self.model
        values = []
        conv = next(((path, layer) for path, layer in model.walk()
                     if isinstance(layer, ConvND) and "W" in layer.parameters), None)
        if conv is not None:
            tiles = summaries.filter_tiles(conv[1].parameters["W"])
            values.append(records.image(f"filters/{conv[0] or 'conv'}", summaries.grid(tiles)))
        batch = self.fixed_batch()
        if callable(getattr(model, "reconstruct", None)) and batch is not None:
            x = batch[:RECONSTRUCTIONS]
            pairs = np.concatenate([summaries.host(x), summaries.host(model.reconstruct(x))])
            tiles = summaries.as_tiles(summaries.unit_range(pairs))
            values.append(records.image("reconstructions", summaries.grid(tiles, len(x))))
        if callable(getattr(model, "sample", None)):
            drawn = model.sample(SAMPLES, rng=np.random.default_rng(0))
            tiles = summaries.as_tiles(summaries.unit_range(drawn))
            values.append(records.image("samples", summaries.grid(tiles)))
        return values
