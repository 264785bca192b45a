"""Loss functions with PyTorch's semantics and hand-derived gradients.

A loss of one prediction returns ``(loss, dinput)``; a loss of several differentiable
inputs returns ``(loss, (dfirst, dsecond, ...))``, one gradient per differentiable input
in argument order (targets, class ids and ``y = +-1`` labels get none): ``gaussian_nll``
gives (dmean, dvar), ``margin_ranking`` (dx1, dx2), ``cosine_embedding`` (dx1, dx2),
``triplet_margin`` (danchor, dpositive, dnegative), ``linear_cross_entropy``
(dinput, dweight, dbias). Targets come after the inputs, options are keyword-only.

``loss`` is a Python float for ``reduction="mean"`` or ``"sum"`` and an array of
per-element losses for ``"none"``; ``dinput`` is the gradient of the reduced loss
(for ``"none"``: of the sum of the per-element losses) with respect to the first
argument, in its dtype. ``"mean"`` divides by the number of loss elements.

Per element, with ``d = pred - target``, ``p = softmax(z)``, ``s = sigmoid(z)``::

    softmax_cross_entropy  -sum_c q_c log p_c          dz = p * sum_c q_c - q
        q = (1 - eps) * onehot(label) + eps / C   (class ids), or
        q = (1 - eps) * target + eps / C          (probability targets)
    binary_cross_entropy   -t log p - (1-t) log(1-p)   dp = (p - t) / (p (1 - p))
        (p probabilities; each log clamped at -100, the denominator at 1e-12, as torch)
    binary_cross_entropy_with_logits
                           softplus(z) - t z           dz = s - t
    mse                    d^2                         dpred = 2 d
    mae                    |d|                         dpred = sign(d)   (0 at d = 0)
    huber                  d^2 / 2 if |d| < delta      dpred = clip(d, -delta, delta)
                           else delta (|d| - delta / 2)
    smooth_l1              d^2 / (2 beta) if |d| < beta   dpred = clip(d / beta, -1, 1)
                           else |d| - beta / 2

``log p`` and ``softplus`` are evaluated without ``exp`` of a large positive
number, so logits of any finite size (e.g. +-1000) give finite results.

The names follow torch's: ``binary_cross_entropy`` takes probabilities in [0, 1] (it
refuses other values) and ``binary_cross_entropy_with_logits`` logits; the softmax
cross-entropies take logits. Keras's names (:mod:`.keras`) follow Keras:
``sparse_categorical_crossentropy`` (class ids), ``categorical_crossentropy`` (one-hot
targets) and ``binary_crossentropy`` take probabilities unless ``from_logits=True``, with
Keras's clipping to [1e-7, 1 - 1e-7]; so do the loss objects
``SparseCategoricalCrossentropy(from_logits=...)``, ``CategoricalCrossentropy`` and
``BinaryCrossentropy``. ``compile`` refuses a loss that takes logits on a model that ends
with a ``Softmax`` or ``Sigmoid`` layer (:func:`takes_logits`). ``mean_squared_error``,
``mean_absolute_error`` and ``huber_loss`` are ``mse``, ``mae`` and ``huber`` (torch's
``HuberLoss``); ``smooth_l1`` is torch's ``SmoothL1Loss``, ``huber`` divided by ``beta = delta``.

Every loss takes ``reduction``: ``"none"``, ``"sum"`` or ``"mean"`` (and ``kl_div``
``"batchmean"``). The modules: :mod:`.classification` (softmax cross-entropy with
``weight``, ``ignore_index``, probability targets and label smoothing; ``nll_loss``;
``linear_cross_entropy``), :mod:`.ctc` (``ctc_loss``), :mod:`.binary`,
:mod:`.regression`, :mod:`.probabilistic` (``kl_div``, ``gaussian_nll``, ``poisson_nll``),
:mod:`.margin` and :mod:`.multiclass_margin`. Classes are on the
last axis: torch's (N, C, ...) is (N, ..., C) here. :data:`LOSSES` names those that
``compile`` can use (one prediction and one target).
"""
from __future__ import annotations

from .._checks import describe
from ._common import REDUCTIONS
from .binary import BCE_GRAD_EPS, LOG_FLOOR, binary_cross_entropy, binary_cross_entropy_with_logits
from .classification import linear_cross_entropy, nll_loss, softmax_cross_entropy
from .ctc import ctc_loss
from .keras import (
    EPSILON,
    LOSS_CLASSES,
    BinaryCrossentropy,
    CategoricalCrossentropy,
    KerasLoss,
    SparseCategoricalCrossentropy,
    binary_crossentropy,
    categorical_crossentropy,
    sparse_categorical_crossentropy,
)
from .margin import cosine_embedding, hinge_embedding, margin_ranking, triplet_margin
from .multiclass_margin import multi_margin, multilabel_margin, multilabel_soft_margin, soft_margin
from .probabilistic import gaussian_nll, kl_div, poisson_nll
from .regression import huber, mae, mse, smooth_l1

#: Losses that take logits: a model that ends with a softmax or sigmoid is refused.
LOGIT_LOSSES = (softmax_cross_entropy, binary_cross_entropy_with_logits,
                multilabel_soft_margin)
#: Keras's names: probabilities unless ``from_logits=True``.
KERAS_LOSSES = (categorical_crossentropy, sparse_categorical_crossentropy,
                binary_crossentropy)


def takes_logits(loss) -> bool:
    """Whether ``loss`` (a function from :data:`LOSSES`, a ``functools.partial`` of one or
    a :class:`KerasLoss`) takes logits: one of :data:`LOGIT_LOSSES`, or one of
    :data:`KERAS_LOSSES` with ``from_logits=True``."""
    keywords = getattr(loss, "keywords", None) or {}
    loss = getattr(loss, "func", loss)
    return loss in LOGIT_LOSSES or (loss in KERAS_LOSSES
                                    and keywords.get("from_logits") is True)


LOSSES = {
    "cross_entropy": softmax_cross_entropy,
    "softmax_cross_entropy": softmax_cross_entropy,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
    "categorical_crossentropy": categorical_crossentropy,
    "binary_cross_entropy": binary_cross_entropy,
    "binary_cross_entropy_with_logits": binary_cross_entropy_with_logits,
    "binary_crossentropy": binary_crossentropy,
    "mse": mse,
    "mean_squared_error": mse,
    "mae": mae,
    "mean_absolute_error": mae,
    "huber": huber,
    "huber_loss": huber,
    "smooth_l1": smooth_l1,
    "smooth_l1_loss": smooth_l1,
    "nll_loss": nll_loss,
    "nll": nll_loss,
    "kl_div": kl_div,
    "kl_divergence": kl_div,
    "poisson_nll": poisson_nll,
    "poisson_nll_loss": poisson_nll,
    "hinge_embedding": hinge_embedding,
    "hinge_embedding_loss": hinge_embedding,
    "soft_margin": soft_margin,
    "soft_margin_loss": soft_margin,
    "multilabel_soft_margin": multilabel_soft_margin,
    "multilabel_soft_margin_loss": multilabel_soft_margin,
    "multi_margin": multi_margin,
    "multi_margin_loss": multi_margin,
    "multilabel_margin": multilabel_margin,
    "multilabel_margin_loss": multilabel_margin,
}

#: Losses that take log-probabilities: a model that ends with a softmax is refused (it
#: would need a log-softmax).
LOG_PROBABILITY_LOSSES = (nll_loss,)


def takes_log_probabilities(loss) -> bool:
    """Whether ``loss`` (or a ``functools.partial`` of it) takes log-probabilities."""
    return getattr(loss, "func", loss) in LOG_PROBABILITY_LOSSES


def get(name_or_callable):
    """The loss function for a name in ``LOSSES`` (case-insensitive), or a callable as is."""
    if callable(name_or_callable):
        return name_or_callable
    if not isinstance(name_or_callable, str):
        raise TypeError(
            f"get: 'name_or_callable' must be a loss name or a callable; "
            f"received {describe(name_or_callable)}"
        )
    loss = LOSSES.get(name_or_callable.lower())
    if loss is None:
        valid = ", ".join(repr(name) for name in LOSSES)
        raise ValueError(f"get: unknown loss {name_or_callable!r}; valid names are {valid}")
    return loss

