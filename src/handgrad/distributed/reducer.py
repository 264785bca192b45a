"""Summing gradients over ranks while backward runs: buckets and non-blocking allreduce.

The trainable layers are taken in reverse order (the order backward finishes them) and
packed into a few contiguous buffers of about ``bucket_bytes`` each; every layer's
``gradients`` become views into its bucket, so backward accumulates straight into the
buffer that is sent. A backward hook (``Layer.register_backward_hook``) on each of these
layers tells when backward has consumed the layer's last cache (``pending_backwards`` is
0: its gradients are complete); when every layer of a bucket is ready the bucket's
``MPI_Iallreduce`` starts
(in bucket order on every rank, as MPI requires) and the next layers' backward runs while
it travels. :meth:`GradientReducer.reduce` starts what is left and waits for all.

Each rank multiplies its loss gradient by ``weight = share / global batch`` (the losses
average over their own batch), so the sum over ranks is the gradient of the global
batch's mean loss; layers whose statistics cover the batch (``BatchNorm``, ``Dropout``:
``needs_communicator``) are given a :class:`LayerCommunicator` that gives them the global
batch, with ``Layer.register_communicator`` (see :mod:`handgrad.layers.hooks`). The
reducer keeps the handles of its registrations and removes them when it closes; it
writes nothing into the layers.
"""

from __future__ import annotations

import time

import numpy as np

from .._checks import describe, is_int
from . import comm
from .sharding import shard
from .state import check_supported, trainable_layers


class LayerCommunicator:
    """What a layer's ``communicator`` offers: ``allreduce(array)`` (the sum over ranks,
    a new array) and ``rows`` (``(start, total)``: this rank's rows of the step's global
    batch, set by :meth:`GradientReducer.batch`)."""

    def __init__(self):
        self._rows = None

    @property
    def rows(self):
        if self._rows is None:
            raise RuntimeError("a layer needs the global batch of this step: call "
                               "reducer.batch(count) before the training forward")
        return self._rows

    @staticmethod
    def allreduce(array):
        total = np.array(array, copy=True, order="C")
        if comm.enabled():
            mpi, world = comm.mpi()
            world.Allreduce(mpi.IN_PLACE, total, op=mpi.SUM)
        return total


class _Bucket:
    """One contiguous buffer: the layers whose gradients are views into it."""

    def __init__(self, layers):
        self.layers = layers
        keys = [(layer, key, grad) for layer in layers for key, grad in layer.gradients.items()]
        self.buffer = np.zeros(sum(grad.size for _, _, grad in keys), dtype=layers[0].dtype)
        self.views, offset = [], 0
        for layer, key, grad in keys:
            view = self.buffer[offset:offset + grad.size].reshape(grad.shape)
            view[...] = grad
            layer.gradients[key] = view
            self.views.append((layer, key, view))
            offset += grad.size

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes


class GradientReducer:
    """Sum a model's gradients over the ranks, bucketed and overlapped with backward (see
    the module docstring); also gives BatchNorm and Dropout the global batch. One step::

        part = reducer.batch(len(xb))            # this rank's rows of the global batch
        logits = model.forward(xb[part], training=True)
        loss, dlogits = loss_fn(logits, yb[part])
        model.backward(dlogits * reducer.weight) # buckets start as layers finish
        reducer.reduce()                         # gradients: the global batch's
        optimizer.step(model.named_parameters(), model.named_gradients())

    Make it after the model is built and its layers frozen or not; :meth:`close` (or
    leaving a ``with`` block) gives the layers their own gradient arrays back. With one
    process it changes nothing: ``batch`` returns every row and ``weight`` is 1.
    ``bucket_bytes`` (default :attr:`BUCKET_BYTES`, which ``fit`` uses) is the size at
    which a bucket is closed; a layer larger than it gets a bucket of its own.
    """

    BUCKET_BYTES = 2 ** 18

    def __init__(self, model, bucket_bytes=None):
        bucket_bytes = self.BUCKET_BYTES if bucket_bytes is None else bucket_bytes
        if not is_int(bucket_bytes) or bucket_bytes < 1:
            raise ValueError(f"GradientReducer: 'bucket_bytes' must be an int >= 1; received "
                             f"{describe(bucket_bytes)}")
        check_supported("GradientReducer", model)
        self.model, self.weight, self.wait_seconds = model, 1.0, 0.0
        self.communicator = LayerCommunicator()
        self.buckets, self._requests, self._closed, self._handles = [], [], False, []
        self._share = None
        if not comm.enabled():
            return
        current, size = [], 0
        for layer in reversed(trainable_layers(model)):
            if current and (layer.dtype != current[0].dtype or size >= bucket_bytes):
                self.buckets.append(_Bucket(current))
                current, size = [], 0
            current.append(layer)
            size += sum(grad.nbytes for grad in layer.gradients.values())
        if current:
            self.buckets.append(_Bucket(current))
        self._bucket_of = {id(layer): index for index, bucket in enumerate(self.buckets)
                           for layer in bucket.layers}
        for bucket in self.buckets:
            self._handles += [layer.register_backward_hook(self._backward_done)
                              for layer in bucket.layers]
        needing = {id(layer): layer for _, layer in model.walk() if layer.needs_communicator}
        self._handles += [layer.register_communicator(self.communicator)
                          for layer in needing.values()]
        self._start_step()

    @property
    def nbytes(self) -> int:
        """The bytes allreduced per step."""
        return sum(bucket.nbytes for bucket in self.buckets)

    # ------------------------------------------------------------------ a step
    def _start_step(self):
        self._pending = [len(bucket.layers) for bucket in self.buckets]
        self._done, self._next = set(), 0

    def batch(self, count) -> slice:
        """Start a step on a global batch of ``count`` examples: returns this rank's rows
        (:func:`shard`) and sets :attr:`weight` to ``rows / count`` and the rows that
        Dropout sees."""
        if not is_int(count) or count < 1:
            raise ValueError(f"GradientReducer.batch: 'count' must be an int >= 1 (the "
                             f"examples in the global batch); received {describe(count)}")
        self._check_open("batch")
        if self._requests:
            raise RuntimeError("GradientReducer.batch: the previous step's allreduces are "
                               "still running; call reduce() after each backward")
        part = shard(count)
        self.weight = (part.stop - part.start) / count
        self._share = part.stop - part.start
        self.communicator._rows = (part.start, int(count))
        self._start_step()
        return part

    def _backward_done(self, layer, dy, dx):
        """The backward hook of the bucketed layers."""
        if not layer.pending_backwards:
            self._ready(layer)

    def _ready(self, layer):
        """Called for a layer whose backward is complete for this step."""
        if id(layer) in self._done:
            index = self._bucket_of[id(layer)]
            if index < self._next:
                raise RuntimeError(f"GradientReducer: {layer.label} ran backward again after "
                                   f"its gradients' allreduce started; call reduce() and "
                                   f"step the optimizer after each backward")
            return
        self._done.add(id(layer))
        index = self._bucket_of[id(layer)]
        self._pending[index] -= 1
        while self._next < len(self.buckets) and self._pending[self._next] == 0:
            self._launch(self._next)
        if self._requests:
            comm.mpi()[0].Request.Testall(self._requests)  # lets MPI move the data on

    def _launch(self, index):
        mpi, world = comm.mpi()
        self._requests.append(world.Iallreduce(mpi.IN_PLACE, self.buckets[index].buffer,
                                               op=mpi.SUM))
        self._next = index + 1

    def reduce(self):
        """Start the buckets that backward has not started, in order, and wait for all:
        the layers' gradients are then the sums over the ranks."""
        self._check_open("reduce")
        if not comm.enabled():
            return
        start = time.perf_counter()
        while self._next < len(self.buckets):
            self._launch(self._next)
        comm.mpi()[0].Request.Waitall(self._requests)
        self._requests = []
        self.wait_seconds += time.perf_counter() - start
        for bucket in self.buckets:
            for layer, key, view in bucket.views:
                if layer.gradients.get(key) is not view:
                    raise RuntimeError(f"GradientReducer: {layer.label} replaced its "
                                       f"gradient {key!r} (rebuilt?); make a new reducer")
        self._start_step()

    def mean(self, value):
        """The example-weighted mean over the global batch of this rank's ``value`` (a
        float or a dict of floats, e.g. the batch's logs; the same keys on every rank)."""
        self._check_open("mean")
        share = self._share
        if share is None:
            raise RuntimeError("GradientReducer.mean: call batch(count) first")
        values = value if isinstance(value, dict) else {"value": value}
        keys = sorted(values)  # the same order on every rank
        local = np.array([float(values[key]) * share for key in keys], dtype=np.float64)
        means = dict(zip(keys, map(float, comm.allreduce(local) / self.communicator.rows[1])))
        return {key: means[key] for key in values} if isinstance(value, dict) else \
            means["value"]

    # ------------------------------------------------------------------- close
    def _check_open(self, what):
        if self._closed:
            raise RuntimeError(f"GradientReducer.{what}: the reducer is closed")

    def close(self, wait=True):
        """Give the layers their own gradient arrays back and detach from them;
        ``wait=False`` (after an error) leaves running allreduces alone."""
        if self._closed:
            return
        if wait and self._requests:
            comm.mpi()[0].Request.Waitall(self._requests)
        self._requests, self._closed = [], True
        for bucket in self.buckets:
            for layer, key, view in bucket.views:
                if layer.gradients.get(key) is view:
                    layer.gradients[key] = view.copy()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, kind, value, trace):
        self.close(wait=kind is None)
