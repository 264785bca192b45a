"""WGAN-GP (Gulrajani et al., 2017): a generator and a critic, both MLPs, trained with
explicit forward and backward passes (no autograd).

The critic C maps a flattened example (D,) to one score; the generator G maps a latent
code z ~ N(0, I) to a flattened example. For a batch of n real examples x, n fakes
G(z) and interpolates x_hat = eps x + (1 - eps) G(z) (eps ~ U[0, 1] per example):

* Wasserstein estimate  W = mean C(x) - mean C(G(z))
* gradient penalty      P = gp_weight * mean_i (||dC(x_hat_i)/dx_hat_i||_2 - 1)^2
* critic loss           L_C = -W + P,  dL_C/dC(x_i) = -1/n,  dL_C/dC(G(z_i)) = +1/n
  (the penalty's parameter gradient comes from :func:`handgrad.zoo.gradient_penalty`,
  a second-order backward pass)
* generator loss        L_G = -mean C(G(z)),  dL_G/dC(G(z_i)) = -1/n, back through C and G

Each training step (one batch of real data) is one critic update; after every
``n_critic`` of them the generator is updated once, as in the paper's Algorithm 1.
Both use one Adam (the paper's lr 1e-4, betas (0.5, 0.9)) whose state is per parameter,
so the critic's and the generator's step counts are their own.
"""

from __future__ import annotations

import math

import numpy as np

from .. import optimizers
from .._checks import as_generator, choice, describe, float_array, is_int, positive_int
from .._hyper import number
from ..io import checkpoint
from ..io.document import jsonable
from ..layers import Dense, LeakyReLU, ReLU, Sigmoid, Tanh, register
from ..model import Sequential
from .penalty import gradient_penalty

OUTPUTS = {"tanh": (Tanh, (-1.0, 1.0)), "sigmoid": (Sigmoid, (0.0, 1.0)), "linear": (None, None)}
EVAL_SEED = 0  # the noise of test_step (a repeatable validation figure)
LOG_KEYS = ("critic_loss", "wasserstein", "gradient_penalty", "generator_loss")


def _widths(op, name, value, meaning, empty=True):
    """A tuple of ints >= 1 (``meaning`` is quoted in the error)."""
    if not isinstance(value, (tuple, list)) or not all(is_int(v) for v in value):
        raise TypeError(f"{op}: '{name}' must be a tuple of ints >= 1 ({meaning}); received "
                        f"{describe(value)}")
    if any(v < 1 for v in value) or not (value or empty):
        raise ValueError(f"{op}: '{name}' must be a {'' if empty else 'non-empty '}tuple of "
                         f"ints >= 1 ({meaning}); received {value!r}")
    return tuple(int(v) for v in value)


def _mlp(name, hidden, out_features, activation, output=None):
    """Dense layers of widths ``hidden`` with ``activation()`` after each, then
    Dense(out_features) and ``output()`` when given."""
    layers = []
    for width in hidden:
        layers += [Dense(width), activation()]
    layers.append(Dense(out_features))
    if output is not None:
        layers.append(output())
    return Sequential(layers, name=name)


@register
class WGANGP(Sequential):  # a Sequential of its generator and critic, with its own steps
    """A Wasserstein GAN with gradient penalty on examples of per-example ``data_shape``.

    ``forward(z)`` is ``C(G(z))`` (a chain of the ``generator`` and the ``critic``,
    both :class:`~handgrad.model.Sequential`); ``fit(x, epochs=..., batch_size=...,
    callbacks=...)``, the loop of every model with this model's :meth:`train_step` and
    :meth:`test_step`, trains on real data ``x`` of shape ``(N, *data_shape)`` (no
    targets) and returns a History; ``sample(n, rng)`` draws new examples. The generator is
    Dense + ReLU layers of widths ``hidden`` and an ``output`` activation: ``"tanh"``
    for data scaled to [-1, 1] (the default), ``"sigmoid"`` for [0, 1] or ``"linear"``;
    the critic is Dense + LeakyReLU(0.2) layers of widths ``hidden`` and a Dense(1)
    (no batch normalization, as the paper says). ``seed`` sets the weights and the
    model's own noise (latent codes, interpolation weights), which is saved with it.
    ``handgrad.io.save``/``load`` round-trip it; :meth:`load` also restores Adam's state.
    """

    takes_targets = False

    def __init__(self, data_shape, latent_dim=32, hidden=(256, 256), n_critic=5,
                 gp_weight=10.0, lr=1e-4, betas=(0.5, 0.9), output="tanh", *, seed=None,
                 dtype=None, name=None):
        op = type(self).__name__
        self.data_shape = _widths(op, "data_shape", data_shape, "the shape of one example, "
                                  "e.g. (8, 8, 1)", empty=False)
        self.latent_dim = positive_int(op, "latent_dim", latent_dim)
        self.hidden = _widths(op, "hidden", hidden, "the hidden layers' widths")
        if seed is not None and is_int(seed) and seed < 0:
            raise ValueError(f"{op}: 'seed' must be an int >= 0 or None; received {seed!r}")
        self.n_critic = positive_int(op, "n_critic", n_critic)
        self.gp_weight = number(op, "gp_weight", gp_weight, low=0.0)
        self.output = choice(op, "output", output, tuple(OUTPUTS))
        features = math.prod(self.data_shape)
        self.generator = _mlp("generator", self.hidden, features, ReLU, OUTPUTS[output][0])
        self.critic = _mlp("critic", self.hidden, 1, lambda: LeakyReLU(negative_slope=0.2))
        super().__init__([self.generator, self.critic], name=name, dtype=dtype, seed=seed,
                         input_shape=(self.latent_dim,))
        self.compile(optimizers.Adam(lr=lr, betas=betas), loss=None)
        self.lr, self.betas = self.optimizer.lr, self.optimizer.betas  # as given (checked)
        self.noise = np.random.default_rng(None if seed is None else [seed, 1])
        self.critic_steps = 0  # critic updates since the last generator update

    # ------------------------------------------------------------------ config
    def get_config(self):
        config = {"data_shape": list(self.data_shape), "latent_dim": self.latent_dim,
                  "hidden": list(self.hidden), "n_critic": self.n_critic,
                  "gp_weight": self.gp_weight, "lr": self.lr,
                  "betas": list(self.betas), "output": self.output,
                  "name": self.name, "seed": self.seed}
        if self.dtype is not None:
            config["dtype"] = str(self.dtype)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def extra_state(self):
        """The children's state, the noise generator's and the critic-step count."""
        return {**super().extra_state(), "noise": jsonable(self.noise.bit_generator.state),
                "critic_steps": self.critic_steps}

    def load_extra_state(self, state):
        steps = state.get("critic_steps", 0)
        if not is_int(steps) or not 0 <= steps < self.n_critic:
            raise ValueError(f"{self.label}: 'critic_steps' must be an int in [0, "
                             f"{self.n_critic}); received {describe(steps)}")
        super().load_extra_state(state)
        if "noise" in state:
            self.noise.bit_generator.state = state["noise"]
        self.critic_steps = int(steps)

    def save(self, path):
        """Write the model, Adam's state and the noise generator to one safetensors file."""
        checkpoint.save(self, path)

    @classmethod
    def load(cls, path):
        """A model saved by :meth:`save` or ``handgrad.io.save``, with Adam's state, so
        that training resumes exactly where it stopped."""
        return checkpoint.load_as(cls, path)

    # -------------------------------------------------------------- the parts
    def _part(self, part):
        """Parameters and gradients of ``part`` ("generator" or "critic"), with the
        model's names (the optimizer's state keys)."""
        prefix = f"{part}."
        params = {k: v for k, v in self.named_parameters(trainable_only=True).items()
                  if k.startswith(prefix)}
        grads = self.named_gradients(trainable_only=True)
        return params, {k: grads[k] for k in params}

    def _latent(self, n):
        return self.noise.standard_normal((n, self.latent_dim), dtype=self.dtype)

    def _real(self, op, x):
        """``x`` (N, *data_shape) checked and flattened to (N, D)."""
        x = float_array(op, "x", x)
        if x.shape[1:] != self.data_shape or len(x) == 0:
            shape = ", ".join(map(str, self.data_shape))
            raise ValueError(f"{op}: 'x' must have shape (N, {shape}) with N >= 1 (the "
                             f"model's data_shape); received {describe(x)}")
        if x.dtype != self.dtype:
            raise TypeError(f"{op}: 'x' has dtype {x.dtype} but the model's parameters are "
                            f"{self.dtype}; cast it with x.astype('{self.dtype}')")
        return x.reshape(len(x), -1)

    def draw(self, n):
        """``(fake, eps)`` for a critic step, from the model's own noise: ``n`` flat fakes
        G(z) (n, D) and interpolation weights eps ~ U[0, 1] (n, 1)."""
        fake = self.generator.forward(self._latent(n), training=False)
        return fake, self.noise.random((n, 1), dtype=self.dtype)

    def generate(self, z):
        """G(z) for latent codes ``z`` (n, latent_dim), shaped (n, *data_shape)."""
        z = float_array("WGANGP.generate", "z", z, ndim=2, layout="(n, latent_dim)")
        if z.shape[1] != self.latent_dim:
            raise ValueError(f"WGANGP.generate: 'z' must have {self.latent_dim} columns "
                             f"(latent_dim); received {describe(z)}")
        fake = self.generator.forward(z, training=False)
        return fake.reshape(len(z), *self.data_shape)

    def sample(self, n, rng=None):
        """``n`` new examples (n, *data_shape) from latent codes drawn with ``rng`` (a
        Generator or a seed: the same seed gives the same samples)."""
        n = positive_int("WGANGP.sample", "n", n)
        rng = as_generator("WGANGP.sample", "rng", rng)
        return self.generate(rng.standard_normal((n, self.latent_dim), dtype=self.dtype))

    # ------------------------------------------------------------- objectives
    def critic_objective(self, real, fake, eps):
        """Set the critic's gradients to dL_C/dθ for flat ``real`` and ``fake`` batches
        (n, D) and interpolation weights ``eps`` (n, 1); returns the logs
        ``critic_loss``, ``wasserstein``, ``gradient_penalty`` and ``generator_loss``
        (-mean C(G(z)) on these fakes). No update is made."""
        n, critic = len(real), self.critic
        critic.zero_grad()
        scores = critic.forward(np.concatenate([real, fake]), training=True)
        real_score, fake_score = float(scores[:n].mean()), float(scores[n:].mean())
        dscores = np.full(scores.shape, 1.0 / n, dtype=scores.dtype)
        dscores[:n] = -1.0 / n  # dL_C/dC(x_i) = -1/n, dL_C/dC(G(z_i)) = +1/n
        critic.backward(dscores)
        penalty = 0.0
        if self.gp_weight:
            interpolates = eps * real + (1.0 - eps) * fake
            penalty, grads = gradient_penalty(critic, interpolates, self.gp_weight)
            own = critic.named_gradients()
            for key, grad in grads.items():
                own[key] += grad
        wasserstein = real_score - fake_score
        return {"critic_loss": penalty - wasserstein, "wasserstein": wasserstein,
                "gradient_penalty": float(penalty), "generator_loss": -fake_score}

    def generator_objective(self, z):
        """Set the generator's gradients to dL_G/dθ for latent codes ``z`` (n,
        latent_dim); returns L_G = -mean C(G(z)). The critic's gradients are left dirty."""
        self.zero_grad()
        scores = self.forward(z, training=True)
        self.backward(np.full(scores.shape, -1.0 / len(z), dtype=scores.dtype))
        return -float(scores.mean())

    def _update(self, part, loss, logs):
        """Step Adam on ``part``, unless ``loss`` is NaN or infinite (then fit decides,
        see :meth:`~handgrad.training.TrainingMixin.check_loss`)."""
        self.check_loss({**logs, "loss": loss}, op=f"WGANGP.train_step ({part} update)")
        self.optimizer.step(*self._part(part))

    # ---------------------------------------------------------------- training
    def check_data(self, op, x, y, *, validation=False):
        """Real examples (N, *data_shape) of the model's dtype, in the output's range (e.g.
        [-1, 1] for ``output="tanh"``)."""
        real = self._real(f"WGANGP.{op}", x)
        low_high = OUTPUTS[self.output][1]
        if low_high is not None and (real.min() < low_high[0] or real.max() > low_high[1]):
            raise ValueError(f"WGANGP.{op}: 'x' must lie in [{low_high[0]:g}, "
                             f"{low_high[1]:g}] for output={self.output!r}; received values "
                             f"in [{real.min():g}, {real.max():g}] (scale the data, or "
                             f"choose another output)")
        return x, y

    def train_step(self, x, y=None):
        """One critic update on the real batch ``x``, and a generator update after every
        ``n_critic`` critic updates. Returns the logs of :meth:`critic_objective`, which
        ``fit`` averages per epoch (``fit(x, epochs=..., batch_size=..., callbacks=...)``,
        no targets; ``rng`` shuffles the batches)."""
        real = self._real("WGANGP.train_step", x)
        logs = self.critic_objective(real, *self.draw(len(real)))
        self._update("critic", logs["critic_loss"], logs)
        self.critic_steps += 1
        if self.critic_steps == self.n_critic:
            self._update("generator", self.generator_objective(self._latent(len(real))), logs)
            self.critic_steps = 0
        return logs

    def test_step(self, x, y=None):
        """The logs of :meth:`critic_objective` on the real batch ``x`` with fakes and
        interpolation weights from a fixed seed (a repeatable figure that leaves the
        model's noise alone), and no update; ``fit``'s ``val_*``."""
        real = self._real("WGANGP.test_step", x)
        noise = np.random.default_rng(EVAL_SEED)
        fake = self.generator.forward(noise.standard_normal((len(real), self.latent_dim),
                                                           dtype=self.dtype), training=False)
        logs = self.critic_objective(real, fake, noise.random((len(real), 1), dtype=self.dtype))
        self.zero_grad()
        return logs
