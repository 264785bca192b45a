"""Keras's example "WGAN-GP overriding Model.train_step" (keras.io/examples/generative/
wgan_gp), line for line with handgrad's pieces, on the built-in 8x8 digits scaled to
[-1, 1] (Keras's: 28x28 Fashion-MNIST, padded to 32x32; the networks are shrunk to fit).

Keras semantics the example relies on, checked here:
- ``train_step(real_images)`` runs ``d_steps`` critic updates on the same real batch, each
  with fresh latent vectors, then one generator update;
- ``d_cost = mean(fake_logits) - mean(real_logits)``, ``d_loss = d_cost + gp * gp_weight``
  (gp_weight 10); ``g_loss = -mean(critic(generator(z)))``;
- the gradient penalty is computed on interpolates ``real + alpha * (fake - real)``, alpha
  uniform in [0, 1] per image: ``gp = mean((||d critic / d interpolated||_2 - 1)^2)``, the
  norm over every axis but the batch;
- two Adam optimizers (learning_rate 2e-4, beta_1 0.5, beta_2 0.9), one per network;
- ``train_step`` returns ``{"d_loss", "g_loss"}``, which ``fit`` averages per epoch.

handgrad differences: no tape; the critic's loss gradient is written by hand (-1/n on the
real scores, +1/n on the fakes) and the penalty's parameter gradient comes from
``handgrad.zoo.gradient_penalty`` (a second-order backward pass), which returns
``gp * gp_weight``. Keras's ``compile(d_optimizer, g_optimizer, d_loss_fn, g_loss_fn)`` is
overridden as in the example and compiles the model with the critic's optimizer
(``loss=None``) so that ``fit`` logs its learning rate. Adam takes torch's
``betas=(0.5, 0.9)``: Keras's ``beta_1``/``beta_2`` spellings are not accepted yet.
"""

from __future__ import annotations

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.layers import Layer
from handgrad.model import Sequential
from handgrad.optimizers import Adam
from handgrad.testing import assert_close
from handgrad.training import TrainingMixin
from handgrad.zoo import gradient_penalty

NOISE_DIM = 8


def get_discriminator_model():
    return Sequential([
        L.Conv2D(8, 3, strides=2, padding="same", input_shape=(8, 8, 1)),
        L.LeakyReLU(0.2),
        L.Conv2D(16, 3, strides=2, padding="same"),
        L.LeakyReLU(0.2),
        L.Flatten(),
        L.Dense(1),
    ], name="discriminator", seed=0)


def get_generator_model():
    return Sequential([
        L.Dense(4 * 4 * 16, use_bias=False, input_shape=(NOISE_DIM,)),
        L.LeakyReLU(0.2),
        L.Reshape((4, 4, 16)),
        L.UpSampling2D((2, 2)),
        L.Conv2D(8, 3, padding="same"),
        L.LeakyReLU(0.2),
        L.Conv2D(1, 3, padding="same"),
        L.Tanh(),
    ], name="generator", seed=1)


def discriminator_loss(real_img, fake_img):
    """mean(fake) - mean(real), and its gradients with respect to both score arrays."""
    n = len(real_img)
    loss = float(np.mean(fake_img) - np.mean(real_img))
    return loss, np.full_like(real_img, -1.0 / n), np.full_like(fake_img, 1.0 / n)


def generator_loss(fake_img):
    """-mean(fake), and its gradient."""
    return -float(np.mean(fake_img)), np.full_like(fake_img, -1.0 / len(fake_img))


class WGAN(TrainingMixin, Layer):
    takes_targets = False

    def __init__(self, discriminator, generator, latent_dim, discriminator_extra_steps=3,
                 gp_weight=10.0, seed=0):
        self.discriminator, self.generator = discriminator, generator
        super().__init__(name="wgan")
        self.latent_dim = latent_dim
        self.d_steps = discriminator_extra_steps
        self.gp_weight = gp_weight
        self.rng = np.random.default_rng(seed)  # tf.random.normal / uniform

    def children(self):
        yield "discriminator", self.discriminator
        yield "generator", self.generator

    def _build(self, input_shape, rng):
        pass

    def compile(self, d_optimizer, g_optimizer, d_loss_fn, g_loss_fn):
        super().compile(d_optimizer, loss=None)
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer
        self.d_loss_fn, self.g_loss_fn = d_loss_fn, g_loss_fn

    def gradient_penalty(self, batch_size, real_images, fake_images):
        alpha = self.rng.uniform(0.0, 1.0, (batch_size, 1, 1, 1)).astype(real_images.dtype)
        diff = fake_images - real_images
        interpolated = real_images + alpha * diff
        return gradient_penalty(self.discriminator, interpolated, self.gp_weight)

    @staticmethod
    def _step(optimizer, network):
        optimizer.step(network.named_parameters(trainable_only=True),
                       network.named_gradients(trainable_only=True))

    def train_step(self, real_images, y=None):
        batch_size = len(real_images)
        critic = self.discriminator
        for _ in range(self.d_steps):
            random_latent_vectors = self.rng.standard_normal(
                (batch_size, self.latent_dim)).astype(real_images.dtype)
            fake_images = self.generator.forward(random_latent_vectors, training=False)
            critic.zero_grad()
            fake_logits = critic.forward(fake_images, training=True)
            critic.backward(self.d_loss_fn(np.zeros_like(fake_logits), fake_logits)[2])
            real_logits = critic.forward(real_images, training=True)
            d_cost, dreal, _ = self.d_loss_fn(real_img=real_logits, fake_img=fake_logits)
            critic.backward(dreal)
            gp, gp_grads = self.gradient_penalty(batch_size, real_images, fake_images)
            d_loss = d_cost + gp  # gp already carries gp_weight
            for key, grad in critic.named_gradients().items():
                grad += gp_grads[key]
            self.check_loss({"loss": d_loss})
            self._step(self.d_optimizer, critic)
        random_latent_vectors = self.rng.standard_normal(
            (batch_size, self.latent_dim)).astype(real_images.dtype)
        self.zero_grad()
        generated_images = self.generator.forward(random_latent_vectors, training=True)
        gen_img_logits = critic.forward(generated_images, training=True)
        g_loss, dlogits = self.g_loss_fn(gen_img_logits)
        self.generator.backward(critic.backward(dlogits))
        self._step(self.g_optimizer, self.generator)
        return {"d_loss": d_loss, "g_loss": g_loss}


def make_wgan(seed=0):
    wgan = WGAN(get_discriminator_model(), get_generator_model(), NOISE_DIM, seed=seed)
    wgan.compile(d_optimizer=Adam(learning_rate=2e-4, betas=(0.5, 0.9)),
                 g_optimizer=Adam(learning_rate=2e-4, betas=(0.5, 0.9)),
                 d_loss_fn=discriminator_loss, g_loss_fn=generator_loss)
    return wgan


@pytest.fixture(scope="module")
def images():
    pytest.importorskip("sklearn")
    from handgrad.data import load_digits

    return load_digits().x_train[:256] * 2 - 1  # the example's (x - 127.5) / 127.5


def test_the_penalty_is_taken_on_the_interpolates(images):
    """The model's penalty equals gp_weight * mean((||g||_2 - 1)^2), g the critic's input
    gradient (a first-order backward, independent of the second-order pass) at
    real + alpha * (fake - real) for the alpha the model draws, and differs from the same
    formula at the real or the fake images."""
    wgan = make_wgan(seed=4)
    real = images[:16]
    fake = wgan.generator.forward(
        np.random.default_rng(5).standard_normal((16, NOISE_DIM)).astype(real.dtype),
        training=False)
    alpha = np.random.default_rng(4).uniform(0.0, 1.0, (16, 1, 1, 1)).astype(real.dtype)

    def penalty_at(x):
        critic = wgan.discriminator
        critic.forward(x, training=True)
        g = critic.backward(np.ones((len(x), 1), dtype=x.dtype)).astype(np.float64)
        critic.zero_grad()
        norm = np.sqrt(np.sum(g ** 2, axis=(1, 2, 3)))
        return 10.0 * np.mean((norm - 1.0) ** 2)

    expected = penalty_at(real + alpha * (fake - real))
    gp, grads = wgan.gradient_penalty(16, real, fake)
    assert_close(gp, expected, dtype=np.float32, terms=real[0].size, scale=10.0)
    assert set(grads) == set(wgan.discriminator.named_parameters())
    # the same formula elsewhere differs by far more than the float32 rounding allowed above
    rounding = real[0].size * np.finfo(np.float32).eps * 10.0
    for elsewhere in (penalty_at(real), penalty_at(fake)):
        assert abs(elsewhere - gp) > 100 * rounding, (elsewhere, gp)


def test_fit_lowers_the_critic_loss(images):
    """wgan.fit(images, batch_size, epochs): the logs are the example's, d_steps critic
    updates per batch, and the critic's loss falls from its first epoch (the critic learns
    to separate the real images from the generator's)."""
    wgan = make_wgan()
    history = wgan.fit(images, batch_size=32, epochs=3, verbose=0, rng=0)
    logs = history.history
    assert {"d_loss", "g_loss"} <= set(logs)
    steps = len(images) // 32 * 3
    assert wgan.d_optimizer.iterations == 3 * steps  # d_steps critic updates per batch
    assert wgan.g_optimizer.iterations == steps
    assert logs["d_loss"][-1] < logs["d_loss"][0] - 0.5, logs["d_loss"]
