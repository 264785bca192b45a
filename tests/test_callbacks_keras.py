"""Keras's words keep Keras's meaning: LearningRateScheduler gets the epoch, EarlyStopping's
patience and restore_best_weights, evaluate's return value, every callback hook at its
moment, ModelCheckpoint's file name. Sequential and the graph Model alike."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad import optimizers, schedulers
from handgrad.io import load_checkpoint
from handgrad.model import Sequential
from handgrad.training.callbacks import (
    Callback,
    EarlyStopping,
    LearningRateScheduler,
    ModelCheckpoint,
)
from handgrad.training.hooks import HOOKS
from test_callbacks import RecordingSGD, data


def sequential(lr=0.05, metrics=("accuracy",)):
    net = Sequential([L.Dense(8), L.BatchNorm(), L.ReLU(), L.Dense(2)], seed=0,
                     input_shape=(3,))
    return net.compile(optimizers.SGD(lr=lr), "cross_entropy", metrics=metrics)


def graph(lr=0.05, metrics=("accuracy",)):
    x = hg.Input((3,))
    out = L.Dense(2)(L.ReLU()(L.BatchNorm()(L.Dense(8)(x))))
    return hg.Model(x, out, seed=0).compile(optimizers.SGD(lr=lr), "cross_entropy",
                                            metrics=metrics)


MODELS = pytest.mark.parametrize("make", [sequential, graph], ids=["Sequential", "Model"])


def state(net):
    """Copies of the parameters and buffers (BatchNorm's running statistics)."""
    return {**{f"p:{k}": v.copy() for k, v in net.named_parameters().items()},
            **{f"b:{k}": v.copy() for k, v in net.named_buffers().items()}}


def same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


class Scripted(Callback):
    """Writes scripted values as ``key`` into the epoch logs; snapshots the model's state
    and its predictions on ``probe``."""

    def __init__(self, values, key="val_loss", probe=None):
        self.values, self.key, self.probe = values, key, probe
        self.states, self.predictions = [], []

    def on_epoch_end(self, epoch, logs=None):
        logs[self.key] = self.values[epoch]
        self.states.append(state(self.model))
        if self.probe is not None:
            self.predictions.append(self.model.predict(self.probe))


# ------------------------------------------------------ LearningRateScheduler


def test_learning_rate_scheduler_gives_the_schedule_the_epoch():
    x, y = data(12)
    net = sequential().compile(RecordingSGD(lr=1.0), "cross_entropy")
    history = net.fit(x, y, epochs=3, batch_size=4, verbose=0,
                      callbacks=[LearningRateScheduler(lambda epoch: 1e-3 * 0.5 ** epoch)])
    assert history["lr"] == [1e-3 * 0.5 ** e for e in range(3)]
    assert net.optimizer.used == [1e-3 * 0.5 ** e for e in range(3) for _ in range(3)]


def test_learning_rate_scheduler_passes_the_current_rate_to_a_two_argument_schedule():
    x, y = data(12)
    net = sequential(lr=0.1)
    seen = []

    def halve_after_first(epoch, lr):
        seen.append((epoch, lr))
        return lr if epoch == 0 else lr / 2

    history = net.fit(x, y, epochs=3, batch_size=6, verbose=0,
                      callbacks=[LearningRateScheduler(halve_after_first)])
    assert seen == [(0, 0.1), (1, 0.1), (2, 0.05)]
    assert history["lr"] == [0.1, 0.05, 0.025]


def test_a_step_schedule_needs_per_to_be_named_and_a_rate_must_be_a_number():
    with pytest.raises(ValueError, match=r"counts optimizer steps; pass per='step'"):
        LearningRateScheduler(schedulers.Constant(0.1))
    x, y = data(12)
    with pytest.raises(TypeError, match=r"LearningRateScheduler: 'schedule\(0\)'.*'fast'"):
        sequential().fit(x, y, epochs=1, verbose=0,
                         callbacks=[LearningRateScheduler(lambda epoch: "fast")])


# -------------------------------------------------------------- EarlyStopping


@MODELS
def test_early_stopping_patience_counts_epochs_without_improvement_as_keras(make):
    x, y = data()
    stop = EarlyStopping("val_loss", patience=2)
    script = Scripted([1.0, 0.5, 0.6, 0.7, 0.8, 0.9])
    history = make().fit(x, y, epochs=6, validation_data=(x, y), verbose=0,
                         callbacks=[script, stop])
    assert history.epoch == [0, 1, 2, 3]  # stopped after the fourth epoch
    assert (stop.stopped_epoch, stop.best_epoch, stop.best) == (3, 1, 0.5)


@MODELS
def test_restore_best_weights_restores_the_batch_norm_statistics_too(make):
    x, y = data()
    net = make()
    script = Scripted([1.0, 0.5, 0.6, 0.7, 0.8], probe=x)
    stop = EarlyStopping("val_loss", patience=2, restore_best_weights=True)
    net.fit(x, y, epochs=5, batch_size=8, rng=0, validation_data=(x, y), verbose=0,
            callbacks=[script, stop])
    assert stop.stopped_epoch == 3
    assert same(state(net), script.states[1])
    assert not same(script.states[3], script.states[1])
    assert np.array_equal(net.predict(x), script.predictions[1])


@MODELS
def test_restore_best_weights_also_when_training_ends_before_patience_runs_out(make):
    x, y = data()
    net = make()
    script = Scripted([1.0, 0.5, 0.6])
    stop = EarlyStopping("val_loss", patience=5, restore_best_weights=True)
    net.fit(x, y, epochs=3, batch_size=8, rng=0, validation_data=(x, y), verbose=0,
            callbacks=[script, stop])
    assert stop.stopped_epoch is None
    assert same(state(net), script.states[1])
    # a best epoch that is the last one keeps the final weights
    again = Scripted([1.0, 0.5, 0.4])
    net.fit(x, y, epochs=3, batch_size=8, rng=0, validation_data=(x, y), verbose=0,
            callbacks=[again, EarlyStopping("val_loss", restore_best_weights=True)])
    assert same(state(net), again.states[2])


# ------------------------------------------------------------------- evaluate


@MODELS
def test_evaluate_returns_what_keras_returns(make):
    x, y = data()
    net = make()
    logs = net.evaluate(x, y, return_dict=True)
    loss, accuracy = net.evaluate(x, y)
    assert list(logs) == ["loss", "accuracy"]
    assert (loss, accuracy) == (logs["loss"], logs["accuracy"])
    assert isinstance(loss, float)
    bare = make(metrics=())
    assert bare.evaluate(x, y) == bare.evaluate(x, y, return_dict=True)["loss"]
    with pytest.raises(TypeError, match="evaluate: 'return_dict'"):
        net.evaluate(x, y, return_dict="yes")


def test_evaluate_of_several_outputs_is_a_list_in_the_logs_order():
    inp = hg.Input((3,))
    hidden = L.ReLU()(L.Dense(8)(inp))
    net = hg.Model(inp, [L.Dense(2, name="label")(hidden), L.Dense(1, name="score")(hidden)],
                   seed=0).compile("sgd", ["cross_entropy", "mse"])
    x, y = data()
    ys = [y, x[:, :1]]
    assert net.evaluate(x, ys) == list(net.evaluate(x, ys, return_dict=True).values())


# ---------------------------------------------------------------------- hooks


class Hooks(Callback):
    """Records every hook call as (name, index or None, sorted log keys)."""

    def __init__(self):
        self.calls = []

    def _record(self, name, index, logs):
        self.calls.append((name, index, sorted(logs)))


def _recorder(name):
    if name.endswith(("train_begin", "train_end", "test_begin", "test_end",
                      "predict_begin", "predict_end")):
        return lambda self, logs=None: self._record(name, None, logs)

    def hook(self, index, logs=None):
        self._record(name, index, logs)
        if name.startswith("on_train_batch"):  # the base class calls the on_batch aliases
            getattr(Callback, name)(self, index, logs)

    return hook


for _name in HOOKS:
    setattr(Hooks, _name, _recorder(_name))


@MODELS
def test_every_hook_is_called_at_its_moment(make):
    x, y = data(8)
    net, hooks = make(), Hooks()
    net.fit(x, y, epochs=2, batch_size=4, validation_data=(x[:5], y[:5]), verbose=0,
            callbacks=[hooks])
    keys = ["accuracy", "loss"]
    val = ["val_accuracy", "val_loss"]
    epoch_keys = sorted([*keys, *val, "lr", "seconds"])
    expected = [("on_train_begin", None, [])]
    for epoch in range(2):
        expected += [("on_epoch_begin", epoch, [])]
        for b in range(2):
            expected += [("on_train_batch_begin", b, []), ("on_batch_begin", b, []),
                         ("on_train_batch_end", b, keys), ("on_batch_end", b, keys)]
        expected += [("on_test_begin", None, []), ("on_test_batch_begin", 0, []),
                     ("on_test_batch_end", 0, keys), ("on_test_end", None, keys),
                     ("on_epoch_end", epoch, epoch_keys)]
    expected += [("on_train_end", None, epoch_keys)]
    assert hooks.calls == expected
    assert hooks.params == {"verbose": 0, "epochs": 2, "steps": 2}

    hooks.calls = []
    net.evaluate(x, y, batch_size=5, callbacks=[hooks])
    assert hooks.calls == [("on_test_begin", None, []), ("on_test_batch_begin", 0, []),
                           ("on_test_batch_end", 0, keys), ("on_test_batch_begin", 1, []),
                           ("on_test_batch_end", 1, keys), ("on_test_end", None, keys)]


@MODELS
def test_predict_calls_the_predict_hooks_with_each_batchs_outputs(make):
    x, _ = data(7)
    net = make()
    outputs = []

    class Outputs(Callback):
        def on_predict_batch_end(self, batch, logs=None):
            outputs.append(logs["outputs"].copy())

    hooks = Hooks()
    predicted = net.predict(x, batch_size=4, callbacks=[hooks, Outputs()])
    assert [call[:2] for call in hooks.calls] == [
        ("on_predict_begin", None), ("on_predict_batch_begin", 0),
        ("on_predict_batch_end", 0), ("on_predict_batch_begin", 1),
        ("on_predict_batch_end", 1), ("on_predict_end", None)]
    assert np.array_equal(np.concatenate(outputs), predicted)


def test_a_callback_with_a_misspelt_hook_is_refused():
    class Typo(Callback):
        def on_epoch_ends(self, epoch, logs=None):
            pass

    x, y = data()
    for call in (lambda net: net.fit(x, y, verbose=0, callbacks=[Typo()]),
                 lambda net: net.evaluate(x, y, callbacks=[Typo()]),
                 lambda net: net.predict(x, callbacks=[Typo()])):
        with pytest.raises(ValueError, match=r"Typo defines 'on_epoch_ends'.*'on_epoch_end'"):
            call(sequential())


# ------------------------------------------------------------ ModelCheckpoint


@pytest.mark.parametrize("name", ["best.keras", "best.h5", "best.weights.h5", "best"])
def test_model_checkpoint_refuses_a_file_name_it_would_not_write(name):
    with pytest.raises(ValueError, match=r"'path' must end in \.safetensors.*" + name):
        ModelCheckpoint(name)


def test_model_checkpoint_fills_in_the_epoch_and_the_logs(tmp_path):
    x, y = data()
    net = sequential()
    script = Scripted([0.5, 0.25])
    net.fit(x, y, epochs=2, validation_data=(x, y), verbose=0, callbacks=[
        script, ModelCheckpoint(tmp_path / "ckpt-{epoch:02d}-{val_loss:.2f}.safetensors")])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-01-0.50.safetensors", "ckpt-02-0.25.safetensors"]
    assert load_checkpoint(tmp_path / "ckpt-02-0.25.safetensors").epoch == 2
    with pytest.raises(ValueError, match=r"cannot fill in 'path'.*'val_acc'"):
        net.fit(x, y, epochs=1, verbose=0,
                callbacks=[ModelCheckpoint(tmp_path / "{val_acc}.safetensors")])


# -------------------------------------------------- generative zoo models


def test_the_vae_evaluates_as_keras_and_calls_the_hooks_in_fit():
    from handgrad.zoo import VAE

    vae = VAE(3, (5,), input_shape=(2, 3, 1), dtype="float64", seed=1)
    x = np.random.default_rng(0).random((10, 2, 3, 1))
    hooks = Hooks()
    history = vae.fit(x[:6], epochs=2, batch_size=3, rng=0, verbose=0,
                      validation_data=(x[6:], None), callbacks=[hooks])
    logs = vae.evaluate(x[6:], return_dict=True)
    assert list(logs) == ["loss", "reconstruction", "kl"]
    assert vae.evaluate(x[6:]) == list(logs.values())
    assert history["val_loss"][-1] == logs["loss"]
    names = [call[0] for call in hooks.calls]
    assert names.count("on_train_batch_end") == names.count("on_batch_end") == 4
    assert names.count("on_test_end") == names.count("on_test_batch_end") == 2
    assert names[-2:] == ["on_epoch_end", "on_train_end"]


def test_the_wgan_trains_with_callbacks_and_the_hooks():
    from handgrad.zoo import WGANGP

    model = WGANGP((3,), latent_dim=2, hidden=(5,), output="linear", seed=0,
                   dtype="float64")
    x = np.random.default_rng(0).standard_normal((8, 3))
    stop, hooks = EarlyStopping("critic_loss", patience=1, mode="max"), Hooks()
    history = model.fit(x, epochs=3, batch_size=4, rng=0, verbose=0,
                        callbacks=[hooks, stop])
    names = [call[0] for call in hooks.calls]
    epochs = len(history.epoch)
    assert names.count("on_train_batch_begin") == names.count("on_batch_end") == 2 * epochs
    assert names.count("on_epoch_end") == epochs and names[-1] == "on_train_end"


def test_fit_tells_callbacks_the_examples_each_epoch_trained_on():
    class Examples(Callback):
        def __init__(self):
            self.seen = []

        def set_epoch_examples(self, examples, seconds):
            self.seen.append(examples)
            assert seconds > 0

    x, y = data(n=45)
    counter = Examples()
    history = sequential().fit(x, y, epochs=2, batch_size=8, validation_split=0.2,
                        callbacks=[counter], verbose=0)
    assert counter.seen == [36, 36]  # validation_split holds out the last 9
    # the steps of an epoch are those of the examples left after the split: 36 / 8 -> 5
    # (they were counted before the split: 6)
    assert history.params["steps"] == 5
