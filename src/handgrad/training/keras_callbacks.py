"""Keras's CSVLogger and LambdaCallback."""

from __future__ import annotations

import csv
import os

from .._checks import describe
from .hooks import HOOKS, Callback

__all__ = ["CSVLogger", "LambdaCallback"]


class CSVLogger(Callback):
    """Keras's CSVLogger: one row per epoch in ``filename``, columns ``epoch`` (0-based,
    as Keras writes it) then the epoch logs' keys sorted (those of the first epoch;
    "NA" for one missing when training stopped early), split by ``separator``. The file
    is written anew by each ``fit`` unless ``append=True``, which continues it (the header
    only goes into an empty file). Each row is flushed at once. Under MPI only rank 0
    writes."""

    rank_zero_only = True

    def __init__(self, filename, separator=",", append=False):
        op = "CSVLogger"
        if not isinstance(filename, (str, os.PathLike)) or not os.fspath(filename):
            raise TypeError(f"{op}: 'filename' must be a non-empty str or path; received "
                            f"{describe(filename)}")
        if not isinstance(separator, str) or len(separator) != 1:
            raise ValueError(f"{op}: 'separator' must be one character; received "
                             f"{describe(separator)}")
        if not isinstance(append, bool):
            raise TypeError(f"{op}: 'append' must be a bool; received {describe(append)}")
        self.filename, self.sep, self.append = os.fspath(filename), separator, append
        self.keys = self.writer = self._file = None

    def on_train_begin(self, logs=None):
        header = True
        if self.append and os.path.exists(self.filename):
            with open(self.filename, encoding="utf-8") as existing:
                header = not existing.readline()
        self._file = open(self.filename, "a" if self.append else "w",
                          newline="", encoding="utf-8")
        self._header, self.keys, self.writer = header, None, None

    def on_epoch_end(self, epoch, logs=None):
        if self.keys is None:
            self.keys = sorted(logs)
            self.writer = csv.DictWriter(self._file, fieldnames=["epoch", *self.keys],
                                         delimiter=self.sep, extrasaction="ignore")
            if self._header:
                self.writer.writeheader()
        row = {"epoch": epoch, **{key: logs.get(key, "NA") for key in self.keys}}
        self.writer.writerow(row)
        self._file.flush()

    def on_train_end(self, logs=None):
        if self._file is not None:
            self._file.close()
            self._file = None


TRAINING_HOOKS = ("on_epoch_begin", "on_epoch_end", "on_train_begin", "on_train_end",
                  "on_train_batch_begin", "on_train_batch_end")


class LambdaCallback(Callback):
    """Keras's LambdaCallback: a callback made of functions, each called as the hook of
    its name is (``on_epoch_begin(epoch, logs)``, ``on_epoch_end(epoch, logs)``,
    ``on_train_begin(logs)``, ``on_train_end(logs)``, ``on_train_batch_begin(batch,
    logs)``, ``on_train_batch_end(batch, logs)``; any other hook of
    :mod:`handgrad.training.hooks` by keyword). A hook left out does nothing."""

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, on_train_batch_begin=None, on_train_batch_end=None,
                 **hooks):
        for name in hooks:
            if name not in HOOKS:
                raise TypeError(f"LambdaCallback: {name!r} is not a callback hook; the hooks "
                                f"are {', '.join(HOOKS)}")
        given = dict(zip(TRAINING_HOOKS, (on_epoch_begin, on_epoch_end, on_train_begin,
                                          on_train_end, on_train_batch_begin,
                                          on_train_batch_end)), **hooks)
        for name, function in given.items():
            if function is None:
                continue
            if not callable(function):
                raise TypeError(f"LambdaCallback: {name!r} must be a callable or None; "
                                f"received {describe(function)}")
            setattr(self, name, function)
