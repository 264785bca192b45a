"""BackupAndRestore: a ``fit`` interrupted by an exception resumes where its last
finished epoch left it when ``fit`` is called again with the same callback."""

from __future__ import annotations

import json
import os

import numpy as np

from .. import distributed as dist
from .._checks import describe
from .callbacks import _model_arrays
from .hooks import Callback

__all__ = ["BackupAndRestore", "back_up", "resume"]

FILE = "latest.safetensors"


class BackupAndRestore(Callback):
    """Keras's BackupAndRestore: at each epoch's end (after every callback's
    ``on_epoch_end``) write the training state to ``backup_dir/latest.safetensors``
    (atomically: a temporary file, then a rename); when
    ``fit`` starts and that file exists, restore it and go on from the epoch after the
    saved one (Keras's ``initial_epoch`` from the backup). A run that ends normally
    deletes the file (``delete_checkpoint=True``), so the next ``fit`` starts afresh.

    The state: the model's parameters, buffers and random layers' generators, the
    compiled optimizer's state and ``lr``, the epochs done and ``fit``'s shuffling and
    augmentation generator, so that with arrays as data the resumed run equals the
    uninterrupted one bit for bit (a generator given as data is not rewound).
    ``save_freq="epoch"`` only (Keras's int, a backup every so many batches, would need a
    resume within an epoch). Under MPI only rank 0 writes; every rank restores."""

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        op = "BackupAndRestore"
        if not isinstance(backup_dir, (str, os.PathLike)) or not os.fspath(backup_dir):
            raise TypeError(f"{op}: 'backup_dir' must be a non-empty str or path; received "
                            f"{describe(backup_dir)}")
        if save_freq != "epoch":
            raise ValueError(f"{op}: 'save_freq' must be 'epoch' (a backup after every "
                             f"epoch; backups within an epoch are not supported); received "
                             f"{describe(save_freq)}")
        if not isinstance(delete_checkpoint, bool):
            raise TypeError(f"{op}: 'delete_checkpoint' must be a bool; received "
                            f"{describe(delete_checkpoint)}")
        self.backup_dir, self.save_freq = os.fspath(backup_dir), save_freq
        self.delete_checkpoint = delete_checkpoint
        self.path = os.path.join(self.backup_dir, FILE)
        self._rng, self._writes = None, True

    def restore(self, rng, distributed) -> int | None:
        """Called by ``fit`` after ``on_train_begin`` with its generator: restore the
        backup, if any, and return the epochs it had done (None without a backup)."""
        self._rng = rng
        self._writes = not distributed or dist.rank() == 0
        if not os.path.exists(self.path):
            return None
        from ..io import safetensors
        from ..io.checkpoint import _split, assign_arrays

        tensors, metadata = safetensors.read(self.path)
        where = f"BackupAndRestore: the backup {self.path!r}"
        try:
            state = json.loads(metadata["handgrad_backup"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{where} is not a BackupAndRestore file (no "
                             f"'handgrad_backup' metadata); remove it or give another "
                             f"backup_dir") from None
        model, optimizer = self.model, self.model.optimizer
        assign_arrays(where, model.named_parameters(), _split(tensors, "param/"), "parameters")
        assign_arrays(where, model.named_buffers(), _split(tensors, "buffer/"), "buffers")
        model.load_extra_state(state["extra_state"])
        if (optimizer is None) != (state["lr"] is None):
            raise ValueError(f"{where} was written for a model "
                             f"{'with' if optimizer is None else 'without'} an optimizer")
        if optimizer is not None:
            optimizer.load_state_dict(_split(tensors, "optim/"), params=model.named_parameters())
            optimizer.lr = state["lr"]
        if type(rng.bit_generator).__name__ != state["rng"]["bit_generator"]:
            raise ValueError(f"{where} holds a {state['rng']['bit_generator']} generator; "
                             f"fit's rng is a {type(rng.bit_generator).__name__}")
        rng.bit_generator.state = state["rng"]
        return int(state["epoch"])

    def save(self, epoch):
        """Called by ``fit`` after every callback's ``on_epoch_end`` of ``epoch`` (so
        that what they changed, e.g. the rate, is in the backup)."""
        if not self._writes:
            return
        from ..io import safetensors
        from ..io.document import jsonable

        model, optimizer = self.model, self.model.optimizer
        tensors = _model_arrays(model)
        if optimizer is not None:
            tensors.update({f"optim/{k}": np.asarray(v)
                            for k, v in optimizer.state_dict().items()})
        state = {"epoch": epoch + 1, "rng": jsonable(self._rng.bit_generator.state),
                 "extra_state": jsonable(model.extra_state()),
                 "lr": None if optimizer is None else float(optimizer.lr)}
        os.makedirs(self.backup_dir, exist_ok=True)
        safetensors.write(self.path, tensors, {"handgrad_backup": json.dumps(state)})

    def on_train_end(self, logs=None):
        if self.delete_checkpoint and self._writes and os.path.exists(self.path):
            os.remove(self.path)


def resume(callbacks, run) -> int:
    """The epoch ``fit`` starts at: ``run.initial_epoch``, or a later one restored by a
    :class:`BackupAndRestore` of ``callbacks``."""
    start = run.initial_epoch
    for callback in callbacks:
        if isinstance(callback, BackupAndRestore):
            done = callback.restore(run.rng, run.distributed)
            start = start if done is None else max(start, done)
    return start


def back_up(callbacks, epoch):
    """After ``epoch``'s ``on_epoch_end`` hooks: every :class:`BackupAndRestore` writes."""
    for callback in callbacks:
        if isinstance(callback, BackupAndRestore):
            callback.save(epoch)
