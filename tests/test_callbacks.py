"""Callbacks (History, EarlyStopping, ModelCheckpoint, LearningRateScheduler,
TerminateOnNaN) and the progress bar."""

from __future__ import annotations

import io as stdio
import math

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import optimizers, schedulers
from handgrad.io import load_checkpoint
from handgrad.model import Sequential
from handgrad.testing import assert_close
from handgrad.training.callbacks import (
    Callback,
    EarlyStopping,
    History,
    LearningRateScheduler,
    ModelCheckpoint,
    TerminateOnNaN,
)
from handgrad.training.progress import ProgressBar, format_logs


def data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int64)


def model(lr=0.05, optimizer=None):
    net = Sequential([L.Dense(8), L.ReLU(), L.Dense(2)], seed=0, input_shape=(3,))
    return net.compile(optimizer or optimizers.SGD(lr=lr), "cross_entropy")


def weights(net):
    return {k: v.copy() for k, v in net.named_parameters().items()}


class Scripted(Callback):
    """Writes a scripted value into the epoch logs (as ``key``) and snapshots the weights."""

    def __init__(self, scores, key="score"):
        self.scores = scores
        self.key = key
        self.snapshots = []

    def on_epoch_end(self, epoch, logs):
        logs[self.key] = self.scores[epoch]
        self.snapshots.append(weights(self.model))


class RecordingSGD(optimizers.SGD):
    """SGD that remembers the learning rate of every step."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.used = []

    def step(self, params, grads):
        self.used.append(self.lr)
        super().step(params, grads)


# -------------------------------------------------------------------- History


def test_history_holds_one_entry_per_epoch():
    x, y = data()
    net = model()
    batches = []

    class Batches(Callback):
        def on_train_batch_end(self, step, logs):
            batches.append((step, logs["loss"], logs["accuracy"]))

    history = net.fit(x, y, epochs=3, batch_size=10, validation_data=(x[:8], y[:8]), rng=0,
                      callbacks=[Batches()], verbose=0)
    assert isinstance(history, History)
    assert history.epoch == [0, 1, 2]
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy", "lr",
                                     "seconds"}
    assert all(len(v) == 3 for v in history.history.values())
    assert history["lr"] == [0.05] * 3
    assert all(s >= 0 for s in history["seconds"])
    # train logs are the size-weighted means of the batch logs (batches of 10, 10, 4)
    assert [b[0] for b in batches] == [0, 1, 2] * 3
    sizes = np.array([10, 10, 4])
    for epoch in range(3):  # a weighted mean of 3 positive values, summed in any order
        rows = np.array(batches[3 * epoch:3 * epoch + 3])
        for column, key in ((1, "loss"), (2, "accuracy")):
            expected = rows[:, column] @ sizes / 24
            assert_close(history[key][epoch], expected, dtype=np.float64, terms=2 * len(sizes),
                         scale=expected, what=key)
    final = net.evaluate(x[:8], y[:8], return_dict=True)
    assert history["val_loss"][-1] == final["loss"]
    assert history["val_accuracy"][-1] == final["accuracy"]


def test_history_epochs_count_from_initial_epoch():
    x, y = data()
    history = model().fit(x, y, epochs=4, initial_epoch=2, verbose=0)
    assert history.epoch == [2, 3]
    assert "val_loss" not in history.history


# -------------------------------------------------------------- EarlyStopping


def test_early_stopping_waits_patience_epochs_and_restores_the_best_weights():
    x, y = data()
    net = model()
    script = Scripted([3.0, 2.0, 1.0, 1.5, 1.2, 1.1, 0.1, 0.0])
    stop = EarlyStopping(monitor="score", patience=2, mode="min", restore_best_weights=True)
    history = net.fit(x, y, epochs=8, batch_size=8, rng=0, callbacks=[script, stop], verbose=0)
    assert history.epoch == [0, 1, 2, 3, 4]  # epochs 3 and 4 are the 2 without improvement
    assert stop.stopped_epoch == 4
    assert stop.best == 1.0 and stop.best_epoch == 2
    best = script.snapshots[2]
    assert all(np.array_equal(v, best[k]) for k, v in net.named_parameters().items())
    assert not all(np.array_equal(v, script.snapshots[4][k])
                   for k, v in net.named_parameters().items())


def test_early_stopping_keeps_last_weights_without_restore():
    x, y = data()
    net = model()
    script = Scripted([1.0, 1.0, 1.0, 1.0])
    stop = EarlyStopping(monitor="score", patience=0)
    history = net.fit(x, y, epochs=4, rng=0, callbacks=[script, stop], verbose=0)
    assert history.epoch == [0, 1]  # epoch 1 does not improve on 1.0
    assert all(np.array_equal(v, script.snapshots[1][k])
               for k, v in net.named_parameters().items())


def test_early_stopping_auto_mode_maximizes_accuracy_and_honours_min_delta():
    x, y = data()
    script = Scripted([0.5, 0.55, 0.56, 0.9, 0.9], key="score_acc")
    stop = EarlyStopping(monitor="score_acc", patience=2, min_delta=0.1)
    assert stop.mode == "max"
    history = model().fit(x, y, epochs=5, callbacks=[script, stop], verbose=0)
    # 0.55 and 0.56 are within min_delta of 0.5: the second miss stops at epoch 2
    assert history.epoch == [0, 1, 2]
    assert stop.best == 0.5


def test_early_stopping_on_real_validation_loss_stops():
    x, y = data()
    stop = EarlyStopping(patience=1)  # val_loss, min
    history = model(lr=50.0).fit(x, y, epochs=30, validation_data=(x, y), rng=0,
                                 callbacks=[stop], verbose=0)
    assert len(history.epoch) < 30
    assert stop.best == min(history["val_loss"])


def test_monitoring_a_missing_quantity_is_a_clear_error():
    x, y = data()
    net = model()
    with pytest.raises(ValueError, match=r"'val_loss' needs validation data.*validation_data"):
        net.fit(x, y, epochs=1, callbacks=[EarlyStopping()], verbose=0)
    assert net.optimizer.iterations == 0  # reported when fit starts, before any training


@pytest.mark.parametrize("make, error, match", [
    (lambda: EarlyStopping(patience=-1), ValueError, "EarlyStopping: 'patience'.*-1"),
    (lambda: EarlyStopping(patience=1.5), ValueError, "EarlyStopping: 'patience'.*1.5"),
    (lambda: EarlyStopping(monitor=3), TypeError, "EarlyStopping: 'monitor'"),
    (lambda: EarlyStopping(mode="up"), ValueError, "mode"),
    (lambda: ModelCheckpoint("x.safetensors", mode="up"), ValueError, "mode"),
    (lambda: LearningRateScheduler(0.1), TypeError, "LearningRateScheduler: 'schedule'"),
    (lambda: LearningRateScheduler(lambda t: 0.1, per="batch"), ValueError, "per"),
])
def test_callback_arguments_are_validated(make, error, match):
    with pytest.raises(error, match=match):
        make()


# ------------------------------------------------------------ ModelCheckpoint


def test_model_checkpoint_save_best_only_writes_improving_epochs(tmp_path):
    x, y = data()
    net = model(optimizer=optimizers.Adam(lr=0.01))
    script = Scripted([3.0, 1.0, 2.0, 0.5])
    path = tmp_path / "ckpt-{epoch}.safetensors"
    checkpoint = ModelCheckpoint(path, monitor="score", save_best_only=True)
    net.fit(x, y, epochs=4, batch_size=8, rng=0, callbacks=[script, checkpoint], verbose=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-1.safetensors", "ckpt-2.safetensors", "ckpt-4.safetensors"]
    restored = load_checkpoint(tmp_path / "ckpt-2.safetensors")
    assert restored.epoch == 2
    assert restored.optimizer.iterations == 2 * 3
    snapshot = script.snapshots[1]
    assert all(np.array_equal(v, snapshot[k])
               for k, v in restored.model.named_parameters().items())


def test_model_checkpoint_every_epoch_overwrites_one_path(tmp_path):
    x, y = data()
    net = model()
    path = tmp_path / "last.safetensors"
    net.fit(x, y, epochs=3, callbacks=[ModelCheckpoint(path)], verbose=0)
    assert [p.name for p in tmp_path.iterdir()] == ["last.safetensors"]
    restored = load_checkpoint(path)
    assert restored.epoch == 3
    assert all(np.array_equal(v, net.named_parameters()[k])
               for k, v in restored.model.named_parameters().items())


# ------------------------------------------------------ LearningRateScheduler


def test_learning_rate_scheduler_per_step_follows_the_schedule():
    x, y = data(12)
    schedule = schedulers.StepDecay(0.1, step_size=2, gamma=0.5)
    net = model(optimizer=RecordingSGD(lr=1.0))
    net.fit(x, y, epochs=2, batch_size=4,
            callbacks=[LearningRateScheduler(schedule, per="step")], verbose=0)
    assert net.optimizer.used == [schedule(t) for t in range(6)]
    # a second fit continues from the optimizer's step count
    net.fit(x, y, epochs=1, batch_size=4,
            callbacks=[LearningRateScheduler(schedule, per="step")], verbose=0)
    assert net.optimizer.used[6:] == [schedule(t) for t in range(6, 9)]


def test_learning_rate_scheduler_per_epoch_uses_the_epoch_index():
    x, y = data(12)
    schedule = schedulers.ExponentialDecay(0.2, gamma=0.5)
    net = model(optimizer=RecordingSGD(lr=1.0))
    history = net.fit(x, y, epochs=3, batch_size=6,
                      callbacks=[LearningRateScheduler(schedule, per="epoch")], verbose=0)
    assert net.optimizer.used == [0.2, 0.2, 0.1, 0.1, 0.05, 0.05]
    assert history["lr"] == [0.2, 0.1, 0.05]


def test_learning_rate_scheduler_with_cosine_warmup_starts_at_zero():
    x, y = data(12)
    schedule = schedulers.CosineWarmup(0.1, total_steps=6, warmup_steps=2)
    net = model(optimizer=RecordingSGD(lr=1.0))
    before = weights(net)
    net.fit(x, y, epochs=1, batch_size=12,
            callbacks=[LearningRateScheduler(schedule, per="step")], verbose=0)
    assert net.optimizer.used == [0.0]
    assert all(np.array_equal(v, before[k]) for k, v in net.named_parameters().items())


# ------------------------------------------------------------- TerminateOnNaN


def test_terminate_on_nan_stops_at_the_first_nan_and_names_the_step(capsys):
    calls = []

    def flaky_loss(pred, target):
        from handgrad.losses import softmax_cross_entropy

        calls.append(1)
        loss, grad = softmax_cross_entropy(pred, target)
        return (math.nan if len(calls) == 6 else loss), grad

    x, y = data(16)
    net = Sequential([L.Dense(2)], seed=0, input_shape=(3,)).compile("sgd", flaky_loss)
    stop = TerminateOnNaN()
    history = net.fit(x, y, epochs=5, batch_size=4, callbacks=[stop], verbose=0)
    # batch 6 is epoch 2, step 2
    assert len(calls) == 6
    assert history.epoch == [0, 1]
    assert net.optimizer.iterations == 6
    assert math.isnan(history["loss"][1])
    assert "val_loss" not in history.history
    assert "epoch 2, step 2" in stop.message and "nan" in stop.message
    assert capsys.readouterr().err.strip() == stop.message


def test_terminate_on_nan_catches_a_diverging_run():
    x, y = data()
    x = x * 1e3
    stream = stdio.StringIO()
    stop = TerminateOnNaN(stream=stream)
    net = model(lr=1e30)
    with np.errstate(over="ignore", invalid="ignore"):
        history = net.fit(x, y, epochs=20, batch_size=4, rng=0, callbacks=[stop], verbose=0)
    assert len(history.epoch) < 20
    assert stop.message.startswith("TerminateOnNaN: loss is ")
    assert "step" in stop.message
    assert stream.getvalue().strip() == stop.message


def test_terminate_on_nan_is_silent_for_a_finite_run(capsys):
    x, y = data()
    stop = TerminateOnNaN()
    history = model().fit(x, y, epochs=2, callbacks=[stop], verbose=0)
    assert history.epoch == [0, 1] and stop.message is None
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------- progress bar


def test_verbose_zero_prints_nothing(capsys):
    x, y = data()
    model().fit(x, y, epochs=2, validation_data=(x, y), verbose=0)
    assert capsys.readouterr() == ("", "")


def test_progress_prints_one_line_per_epoch_when_not_a_terminal(capsys):
    x, y = data()
    model().fit(x, y, epochs=3, batch_size=5, validation_data=(x, y), verbose=1)
    out, err = capsys.readouterr()
    assert err == "" and "\r" not in out
    lines = out.splitlines()
    assert len(lines) == 3
    for epoch, line in enumerate(lines, 1):
        assert line.startswith(f"Epoch {epoch}/3 [{'=' * 24}] 5/5  loss ")
        assert "val_accuracy" in line and line.endswith("ex/s")


def test_progress_bar_redraws_in_a_terminal():
    class Terminal(stdio.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    bar = ProgressBar(4, "Epoch 1/1", stream=stream)
    for step in range(1, 5):
        bar.update(step, {"loss": 1.0 / step}, 100.0)
    bar.finish({"loss": 0.25, "lr": 0.001, "seconds": 1.25})
    text = stream.getvalue()
    assert text.count("\r") == 5 and text.endswith("\n") and text.count("\n") == 1
    assert "[======>                 ] 1/4" in text
    assert text.splitlines()[-1].endswith("loss 0.2500  lr 0.001  1.2s  100 ex/s")


def test_disabled_progress_bar_writes_nothing():
    stream = stdio.StringIO()
    bar = ProgressBar(3, "x", enabled=False, stream=stream)
    bar.update(1, {"loss": 1.0}, 1.0)
    bar.finish({"loss": 1.0})
    assert stream.getvalue() == ""


def test_format_logs():
    assert format_logs({"loss": 0.123456, "lr": 3e-4, "seconds": 2.26}) == (
        "loss 0.1235  lr 0.0003  2.3s")
