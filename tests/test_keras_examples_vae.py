"""Keras's example "Variational AutoEncoder" (keras.io/examples/generative/vae), line for
line with handgrad's pieces, on the built-in 8x8 digits instead of 28x28 MNIST (so the
encoder's two stride-2 convolutions end at 2x2, not 7x7).

Keras semantics the example relies on, checked here:
- ``Sampling`` draws ``z = z_mean + exp(0.5 * z_log_var) * epsilon``, epsilon standard
  normal, a fresh draw per call;
- ``reconstruction_loss = reduce_mean(reduce_sum(binary_crossentropy(data, reconstruction),
  axis=(1, 2)))``: Keras's binary_crossentropy takes probabilities (the decoder ends in a
  sigmoid) and averages over the last axis (one channel), so this is the per-image sum
  of the pixels' cross-entropies, averaged over the batch;
- ``kl_loss = reduce_mean(reduce_sum(-0.5 * (1 + z_log_var - z_mean^2 - exp(z_log_var)),
  axis=1))``; ``total_loss = reconstruction_loss + kl_loss``;
- ``train_step`` returns ``{"loss", "reconstruction_loss", "kl_loss"}`` (the total loss is
  logged as "loss") and ``fit`` reports their epoch means in ``History``.

handgrad differences: there is no autograd tape, so the step runs the backward passes by
hand (decoder, then ``ops.reparameterize_backward`` and ``ops.gaussian_kl_backward`` into
the encoder); the Sampling layer is the ``Sampling`` helper below, called inside the step
(the encoder Model outputs ``[z_mean, z_log_var]``, Keras's also outputs ``z``); the model
subclasses ``TrainingMixin`` and ``Layer`` (as ``handgrad.zoo.VAE`` does), Keras's
``keras.Model``.
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad import losses, ops
from handgrad.layers import Layer
from handgrad.optimizers import Adam
from handgrad.testing import assert_close, tolerance
from handgrad.training import TrainingMixin

LATENT_DIM = 2


class Sampling:
    """Keras's Sampling layer: z = z_mean + exp(0.5 * z_log_var) * epsilon (a fresh
    epsilon from ``rng`` each call), with the cache for its backward."""

    def __init__(self, rng):
        self.rng = rng

    def __call__(self, z_mean, z_log_var):
        epsilon = self.rng.standard_normal(z_mean.shape, dtype=z_mean.dtype)
        return ops.reparameterize(z_mean, z_log_var, epsilon)


def make_encoder():
    encoder_inputs = hg.Input((8, 8, 1))
    x = L.Conv2D(32, 3, activation="relu", strides=2, padding="same")(encoder_inputs)
    x = L.Conv2D(64, 3, activation="relu", strides=2, padding="same")(x)
    x = L.Flatten()(x)
    x = L.Dense(16, activation="relu")(x)
    z_mean = L.Dense(LATENT_DIM, name="z_mean")(x)
    z_log_var = L.Dense(LATENT_DIM, name="z_log_var")(x)
    return hg.Model(encoder_inputs, [z_mean, z_log_var], name="encoder", seed=0)


def make_decoder():
    latent_inputs = hg.Input((LATENT_DIM,))
    x = L.Dense(2 * 2 * 64, activation="relu")(latent_inputs)
    x = L.Reshape((2, 2, 64))(x)
    x = L.Conv2DTranspose(64, 3, activation="relu", strides=2, padding="same")(x)
    x = L.Conv2DTranspose(32, 3, activation="relu", strides=2, padding="same")(x)
    decoder_outputs = L.Conv2DTranspose(1, 3, activation="sigmoid", padding="same")(x)
    return hg.Model(latent_inputs, decoder_outputs, name="decoder", seed=1)


class VAE(TrainingMixin, Layer):
    takes_targets = False  # fit(x) alone, as Keras's vae.fit(mnist_digits, ...)

    def __init__(self, encoder, decoder, seed=0):
        self.encoder, self.decoder = encoder, decoder
        super().__init__(name="vae")
        self.sampling = Sampling(np.random.default_rng(seed))
        self.bce = losses.get("binary_crossentropy")  # Keras's: takes probabilities

    def children(self):
        yield "encoder", self.encoder
        yield "decoder", self.decoder

    def _build(self, input_shape, rng):
        pass  # both networks are built

    def train_step(self, data, y=None):
        self.zero_grad()
        z_mean, z_log_var = self.encoder.forward(data, training=True)
        z, z_cache = self.sampling(z_mean, z_log_var)
        reconstruction = self.decoder.forward(z, training=True)
        pixels = int(np.prod(data.shape[1:3]))
        # mean over every pixel, times the pixels: the mean over images of the per-image sum
        mean_bce, dreconstruction = self.bce(reconstruction, data)
        reconstruction_loss = mean_bce * pixels
        kl_loss_per_image, kl_cache = ops.gaussian_kl(z_mean, z_log_var)
        kl_loss = float(np.mean(kl_loss_per_image))
        total_loss = reconstruction_loss + kl_loss
        logs = {"loss": total_loss, "reconstruction_loss": reconstruction_loss,
                "kl_loss": kl_loss}
        self.check_loss(logs)
        dz = self.decoder.backward(dreconstruction * pixels)
        dmean, dlog_var = ops.reparameterize_backward(dz, z_cache)
        batch_mean = np.full(len(data), 1.0 / len(data), dtype=z_mean.dtype)
        dmean_kl, dlog_var_kl = ops.gaussian_kl_backward(batch_mean, kl_cache)
        self.encoder.backward([dmean + dmean_kl, dlog_var + dlog_var_kl])
        self._apply_gradients()  # Keras's optimizer.apply_gradients(zip(grads, weights))
        return logs


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    from handgrad.data import load_digits

    return load_digits()


def test_one_step_logs_keras_formulas(digits):
    """The logged terms are the example's formulas, computed here in NumPy from the
    encoder's outputs and the same epsilon, before the step's update."""
    vae = VAE(make_encoder(), make_decoder(), seed=3)
    vae.compile(optimizer=Adam())
    data = digits.x_train[:32]
    z_mean, z_log_var = vae.encoder.forward(data, training=False)
    epsilon = np.random.default_rng(3).standard_normal(z_mean.shape, dtype=z_mean.dtype)
    z = z_mean + np.exp(0.5 * z_log_var) * epsilon
    p = vae.decoder.forward(z, training=False).astype(np.float64)
    eps = np.finfo(np.float32).eps  # Keras clips probabilities to [eps, 1 - eps]
    p = np.clip(p, eps, 1 - eps)
    bce = -(data * np.log(p) + (1 - data) * np.log1p(-p))
    reconstruction_loss = np.mean(np.sum(bce, axis=(1, 2, 3)))
    kl_loss = np.mean(np.sum(-0.5 * (1 + z_log_var - z_mean ** 2 - np.exp(z_log_var)),
                             axis=1))
    before = {k: v.copy() for k, v in vae.named_parameters().items()}
    logs = vae.train_step(data)
    assert set(logs) == {"loss", "reconstruction_loss", "kl_loss"}
    assert_close(logs["kl_loss"], kl_loss, dtype=np.float32, terms=2 * LATENT_DIM,
                 scale=np.abs(kl_loss) + 1)
    assert_close(logs["reconstruction_loss"], reconstruction_loss, dtype=np.float32,
                 terms=data[0].size, scale=reconstruction_loss)
    assert logs["loss"] == pytest.approx(logs["reconstruction_loss"] + logs["kl_loss"])
    after = vae.named_parameters()
    assert all(not np.array_equal(before[k], after[k]) for k in before)  # both trained


def test_fit_lowers_the_total_loss(digits):
    """vae.compile(optimizer=Adam()); vae.fit(x, epochs, batch_size): History holds the
    example's three keys, and the total loss falls well below its first epoch."""
    vae = VAE(make_encoder(), make_decoder())
    vae.compile(optimizer=Adam(learning_rate=3e-3))
    history = vae.fit(digits.x_train[:512], epochs=4, batch_size=64, verbose=0, rng=0)
    logs = history.history
    assert {"loss", "reconstruction_loss", "kl_loss"} <= set(logs)
    for total, rec, kl in zip(logs["loss"], logs["reconstruction_loss"], logs["kl_loss"]):
        # epoch means of Python floats (float64): each a sum over the batches, in one order
        assert total == pytest.approx(rec + kl, rel=tolerance(np.float64, terms=2 * 8))
    assert logs["loss"][-1] < 0.9 * logs["loss"][0], logs["loss"]
    assert all(kl > 0 for kl in logs["kl_loss"])  # a KL divergence of distinct Gaussians
