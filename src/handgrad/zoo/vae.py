"""A Bernoulli variational autoencoder (Kingma and Welling, 2014) with explicit backward.

Encoder ``x -> [mu, log_var]`` and decoder ``z -> logits`` are MLPs of ``Dense`` and
``ReLU`` (``hidden`` units, mirrored in the decoder), each a ``Sequential``. For a batch of
N examples and standard normal noise ``eps`` (N, latent_dim), the loss is the mean
negative evidence lower bound, in nats per example::

    z    = mu + exp(log_var / 2) * eps                           (ops.reparameterize)
    loss = mean_n [ sum_pixels softplus(l) - x l                 (ops.bernoulli_nll_logits)
                    + KL(N(mu, exp(log_var)) || N(0, 1)) ]       (ops.gaussian_kl)

and its gradient flows back by hand: ``dl = (sigmoid(l) - x) / N`` through the decoder
to ``dz``; ``dmu = dz + mu / N`` and ``dlog_var = dz * (z - mu) / 2 + (exp(log_var) - 1)
/ (2 N)`` through the encoder. Pixels ``x`` must lie in [0, 1].

The reported figure, :meth:`VAE.negative_elbo`, is that single-sample estimate (KL in
closed form, the reconstruction term at one draw of ``eps`` per example from a fixed
seed, so it is repeatable), averaged over the examples; ``samples=K`` averages K draws
(the same bound, less noise). It is an upper bound on ``-log p(x)``, not an
importance-weighted estimate.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .. import layers as L
from .. import ops, optimizers
from .._checks import as_generator, describe, float_array, is_int, positive_int
from .._hyper import flag
from ..io import save
from ..io.checkpoint import load_as
from ..layers import Layer, register
from ..model.sequential import Sequential
from ..ops import special
from ..training import TrainingMixin, hooks
from ..training.evaluation import keras_result

EVAL_SEED = 0  # the noise seed of negative_elbo and evaluate (a repeatable figure)


def _hidden_sizes(owner, hidden):
    if is_int(hidden):
        hidden = (hidden,)
    if not isinstance(hidden, (list, tuple)) or not all(is_int(h) and h >= 1 for h in hidden):
        raise ValueError(f"{owner}: 'hidden' must be a tuple of ints >= 1 (the hidden layer "
                         f"sizes); received {describe(hidden)}")
    return tuple(int(h) for h in hidden)


def _mlp(sizes, out_features, head):
    """Dense + ReLU for each size, then a Dense(out_features) named ``head``."""
    layers = []
    for k, size in enumerate(sizes, 1):
        layers += [L.Dense(size, name=f"hidden_{k}"), L.ReLU(name=f"relu_{k}")]
    return [*layers, L.Dense(out_features, name=head)]


@register
class VAE(TrainingMixin, Layer):
    """A VAE for inputs in [0, 1] of any per-example shape (flattened inside).

    ``VAE(latent_dim=16, hidden=(256, 256), input_shape=None, dtype=None, seed=None)``;
    built on first use (or at once when ``input_shape`` is given). It comes compiled
    with Adam(lr=1e-3) (``compile(optimizer, loss=None)`` chooses another); ``fit(x,
    epochs=..., batch_size=..., validation_data=(x_val, None), callbacks=...)`` is
    :meth:`~handgrad.training.TrainingMixin.fit` with the VAE's own ``train_step`` and
    ``test_step`` (no targets), returning a History of ``loss`` (the mean negative ELBO
    of the training batches), ``reconstruction``, ``kl`` and their ``val_`` twins.
    ``negative_elbo``, ``encode``, ``decode``, ``reconstruct`` and ``sample`` use
    it; ``handgrad.io.save``/``load`` store it (``VAE.load`` restores the optimizer too).
    ``forward(x)`` (and ``predict``) give the logits of the reconstruction at ``z = mu``.
    ``seed`` draws the weights; the training noise ``eps`` comes from ``self.rng``, a
    Generator seeded by ``[seed, 1]`` whose state is saved with the model.
    """

    takes_targets = False
    fit_moved: ClassVar[dict] = {
        "lr": "compile the optimizer: vae.compile(handgrad.optimizers.Adam(lr=...), "
              "loss=None) (the VAE comes with Adam(lr=1e-3))"}

    def __init__(self, latent_dim=16, hidden=(256, 256), *, input_shape=None, name=None,
                 dtype=None, seed=None, trainable=True):
        self.encoder = self.decoder = None  # made by build, once the input shape is known
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        self.latent_dim = positive_int("VAE", "latent_dim", latent_dim)
        self.hidden = _hidden_sizes("VAE", hidden)
        self.training = True
        self.rng = np.random.default_rng(None if seed is None else [seed, 1])  # the noise
        self.compile(optimizers.Adam(lr=1e-3), loss=None)
        if input_shape is not None:
            self.build(input_shape)

    def get_config(self):
        config = {**super().get_config(), "latent_dim": self.latent_dim,
                  "hidden": list(self.hidden)}
        if self.input_shape is not None:
            config["input_shape"] = list(self.input_shape)
        return config

    def children(self):
        return ((name, child) for name, child in (("encoder", self.encoder),
                                                  ("decoder", self.decoder)) if child)

    def _build(self, input_shape, rng):
        if not input_shape:
            raise ValueError(f"{self.label}: inputs must be (N, ...) with at least one "
                             f"value per example; received per-example shape {input_shape}")
        size = int(np.prod(input_shape))
        encoder = [L.Flatten(name="flatten"),
                   *_mlp(self.hidden, 2 * self.latent_dim, "mu_log_var")]
        decoder = [*_mlp(self.hidden[::-1], size, "logits"),
                   L.Reshape(input_shape, name="unflatten")]
        self.encoder = Sequential(encoder, name="encoder", dtype=self.dtype)
        self.decoder = Sequential(decoder, name="decoder", dtype=self.dtype)
        for model, shape in ((self.encoder, input_shape), (self.decoder, (self.latent_dim,))):
            model.trainable = self.trainable
            model.build(shape, rng=rng)

    def extra_state(self):
        return {**super().extra_state(), "rng": self.rng.bit_generator.state}

    def load_extra_state(self, state):
        super().load_extra_state(state)
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]

    # ------------------------------------------------------------ the networks
    def _posterior(self, x, training):
        h = self.encoder.forward(x, training=training)
        return h[:, :self.latent_dim], h[:, self.latent_dim:]

    def _forward(self, x, training):
        mu, _ = self._posterior(x, training)
        return self.decoder.forward(mu, training=training), None

    def _backward(self, dlogits, cache):
        dmu = self.decoder.backward(dlogits)
        return self.encoder.backward(np.concatenate([dmu, np.zeros_like(dmu)], axis=-1)), {}

    # ---------------------------------------------------------------- the loss
    def _pixels(self, op, x, name="x"):
        """``x`` checked: float, (N, *input_shape) once built, the model's dtype, in [0, 1]."""
        x = float_array(op, name, x)
        if x.ndim < 2:
            raise ValueError(f"{op}: '{name}' must be a batch (N, ...) of examples; received "
                             f"{describe(x)}")
        self.ensure_built(x.shape[1:])
        if tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(f"{op}: '{name}' must hold examples of shape {self.input_shape}; "
                             f"received {describe(x)}")
        if x.dtype != self.dtype:
            raise TypeError(f"{op}: '{name}' has dtype {x.dtype} but the model's parameters "
                            f"are {self.dtype}; cast it, or make the VAE with dtype='{x.dtype}'")
        if x.size and not (x.min() >= 0 and x.max() <= 1):
            raise ValueError(f"{op}: '{name}' must hold pixel values in [0, 1] (scale the data "
                             f"first); received values from {x.min():g} to {x.max():g}")
        return x

    def _noise(self, op, eps, n):
        eps = float_array(op, "eps", eps)
        if eps.shape != (n, self.latent_dim) or eps.dtype != self.dtype:
            raise ValueError(f"{op}: 'eps' must be standard normal noise of shape "
                             f"{(n, self.latent_dim)} and dtype {self.dtype}; received "
                             f"{describe(eps)}")
        return eps

    def _terms(self, x, eps, training):
        """Per-example (reconstruction, kl) and the caches for :meth:`_backward_terms`."""
        mu, log_var = self._posterior(x, training)
        z, z_cache = ops.reparameterize(mu, log_var, eps)
        reconstruction, rec_cache = ops.bernoulli_nll_logits(
            self.decoder.forward(z, training=training), x)
        kl, kl_cache = ops.gaussian_kl(mu, log_var)
        return reconstruction, kl, (z_cache, rec_cache, kl_cache)

    def _backward_terms(self, caches, n):
        z_cache, rec_cache, kl_cache = caches
        mean = np.full(n, 1.0 / n, dtype=self.dtype)  # d loss / d (per-example term)
        dz = self.decoder.backward(ops.bernoulli_nll_logits_backward(mean, rec_cache))
        dmu, dlog_var = ops.reparameterize_backward(dz, z_cache)
        dmu_kl, dlog_var_kl = ops.gaussian_kl_backward(mean, kl_cache)
        return self.encoder.backward(np.concatenate([dmu + dmu_kl, dlog_var + dlog_var_kl],
                                                    axis=-1))

    @staticmethod
    def _logs(reconstruction, kl):
        return {"loss": float(np.mean(reconstruction + kl)),
                "reconstruction": float(np.mean(reconstruction)), "kl": float(np.mean(kl))}

    def loss(self, x, eps):
        """The batch's mean negative ELBO for the noise ``eps`` (N, latent_dim), with its
        two terms: ``{"loss", "reconstruction", "kl"}`` in nats per example. No caches."""
        x = self._pixels("VAE.loss", x)
        reconstruction, kl, _ = self._terms(x, self._noise("VAE.loss", eps, len(x)), False)
        return self._logs(reconstruction, kl)

    def loss_and_gradients(self, x, eps):
        """:meth:`loss`, and its gradient added into every parameter's ``gradients``."""
        x = self._pixels("VAE.loss_and_gradients", x)
        eps = self._noise("VAE.loss_and_gradients", eps, len(x))
        reconstruction, kl, caches = self._terms(x, eps, True)
        self._backward_terms(caches, len(x))
        return self._logs(reconstruction, kl)

    # ---------------------------------------------------------------- training
    def train_step(self, x, y=None):
        """One optimizer step on the batch's mean negative ELBO (fresh noise from
        ``self.rng``); a NaN or infinite loss raises before the update (see
        :meth:`~handgrad.training.TrainingMixin.check_loss`). Returns ``{"loss",
        "reconstruction", "kl"}``, which ``fit`` averages per epoch."""
        x = self._pixels("VAE.train_step", x)
        self.zero_grad()
        eps = self.rng.standard_normal((len(x), self.latent_dim), dtype=self.dtype)
        logs = self.loss_and_gradients(x, eps)
        self.check_loss(logs, op="VAE.train_step")
        self._apply_gradients()
        return logs

    def check_data(self, op, x, y, *, validation=False):
        """fit's and evaluate's data: pixels in [0, 1] of the model's shape and dtype."""
        return self._pixels(f"VAE.{op}", x, "x_val" if validation else "x"), y

    def test_step(self, x, y=None):
        """The batch's :meth:`evaluate` logs (``fit``'s ``val_*``)."""
        return self.evaluate(x, return_dict=True)

    # ------------------------------------------------------------------ using it
    def evaluate(self, x, y=None, batch_size=256, *, samples=1, rng=EVAL_SEED, callbacks=(),
                 return_dict=False):
        """The mean single-sample negative ELBO of ``x`` and its terms, in nats per
        example, averaged over ``samples`` draws of the noise from ``rng`` (a seed or
        Generator; the default seed makes it repeatable): ``[loss, reconstruction, kl]``
        as Keras's ``evaluate`` gives them, or the dict with ``return_dict=True``.
        ``callbacks`` get the ``on_test_*`` hooks (a batch per draw and slice)."""
        op = "VAE.evaluate"
        x = self._pixels(op, x)
        if len(x) == 0:
            raise ValueError(f"{op}: 'x' has no examples; received {describe(x)}")
        batch_size = positive_int(op, "batch_size", batch_size)
        samples = positive_int(op, "samples", samples)
        return_dict = flag(op, "return_dict", return_dict)
        callbacks = hooks.prepare(op, callbacks, self)
        noise = as_generator(op, "rng", rng, allow_none=False).standard_normal(
            (samples, len(x), self.latent_dim), dtype=self.dtype)
        hooks.notify(callbacks, "on_test_begin", {})
        totals, index = np.zeros(2), 0
        for eps in noise:
            for start in range(0, len(x), batch_size):
                part = slice(start, start + batch_size)
                hooks.notify(callbacks, "on_test_batch_begin", index, {})
                reconstruction, kl, _ = self._terms(x[part], eps[part], False)
                sums = (reconstruction.sum(dtype=np.float64), kl.sum(dtype=np.float64))
                totals += sums
                n = len(reconstruction)
                hooks.notify(callbacks, "on_test_batch_end", index,
                             self._logs(*(float(total) / n for total in sums)))
                index += 1
        logs = self._logs(*(float(total) / (samples * len(x)) for total in totals))
        hooks.notify(callbacks, "on_test_end", logs)
        return keras_result(logs, return_dict)

    def negative_elbo(self, x, samples=1, rng=EVAL_SEED, batch_size=256):
        """The mean negative ELBO of ``x`` in nats per example (see :meth:`evaluate`)."""
        return self.evaluate(x, batch_size=batch_size, samples=samples, rng=rng,
                             return_dict=True)["loss"]

    def encode(self, x):
        """The posterior's ``(mu, log_var)``, each (N, latent_dim)."""
        mu, log_var = self._posterior(self._pixels("VAE.encode", x), False)
        return mu.copy(), log_var.copy()

    def decode(self, z):
        """Pixel probabilities sigmoid(decoder(z)), (N, *input_shape), for z (N, latent)."""
        if not self.built:
            raise RuntimeError("VAE.decode: the model is not built yet (fit it, or give "
                               "input_shape)")
        z = float_array("VAE.decode", "z", z, ndim=2, layout="(N, latent_dim)")
        if z.shape[1] != self.latent_dim:
            raise ValueError(f"VAE.decode: 'z' must have {self.latent_dim} columns (the "
                             f"latent size); received {describe(z)}")
        return special.sigmoid(np, self.decoder.forward(z, training=False))

    def reconstruct(self, x):
        """decode(mu(x)): the mean reconstruction of ``x``, pixel probabilities."""
        return self.decode(self.encode(x)[0])

    def sample(self, n, rng):
        """``n`` new examples' pixel probabilities: decode(z), z ~ N(0, I) from ``rng``."""
        n = positive_int("VAE.sample", "n", n)
        generator = as_generator("VAE.sample", "rng", rng, allow_none=False)
        return self.decode(generator.standard_normal((n, self.latent_dim),
                                                     dtype=self.dtype or np.float32))

    # ------------------------------------------------------------------ files
    def save(self, path):
        """:func:`handgrad.io.save`: config, weights, optimizer state and noise state."""
        save(self, path)

    @classmethod
    def load(cls, path):
        """A VAE saved by :meth:`save` (or ``io.save``), with its optimizer, ready to
        train on exactly where it stopped."""
        return load_as(cls, path)
