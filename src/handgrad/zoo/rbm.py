"""A Bernoulli-Bernoulli restricted Boltzmann machine, trained by contrastive divergence.

Binary visible units ``v`` (V,) and hidden units ``h`` (H,), weights ``W`` (V, H),
visible bias ``b`` (V,), hidden bias ``c`` (H,). Energy ``E(v, h) = -v.b - h.c - v W h``;
summing ``h`` out gives the free energy, with ``p(v) = exp(-F(v)) / Z``::

    F(v) = -v.b - sum_j softplus(c_j + v.W[:, j])
    p(h_j = 1 | v) = sigmoid(c_j + v.W[:, j])        p(v_i = 1 | h) = sigmoid(b_i + W[i].h)

Gradient (the closed form). ``dF/db = -v``, ``dF/dc = -p(h|v)``, ``dF/dW = -v p(h|v)^T``,
and ``-d log p(v)/dtheta = dF(v)/dtheta - E_model[dF/dtheta]``. CD-k estimates the model
expectation with negative samples ``v~``: ``k`` Gibbs steps from the batch (CD) or from
persistent chains (PCD). :meth:`RBM.contrastive_divergence` returns, with the negatives
held fixed, ``d/dtheta [mean_data F(v) - mean_neg F(v~)]``::

    dW = -(<v p(h|v)^T>_data - <v~ p(h|v~)^T>_neg)
    db = -(<v>_data - <v~>_neg)          dc = -(<p(h|v)>_data - <p(h|v~)>_neg)

i.e. minus the usual ``<v h>_data - <v h>_model``: a descent direction, as every gradient
in handgrad. Statistics: the data ``v`` as given and binary negative samples ``v~``;
hidden statistics use the probabilities ``p(h|v)``; the chains themselves move by sampled
hidden states. Training: ``handgrad.optimizers.SGD`` with momentum on these gradients
(descent on the free-energy gap = ascent on the CD log-likelihood estimate), plus an L2
weight decay on ``W`` only (not on the biases).

As a layer, ``forward(v)`` is ``p(h|v)`` (the features, for a network on top) and
``backward(dy)`` its gradient: ``d = dy * p (1 - p)``, ``dv = d W^T``, ``dW = v^T d``,
``dc = sum_n d``, ``db = 0``. The pseudo-log-likelihood lives in :mod:`.rbm_scores`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .._checks import as_generator, choice, float_array, positive_int
from .._hyper import flag, number
from ..io import checkpoint
from ..layers import Layer, register
from ..ops import special
from ..optimizers import SGD
from ..training import TrainingMixin
from . import rbm_scores

__all__ = ["RBM"]


@register
class RBM(TrainingMixin, Layer):
    """Bernoulli-Bernoulli RBM (see the module docstring for the math).

    ``RBM(n_hidden, k=1, persistent=False, lr=0.1, momentum=0.5, weight_decay=0.0,
    n_chains=None, seed=None, dtype=None)``: ``k`` Gibbs steps per update; ``persistent``
    keeps ``n_chains`` chains across updates (PCD; None: as many as the first batch has
    examples, i.e. ``batch_size`` in :meth:`fit`), started at uniform random bits and
    saved with the model (the buffer ``chains``). ``seed`` sets the weights and the
    model's own generator ``rng`` (saved with it), which draws every sample unless a
    method is given ``rng``. Data are ``(N, V)`` arrays of the model's dtype with values
    in [0, 1] (binary, or probabilities). ``handgrad.io.save``/``load`` round-trip it;
    :meth:`load` also restores the momentum.
    """

    takes_targets = False
    fit_moved: ClassVar[dict] = {"pll": "give it to the model: RBM(..., pll='stochastic')"}

    def __init__(self, n_hidden, k=1, persistent=False, lr=0.1, momentum=0.5,
                 weight_decay=0.0, n_chains=None, *, pll="exact", name=None, dtype=None,
                 seed=None, trainable=True):
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        op = self.label
        self.n_hidden = positive_int(op, "n_hidden", n_hidden)
        self.k = positive_int(op, "k", k)
        self.persistent = flag(op, "persistent", persistent)
        self.weight_decay = number(op, "weight_decay", weight_decay, low=0.0)
        self.n_chains = None if n_chains is None else positive_int(op, "n_chains", n_chains)
        if self.n_chains is not None and not self.persistent:
            raise ValueError(f"{op}: 'n_chains' is for persistent=True (PCD); received "
                             f"n_chains={n_chains!r} with persistent=False")
        self.lr = number(op, "lr", lr, low=0.0, low_open=True)
        self.momentum = number(op, "momentum", momentum, low=0.0, high=1.0, high_open=True)
        self.optimizer = SGD(lr=self.lr, momentum=self.momentum)  # train_step's
        if seed is not None and seed < 0:
            raise ValueError(f"{op}: 'seed' must be an int >= 0 or None; received {seed!r}")
        self.rng = np.random.default_rng(None if seed is None else [seed, 1])  # the samples
        self.pll = choice(op, "pll", pll, ("exact", "stochastic"))

    def get_config(self):
        return {**super().get_config(), "n_hidden": self.n_hidden, "k": self.k,
                "persistent": self.persistent, "lr": self.lr, "momentum": self.momentum,
                "weight_decay": self.weight_decay, "n_chains": self.n_chains, "pll": self.pll}

    def extra_state(self):
        """The sample generator's state."""
        return {"rng": self.rng.bit_generator.state}

    def load_extra_state(self, state):
        """Also reads the files of earlier versions, whose ``history`` (the per-epoch
        scores, now the History that ``fit`` returns) is not kept."""
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]

    def _build(self, input_shape, rng):
        """W ~ N(0, 0.01^2) (V, H), b = 0, c = 0; PCD chains of uniform random bits."""
        if len(input_shape) != 1 or input_shape[0] < 1:
            raise ValueError(f"{self.label}: inputs must be (N, V) with V >= 1 visible units "
                             f"(flatten images first); received per-example shape "
                             f"{input_shape}")
        n_visible = input_shape[0]
        self.parameters = {
            "W": (0.01 * rng.standard_normal((n_visible, self.n_hidden))).astype(self.dtype),
            "b": np.zeros(n_visible, self.dtype), "c": np.zeros(self.n_hidden, self.dtype)}
        if self.n_chains is not None:
            self.buffers["chains"] = self._bernoulli(
                np.full((self.n_chains, n_visible), 0.5, self.dtype), rng)

    # ------------------------------------------------------------ checks
    @property
    def n_visible(self):
        return self.input_shape[0] if self.built else None

    @property
    def chains(self):
        """The persistent chains (n_chains, V), or None."""
        return self.buffers.get("chains")

    def _require_built(self, op):
        if not self.built:
            raise ValueError(f"{op}: the RBM is not built yet (call fit, or build((V,)))")

    def _visible(self, op, name, v, width=None, layout="(N, V)"):
        """``v`` checked: (N, width) (default V) of the model's dtype, values in [0, 1]."""
        if width is None:
            self._require_built(op)
            width = self.n_visible
        v = float_array(op, name, v, ndim=2, layout=layout)
        if v.shape[1] != width:
            raise ValueError(f"{op}: '{name}' must have {width} columns; received shape "
                             f"{tuple(v.shape)}")
        if self.dtype is not None and v.dtype != self.dtype:
            raise TypeError(f"{op}: '{name}' must have the model's dtype {self.dtype}; "
                            f"received {v.dtype} (cast it, or make the RBM with that dtype)")
        if v.size and not (np.all(v >= 0) and np.all(v <= 1)):
            raise ValueError(f"{op}: '{name}' must hold values in [0, 1] (binary units or "
                             f"their probabilities); received values in [{np.nanmin(v):g}, "
                             f"{np.nanmax(v):g}]")
        return v

    def _generator(self, op, rng):
        return self.rng if rng is None else as_generator(op, "rng", rng, allow_none=False)

    # --------------------------------------------------------- the model
    def _pre_hidden(self, v):
        return self.parameters["c"] + v @ self.parameters["W"]

    def _visible_given(self, h):
        return special.sigmoid(np, self.parameters["b"] + h @ self.parameters["W"].T)

    def free_energy(self, v):
        """F(v) = -v.b - sum_j softplus(c_j + v.W[:, j]): (N, V) -> (N,)."""
        return self._free_energy(self._visible("RBM.free_energy", "v", v))

    def _free_energy(self, v):
        return -(v @ self.parameters["b"]) - special.softplus(np, self._pre_hidden(v)).sum(1)

    def hidden_probabilities(self, v):
        """p(h = 1 | v) = sigmoid(c + v W): (N, V) -> (N, H)."""
        v = self._visible("RBM.hidden_probabilities", "v", v)
        return special.sigmoid(np, self._pre_hidden(v))

    transform = hidden_probabilities  # the features of v: (N, V) -> (N, H)

    def visible_probabilities(self, h):
        """p(v = 1 | h) = sigmoid(b + h W^T): (N, H) -> (N, V)."""
        op = "RBM.visible_probabilities"
        self._require_built(op)
        return self._visible_given(self._visible(op, "h", h, self.n_hidden, "(N, H)"))

    def _forward(self, v, training):
        self._visible(f"{self.label}.forward", "x", v)
        p = special.sigmoid(np, self._pre_hidden(v))
        return p, (v, p)

    def _backward(self, dy, cache):
        v, p = cache
        d = dy * p * (1 - p)
        return d @ self.parameters["W"].T, {"W": v.T @ d, "b": np.zeros_like(
            self.parameters["b"]), "c": d.sum(0)}

    # ---------------------------------------------------------- sampling
    def _bernoulli(self, p, rng):
        return (rng.random(p.shape, dtype=self.dtype) < p).astype(self.dtype)

    def _gibbs(self, v, steps, rng):
        """``steps`` times: h ~ p(h | v), then v ~ p(v | h); returns the last v."""
        for _ in range(steps):
            h = self._bernoulli(special.sigmoid(np, self._pre_hidden(v)), rng)
            v = self._bernoulli(self._visible_given(h), rng)
        return v

    def gibbs(self, v, steps=1, rng=None):
        """``steps`` block-Gibbs steps from ``v`` (N, V); returns binary samples (N, V)."""
        op = "RBM.gibbs"
        v = self._visible(op, "v", v)
        return self._gibbs(v, positive_int(op, "steps", steps), self._generator(op, rng))

    def sample(self, n, steps=1000, rng=None, probabilities=False):
        """``n`` chains started at uniform random bits, run ``steps`` Gibbs steps: binary
        samples (n, V), or with ``probabilities`` the last step's p(v | h)."""
        op = "RBM.sample"
        n, steps = positive_int(op, "n", n), positive_int(op, "steps", steps)
        probabilities, rng = flag(op, "probabilities", probabilities), self._generator(op, rng)
        self._require_built(op)
        v = self._gibbs(self._bernoulli(np.full((n, self.n_visible), 0.5, self.dtype), rng),
                        steps - 1, rng)
        p = self._visible_given(self._bernoulli(special.sigmoid(np, self._pre_hidden(v)), rng))
        return p if probabilities else self._bernoulli(p, rng)

    # --------------------------------------------------------- gradients
    def negative_samples(self, v, rng=None):
        """The negatives of one CD-k update for the batch ``v`` (N, V): ``k`` Gibbs steps
        from ``v`` (CD), or from the persistent chains, which move on (PCD)."""
        op = "RBM.negative_samples"
        return self._negatives(self._visible(op, "v", v), self._generator(op, rng))

    def _negatives(self, v, rng):
        if not self.persistent:
            return self._gibbs(v, self.k, rng)
        if self.chains is None:
            self.n_chains = len(v)
            self.buffers["chains"] = self._bernoulli(np.full(v.shape, 0.5, self.dtype), rng)
        self.buffers["chains"] = self._gibbs(self.chains, self.k, rng)
        return self.chains.copy()

    def free_energy_gradients(self, v_data, v_negative):
        """d/dtheta [mean F(v_data) - mean F(v_negative)] for W, b, c (the closed form
        of the module docstring): a dict of arrays shaped like the parameters."""
        op = "RBM.free_energy_gradients"
        data = self._visible(op, "v_data", v_data)
        negative = self._visible(op, "v_negative", v_negative)
        if not (len(data) and len(negative)):
            raise ValueError(f"{op}: 'v_data' and 'v_negative' must hold examples; received "
                             f"{len(data)} and {len(negative)}")
        return self._gradients(data, negative)

    def _gradients(self, data, negative):
        h_data = special.sigmoid(np, self._pre_hidden(data))
        h_negative = special.sigmoid(np, self._pre_hidden(negative))
        return {"W": negative.T @ h_negative / len(negative) - data.T @ h_data / len(data),
                "b": negative.mean(0) - data.mean(0),
                "c": h_negative.mean(0) - h_data.mean(0)}

    def contrastive_divergence(self, v, rng=None):
        """The CD-k (PCD-k) gradients for the batch ``v`` (N, V): the free-energy
        gradients of ``v`` against :meth:`negative_samples` of it."""
        op = "RBM.contrastive_divergence"
        v = self._visible(op, "v", v)
        if not len(v):
            raise ValueError(f"{op}: 'v' must hold at least one example; received shape "
                             f"{tuple(v.shape)}")
        return self._gradients(v, self._negatives(v, self._generator(op, rng)))

    # ------------------------------------------------------------ scores
    def pseudo_log_likelihood(self, v, exact=True, rng=None):
        """Per example (N,): ``sum_i log p(v_i | v_-i) = sum_i log sigmoid(F(v~i) - F(v))``
        (``v~i``: bit i flipped to ``1 - v_i``) over all V bits (``exact``), or
        scikit-learn's estimate ``V log sigmoid(F(v~i) - F(v))`` at one random bit ``i``
        per example (unbiased for the exact value)."""
        op = "RBM.pseudo_log_likelihood"
        v, exact = self._visible(op, "v", v), flag(op, "exact", exact)
        index = None if exact else self._generator(op, rng).integers(0, v.shape[1], len(v))
        return rbm_scores.pseudo_log_likelihood(self.parameters, v, index)

    def reconstruction_error(self, v):
        """Mean over examples and units of ``(v - p(v | h = p(h | v)))^2`` (a mean-field
        up-down pass); NaN for no examples."""
        v = self._visible("RBM.reconstruction_error", "v", v)
        back = self._visible_given(special.sigmoid(np, self._pre_hidden(v)))
        return float(np.mean((v - back) ** 2)) if v.size else float("nan")

    # ------------------------------------------------------------- train
    def update(self, v, rng=None):
        """One SGD update on the batch ``v`` (N, V); returns the gradients used (W's with
        the weight decay ``weight_decay * W`` added)."""
        return self._step(self.contrastive_divergence(v, rng))

    def _step(self, grads):
        if self.weight_decay:
            grads["W"] = grads["W"] + self.weight_decay * self.parameters["W"]
        self.optimizer.step(self.parameters, grads)
        return grads

    def _scores(self, v):
        pll = self.pseudo_log_likelihood(v, exact=self.pll == "exact", rng=self.rng)
        return {"pseudo_log_likelihood": float(pll.mean()),
                "reconstruction_error": self.reconstruction_error(v)}

    def check_data(self, op, x, y, *, validation=False):
        """fit's and evaluate's data: (N, V) in [0, 1]. The first ``fit`` builds an unbuilt
        model (in x's dtype unless it has its own) and sets its visible biases to the
        log-odds of the data's means, clipped to [1e-3, 1 - 1e-3] (Hinton's recipe)."""
        op, name = f"RBM.{op}", "x_val" if validation else "x"
        if not self.built and not validation:
            x = float_array(op, "x", x, ndim=2, layout="(N, V)")
            mean = self._visible(op, "x", x, width=x.shape[1]).mean(0)
            self.build((x.shape[1],), dtype=x.dtype)
            clipped = np.clip(mean, 1e-3, 1 - 1e-3)
            self.parameters["b"][...] = np.log(clipped) - np.log1p(-clipped)
        return self._visible(op, name, x), y

    def train_step(self, x, y=None):
        """One CD-k (PCD-k) update with SGD on the batch ``x`` (N, V), the samples from
        ``self.rng``. Returns the batch's scores measured before the update:
        ``pseudo_log_likelihood`` (``pll`` "exact" or "stochastic"), ``reconstruction_error``
        and ``loss``, the free-energy gap ``mean F(x) - mean F(v~)`` of the batch and its
        negatives, whose gradient (negatives held fixed) the update descends; it is no
        likelihood, but a NaN or inf in it stops the update (see ``check_loss``)."""
        v = self._visible("RBM.train_step", "x", x)
        logs = self._scores(v)
        negative = self._negatives(v, self.rng)
        logs["loss"] = float(self._free_energy(v).mean() - self._free_energy(negative).mean())
        self.check_loss(logs, op="RBM.train_step")
        self._step(self._gradients(v, negative))
        return logs

    def test_step(self, x, y=None):
        """The batch's ``pseudo_log_likelihood`` and ``reconstruction_error`` (``fit``'s
        ``val_*``; means per example, so the epoch's are those of the whole set)."""
        return self._scores(self._visible("RBM.test_step", "x", x))

    # ------------------------------------------------------------- files
    def save(self, path):
        """``handgrad.io.save``: config, W, b, c, the chains, the momentum, the
        generator's state in one safetensors file."""
        checkpoint.save(self, path)

    @classmethod
    def load(cls, path):
        """An RBM saved by :meth:`save` (or ``handgrad.io.save``) with its momentum, so
        that training resumes exactly where it stopped."""
        return checkpoint.load_as(cls, path)
