"""Custom training steps: a ``train_step`` of a model's own (a toy GAN with two
optimizers) driven by ``fit``, its batches, logs and callbacks."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad import losses, optimizers
from handgrad.model import Sequential
from handgrad.testing import assert_close
from handgrad.training import EarlyStopping
from test_graph_training import params, same, task


class ToyGAN(hg.Model):
    """A generator (an affine map of 2-D noise) against a critic, each with an optimizer
    of its own; ``train_step`` runs a critic step, then a generator step."""

    def __init__(self, seed=0):
        self.generator = Sequential([L.Dense(2)], name="generator")
        self.critic = Sequential([L.Dense(16), L.Tanh(), L.Dense(1)], name="critic")
        noise = hg.Input((2,), name="noise")
        super().__init__(noise, self.critic(self.generator(noise)), seed=seed)
        self.generator_optimizer = optimizers.Adam(lr=0.02)
        self.critic_optimizer = optimizers.Adam(lr=0.02)
        self.noise = np.random.default_rng(seed + 1)

    @staticmethod
    def _step(model, optimizer):
        optimizer.step(model.named_parameters(trainable_only=True),
                       model.named_gradients(trainable_only=True))

    def train_step(self, x, y):
        z = self.noise.standard_normal((len(x), 2)).astype(np.float32)
        fake = self.generator.forward(z, training=False)
        self.critic.zero_grad()  # the critic learns real -> 1, fake -> 0
        logits = self.critic.forward(np.concatenate([x, fake]), training=True)  # one forward
        n, bce = len(x), losses.binary_cross_entropy_with_logits
        real_loss, dreal = bce(logits[:n], np.ones_like(logits[:n]))
        fake_loss, dfake = bce(logits[n:], np.zeros_like(logits[n:]))
        self.critic.backward(np.concatenate([dreal, dfake]))
        self._step(self.critic, self.critic_optimizer)
        self.zero_grad()  # the generator learns to make the critic say 1
        logit = self.forward(z, training=True)
        generator_loss, dlogit = bce(logit, np.ones_like(logit))
        self.backward(dlogit)
        self._step(self.generator, self.generator_optimizer)
        return {"critic_loss": float(real_loss + fake_loss),
                "generator_loss": float(generator_loss)}


def test_a_custom_train_step_trains_two_sub_models_through_fit():
    rng = np.random.default_rng(0)
    center = np.float32([3.0, -2.0])
    points = (center + 0.5 * rng.standard_normal((512, 2))).astype(np.float32)
    gan = ToyGAN()
    probe = np.random.default_rng(5).standard_normal((2000, 2)).astype(np.float32)

    def gap():
        return float(np.linalg.norm(gan.generator.predict(probe).mean(axis=0) - center))

    before, critic = gap(), params(gan.critic)
    history = gan.fit(points, epochs=15, batch_size=64, rng=0, verbose=0)  # no y, no compile
    assert set(history.history) == {"critic_loss", "generator_loss", "seconds"}
    assert len(history["critic_loss"]) == 15
    steps = 15 * (512 // 64)
    assert gan.generator_optimizer.iterations == steps == gan.critic_optimizer.iterations
    assert not same(params(gan.critic), critic)
    assert before > 3.0 and gap() < 0.5 * before  # the generator moved towards the data


class Recorder(hg.Model):
    """A custom step that records its batches and returns a made-up loss."""

    def __init__(self):
        signal, meta = hg.Input((8,), name="signal"), hg.Input((3,), name="meta")
        super().__init__([signal, meta], L.Dense(1, name="out")(L.Concatenate()([signal, meta])))
        self.seen, self.calls = [], 0

    def train_step(self, x, y):
        self.seen.append((x, y))
        self.calls += 1
        return {"loss": 10.0 / self.calls, "size": float(len(y))}


def test_fit_hands_a_custom_step_the_batches_as_given_and_its_callbacks_the_logs():
    x, y = task(40)
    model = Recorder()
    stop = EarlyStopping("size", patience=0, mode="max")
    history = model.fit(x, y["score"], epochs=5, batch_size=16, shuffle=False, verbose=0,
                        callbacks=[stop])
    first, target = model.seen[0]
    assert isinstance(first, dict) and set(first) == {"signal", "meta"}  # as given
    np.testing.assert_array_equal(first["meta"], x["meta"][:16])
    np.testing.assert_array_equal(target, y["score"][:16])
    # epoch logs: means weighted by batch size (16, 16, 8); sizes never improve on 13.6
    assert history["size"] == [(16 * 16 + 16 * 16 + 8 * 8) / 40] * 2
    assert stop.stopped_epoch == 1 and history.epoch == [0, 1]
    assert_close(history["loss"][0], (16 * 10 + 16 * 5 + 8 * 10 / 3) / 40, dtype=np.float64,
                 terms=3, scale=10)


def test_a_custom_step_that_returns_a_nan_loss_stops_fit():
    model = Recorder()
    model.train_step = lambda x, y: {"loss": float("nan")}
    x, y = task(8)
    with pytest.raises(FloatingPointError, match="custom train_step already applied"):
        model.fit(x, y["score"], verbose=0)


def test_a_custom_step_model_still_evaluates_with_its_compiled_loss():
    x, y = task(32)
    model = Recorder().compile("sgd", "mse", metrics=())
    history = model.fit(x, y["score"], epochs=1, batch_size=8, verbose=0,
                        validation_data=(x, y["score"]))
    assert history["val_loss"][-1] == model.evaluate(x, y["score"], return_dict=True)["loss"]
    assert "lr" in history.history
