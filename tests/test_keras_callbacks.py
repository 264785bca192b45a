"""Keras's callbacks with Keras's meaning: ReduceLROnPlateau's Keras rule, CSVLogger,
LambdaCallback, ProgbarLogger and fit(verbose=2), BackupAndRestore, ModelCheckpoint's
save_weights_only. Each test writes down the Keras semantics it relies on."""

from __future__ import annotations

import csv
import io as stdio
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import optimizers
from handgrad.io import load_checkpoint, safetensors
from handgrad.model import Sequential
from handgrad.training import (
    BackupAndRestore,
    CSVLogger,
    EarlyStopping,
    LambdaCallback,
    ModelCheckpoint,
    ProgbarLogger,
    ReduceLROnPlateau,
)
from handgrad.training.hooks import HOOKS
from test_callbacks import Scripted, data, model

# ------------------------------------------------------------- ReduceLROnPlateau

# Keras's ReduceLROnPlateau.on_epoch_end, per epoch: a cooldown epoch decrements the
# counter and resets wait; then an improvement (value < best - min_delta) resets wait,
# else outside cooldown wait += 1 and at wait >= patience, if lr > min_lr,
# lr = max(lr * factor, min_lr), cooldown starts and wait = 0.
LOSSES = [1.0, 0.995, 0.99, 0.98, 0.98, 0.98, 0.98, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
# by hand from those rules (patience 2, factor 0.5, min_delta 0.01, cooldown 1,
# min_lr 0.01): reductions after epochs 2, 5, 9 and 11 (0-based); 0.1 * 0.5 ** 4 is
# below min_lr, so the last one gives 0.01, and epoch 13 has lr == min_lr: no change.
HALVED = [0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, None, None, None]


def plateau_rates(callback, values, lr=0.1):
    callback.set_model(SimpleNamespace(optimizer=optimizers.SGD(lr=lr)))
    callback.on_train_begin()
    rates = []
    for epoch, value in enumerate(values):
        callback.on_epoch_end(epoch, {"val_loss": value, "val_accuracy": -value})
        rates.append(callback.model.optimizer.lr)
    return rates


def test_reduce_lr_on_plateau_follows_keras_with_min_delta():
    expected = [0.01 if k is None else 0.1 * 0.5 ** k for k in HALVED]
    callback = ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2, min_delta=0.01,
                                 cooldown=1, min_lr=0.01)
    assert plateau_rates(callback, LOSSES) == expected
    # mode "auto": "max" for a monitor with "acc" in its name (Keras's rule)
    auto = ReduceLROnPlateau(monitor="val_accuracy", mode="auto", factor=0.5, patience=2,
                             min_delta=0.01, cooldown=1, min_lr=0.01)
    assert auto.mode == "max" and plateau_rates(auto, LOSSES) == expected


def test_reduce_lr_on_plateau_lowers_the_rate_in_fit():
    x, y = data()
    net = model(lr=0.08)
    # Keras: patience=1 and a min_delta no epoch can beat: every epoch after the first
    # is bad, so the rate is halved after epochs 1, 2 and 3 (0-based); the logged "lr"
    # is the rate the epoch trained with
    history = net.fit(x, y, epochs=4, verbose=0, callbacks=[
        ReduceLROnPlateau("loss", factor=0.5, patience=1, min_delta=10.0)])
    assert history["lr"] == [0.08, 0.08, 0.04, 0.02] and net.optimizer.lr == 0.01


def test_reduce_lr_on_plateau_refuses_mixed_rules():
    with pytest.raises(ValueError, match=r"'min_delta' chooses Keras's rule.*'threshold'"):
        ReduceLROnPlateau(min_delta=0.1, threshold=0.01)
    with pytest.raises(ValueError, match=r"'min_delta' must be"):
        ReduceLROnPlateau(min_delta=-1.0)


# ------------------------------------------------------------------- CSVLogger


def read_csv(path, separator=","):
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.reader(file, delimiter=separator))


def test_csv_logger_writes_keras_columns(tmp_path):
    # Keras: a header "epoch" then the first epoch's log keys sorted, one row per epoch
    # with the 0-based epoch index; append=True continues a file (header only once)
    x, y = data()
    path = tmp_path / "log.csv"
    net = model()
    history = net.fit(x, y, epochs=3, validation_data=(x, y), verbose=0,
                      callbacks=[CSVLogger(path, separator=";")])
    rows = read_csv(path, ";")
    keys = sorted(history.history)
    assert rows[0] == ["epoch", *keys] and len(rows) == 4
    for epoch, row in enumerate(rows[1:]):
        assert row == [str(epoch), *(repr(history[key][epoch]) for key in keys)]
    more = net.fit(x, y, epochs=2, validation_data=(x, y), verbose=0,
                   callbacks=[CSVLogger(path, separator=";", append=True)])
    rows = read_csv(path, ";")
    assert len(rows) == 6 and rows.count(rows[0]) == 1
    assert [row[0] for row in rows[1:]] == ["0", "1", "2", "0", "1"]
    assert rows[-1][keys.index("loss") + 1] == repr(more["loss"][-1])
    net.fit(x, y, epochs=1, verbose=0, callbacks=[CSVLogger(path)])  # append=False: anew
    assert len(read_csv(path)) == 2


def test_csv_logger_refuses_bad_arguments():
    with pytest.raises(ValueError, match=r"'separator' must be one character.*'::'"):
        CSVLogger("log.csv", separator="::")
    with pytest.raises(TypeError, match=r"'filename' must be"):
        CSVLogger(3)


# -------------------------------------------------------------- LambdaCallback


def test_lambda_callback_calls_each_function_at_its_hook():
    # Keras: on_epoch_*(epoch, logs), on_train_batch_*(batch, logs), on_train_*(logs)
    x, y = data(n=8)
    calls = []

    def recorder(name):
        return lambda *args: calls.append((name, *args[:-1]))

    hooks = {name: recorder(name)
             for name in ("on_epoch_begin", "on_epoch_end", "on_train_begin",
                          "on_train_end", "on_train_batch_begin", "on_train_batch_end")}
    tested = []
    callback = LambdaCallback(**hooks, on_test_end=lambda logs: tested.append(logs))
    model().fit(x, y, epochs=2, batch_size=4, validation_data=(x, y), verbose=0,
                callbacks=[callback])
    epoch = [("on_train_batch_begin", 0), ("on_train_batch_end", 0),
             ("on_train_batch_begin", 1), ("on_train_batch_end", 1)]
    assert calls == [("on_train_begin",),
                     ("on_epoch_begin", 0), *epoch, ("on_epoch_end", 0),
                     ("on_epoch_begin", 1), *epoch, ("on_epoch_end", 1), ("on_train_end",)]
    assert len(tested) == 2 and "loss" in tested[0]


def test_lambda_callback_refuses_what_would_never_run():
    with pytest.raises(TypeError, match=r"'on_epoch_ends' is not a callback hook"):
        LambdaCallback(on_epoch_ends=print)
    with pytest.raises(TypeError, match=r"'on_epoch_end' must be a callable or None"):
        LambdaCallback(on_epoch_end=3)
    assert "on_predict_end" in HOOKS


# ----------------------------------------------------- ProgbarLogger, verbose=2


class Terminal(stdio.StringIO):
    def isatty(self):
        return True


def printed(monkeypatch, verbose=1, callbacks=(), epochs=2):
    x, y = data(n=10)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    history = model().fit(x, y, epochs=epochs, batch_size=4, verbose=verbose,
                          callbacks=list(callbacks))
    return terminal.getvalue(), history


def test_verbose_2_prints_one_line_per_epoch_even_in_a_terminal(monkeypatch):
    # Keras's verbose: 1 a bar redrawn at each step, 2 one line per epoch, 0 nothing
    bar, _ = printed(monkeypatch, 1)
    assert bar.count("\r") == 2 * 3 + 2  # three steps and the final line, per epoch
    lines, _ = printed(monkeypatch, 2)
    assert "\r" not in lines and len(lines.splitlines()) == 2
    assert lines.splitlines()[1].startswith("Epoch 2/2 [") and " 3/3  loss " in lines
    assert printed(monkeypatch, 0)[0] == ""
    assert printed(monkeypatch, "auto")[0].count("\r") == bar.count("\r")  # Keras: "auto" is 1
    with pytest.raises(ValueError, match=r"'verbose' must be 0.*received 3"):
        printed(monkeypatch, 3)


def test_progbar_logger_sets_the_bar(monkeypatch):
    # Keras's ProgbarLogger: count_mode "samples" counts examples, "steps" batches;
    # stateful_metrics are shown as their last value, not the running mean
    lines, _ = printed(monkeypatch, 1, [ProgbarLogger(verbose=2)])
    assert "\r" not in lines and len(lines.splitlines()) == 2
    assert printed(monkeypatch, 1, [ProgbarLogger(verbose=0)])[0] == ""
    samples, _ = printed(monkeypatch, 2, [ProgbarLogger(count_mode="samples")])
    assert " 10/10  loss " in samples and " 3/3 " not in samples
    losses = []
    record = LambdaCallback(on_train_batch_end=lambda b, logs: losses.append(logs["loss"]))
    shown, _ = printed(monkeypatch, 1, [record, ProgbarLogger(stateful_metrics=["loss"])],
                       epochs=1)
    draws = shown.split("\r")[1:4]
    for draw, loss in zip(draws, losses):
        assert f"loss {loss:.4f}" in draw
    mean, _ = printed(monkeypatch, 1, epochs=1)
    assert f"loss {losses[1]:.4f}" not in mean.split("\r")[2]
    with pytest.raises(ValueError, match=r"'count_mode' must be one of"):
        ProgbarLogger(count_mode="batches")
    with pytest.raises(TypeError, match=r"'stateful_metrics' must be None or a list"):
        ProgbarLogger(stateful_metrics="loss")


# ------------------------------------------------------------ ModelCheckpoint


def test_model_checkpoint_saves_weights_only_and_the_best(tmp_path):
    # Keras: save_weights_only writes what load_weights reads; save_best_only with
    # mode "max" writes only when the monitor rises; {epoch} is 1-based
    x, y = data()
    net = model()
    scores = iter([0.5, 0.4, 0.7])
    score = LambdaCallback(on_epoch_end=lambda epoch, logs: logs.update(score=next(scores)))
    pattern = str(tmp_path / "w-{epoch:02d}-{score:.2f}.safetensors")
    net.fit(x, y, epochs=3, verbose=0, callbacks=[score, ModelCheckpoint(
        pattern, monitor="score", mode="max", save_best_only=True, save_weights_only=True)])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "w-01-0.50.safetensors", "w-03-0.70.safetensors"]
    tensors, _ = safetensors.read(tmp_path / "w-03-0.70.safetensors")
    assert not any(key.startswith("optim/") for key in tensors)
    fresh = model()
    fresh.load_weights(tmp_path / "w-03-0.70.safetensors")
    for key, value in net.named_parameters().items():
        assert np.array_equal(fresh.named_parameters()[key], value)
    with pytest.raises(ValueError):  # no config: not a whole-model checkpoint
        load_checkpoint(tmp_path / "w-03-0.70.safetensors")
    with pytest.raises(TypeError, match=r"'save_weights_only' must be a bool"):
        ModelCheckpoint("x.safetensors", save_weights_only="yes")


def test_callbacks_that_write_files_run_on_rank_zero_only():
    # under MPI, fit gives the callbacks with rank_zero_only to rank 0 alone
    assert CSVLogger("a.csv").rank_zero_only and ProgbarLogger().rank_zero_only
    assert ModelCheckpoint("a.safetensors").rank_zero_only
    assert not BackupAndRestore("dir").rank_zero_only  # every rank restores; rank 0 writes


# ------------------------------------------------------------ BackupAndRestore


def dropout_model():
    net = Sequential([L.Dense(8), L.ReLU(), L.Dropout(0.3), L.Dense(2)], seed=0,
                     input_shape=(3,))
    return net.compile(optimizers.Adam(lr=0.01), "cross_entropy")


class Interrupt(RuntimeError):
    pass


def raise_at(epoch_index, batch_index):
    """A callback that raises in the middle of an epoch (after some updates)."""
    where = {}

    def batch_end(batch, logs):
        if where.get("epoch") == epoch_index and batch == batch_index:
            raise Interrupt("preempted")

    return LambdaCallback(on_epoch_begin=lambda epoch, logs: where.update(epoch=epoch),
                          on_train_batch_end=batch_end)


def halve_lr(net):
    """Halves the rate after each epoch: the rate of a resumed run is the restored one's."""
    return LambdaCallback(on_epoch_end=lambda epoch, logs: setattr(
        net.optimizer, "lr", net.optimizer.lr * 0.5))


def training_state(net):
    return {**{f"p:{k}": v for k, v in net.named_parameters().items()},
            **{f"b:{k}": v for k, v in net.named_buffers().items()},
            **{f"o:{k}": np.asarray(v) for k, v in net.optimizer.state_dict().items()}}


def test_backup_and_restore_resumes_bit_for_bit(tmp_path):
    # Keras: after each epoch the state is backed up; a fit called again with the same
    # callback after an interruption restores it and starts at the next epoch; a run
    # that finishes deletes the backup (delete_checkpoint=True)
    x, y = data()
    kwargs = dict(epochs=4, batch_size=5, rng=3, verbose=0)
    clean = dropout_model()
    expected = clean.fit(x, y, callbacks=[halve_lr(clean)], **kwargs)
    net = dropout_model()
    backup = BackupAndRestore(tmp_path / "backup")
    with pytest.raises(Interrupt):  # in the second epoch, after two updates
        net.fit(x, y, callbacks=[backup, halve_lr(net), raise_at(1, 1)], **kwargs)
    assert (tmp_path / "backup" / "latest.safetensors").exists()
    resumed = net.fit(x, y, callbacks=[backup, halve_lr(net)], **kwargs)
    assert resumed.epoch == [1, 2, 3]
    assert resumed.history == {k: v[1:] for k, v in expected.history.items()
                               if k != "seconds"} | {"seconds": resumed["seconds"]}
    ours, theirs = training_state(net), training_state(clean)
    assert ours.keys() == theirs.keys()
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours)
    assert net.extra_state() == clean.extra_state()  # the dropout generator
    assert not (tmp_path / "backup" / "latest.safetensors").exists()
    again = net.fit(x, y, callbacks=[backup], **{**kwargs, "epochs": 1})
    assert again.epoch == [0]  # the backup was deleted: a new run starts at epoch 0


def test_backup_and_restore_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"'save_freq' must be 'epoch'.*received 10"):
        BackupAndRestore(tmp_path, save_freq=10)
    with pytest.raises(TypeError, match=r"'backup_dir' must be"):
        BackupAndRestore(None)
    (tmp_path / "latest.safetensors").write_bytes(b"")
    with pytest.raises(ValueError):  # not a backup: named, not silently ignored
        model().fit(*data(), verbose=0, callbacks=[BackupAndRestore(tmp_path)])


# ------------------------------------------------------------ EarlyStopping (Keras's options)
def stopped_at(scores, **options):
    """The epochs fit ran, with ``scores`` logged as "score", under EarlyStopping(options)."""
    x, y = data()
    stop = EarlyStopping(monitor="score", mode="min", **options)
    history = model().fit(x, y, epochs=len(scores), batch_size=8, rng=0,
                          callbacks=[Scripted(scores), stop], verbose=0)
    return history.epoch, stop


def test_early_stopping_baseline_start_from_epoch_and_verbose_as_keras(capsys):
    """Keras's rules: the wait grows every watched epoch and resets only on an improvement
    that also beats ``baseline``; epochs before ``start_from_epoch`` are not watched; the
    stop comes when the wait reaches ``patience`` on an epoch that does not improve."""
    scores = [5.0, 4.0, 3.0, 2.5, 2.4, 2.3]
    assert stopped_at(scores, patience=2)[0] == list(range(6))  # improves every epoch
    # improving, but never below the baseline 1.0: the wait still grows; epoch 2 has wait 3
    # but improves (no stop there), epoch 3 ... the first epoch that does not improve stops
    epochs, stop = stopped_at([5.0, 4.0, 3.0, 3.5, 2.4, 2.3], patience=2, baseline=1.0)
    assert epochs == [0, 1, 2, 3] and stop.stopped_epoch == 3
    # the same scores with a baseline they beat: the wait resets at each improvement
    assert stopped_at([5.0, 4.0, 3.0, 3.5, 2.4, 2.3], patience=2, baseline=10.0)[0] == \
        list(range(6))
    # start_from_epoch=3: epochs 0-2 (bad ones) are not watched
    epochs, _ = stopped_at([1.0, 2.0, 3.0, 2.0, 1.9, 1.8], patience=1, start_from_epoch=3)
    assert epochs == list(range(6))
    epochs, _ = stopped_at([1.0, 2.0, 3.0, 2.0, 1.9, 1.8], patience=1)
    assert epochs == [0, 1]
    capsys.readouterr()
    stopped_at([1.0, 0.5, 0.9, 0.9], patience=2, restore_best_weights=True, verbose=1)
    out = capsys.readouterr().out
    assert "Epoch 4: early stopping" in out
    assert "Restoring model weights from the end of the best epoch: 2." in out


@pytest.mark.parametrize("options, message", [
    ({"baseline": "low"}, "'baseline' must be None or a finite number"),
    ({"start_from_epoch": -1}, "'start_from_epoch' must be an int >= 0"),
    ({"verbose": 2}, "'verbose' must be 0 or 1"),
])
def test_early_stopping_refuses_bad_keras_options(options, message):
    with pytest.raises(ValueError, match=message):
        EarlyStopping(**options)
