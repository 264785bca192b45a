"""First-order optimizers with exactly the update rules of ``torch.optim``.

Notation: ``p`` a parameter, ``g`` its gradient, ``t`` the parameter's step count
(starting at 1), ``lr`` the learning rate and ``wd`` the weight decay.

* SGD:      ``d = g + wd p``; with momentum ``b = mu b + (1 - dampening) d``
  (``b = d`` on the first step) and ``d = d + mu b`` (Nesterov) or ``d = b``;
  ``p -= lr d``.
* Adam:     ``g += wd p``; ``m = b1 m + (1 - b1) g``; ``v = b2 v + (1 - b2) g^2``;
  (AMSGrad: ``v_max = max(v_max, v)`` is used in place of ``v``)
  ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``.
* AdamW:    Adam without ``g += wd p`` but with ``p *= 1 - lr wd`` first (decoupled).
* RMSProp:  ``g += wd p``; ``s = alpha s + (1 - alpha) g^2``; centered:
  ``a = alpha a + (1 - alpha) g`` and ``den = sqrt(s - a^2) + eps`` else
  ``den = sqrt(s) + eps``; with momentum ``b = mu b + g / den`` and
  ``p -= lr b``, else ``p -= lr g / den``.
* AdaGrad:  ``g += wd p``; ``S += g^2``; ``p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(S) + eps)``.
* Adamax:   ``g += wd p``; ``m`` as Adam; ``u = max(b2 u, |g| + eps)``;
  ``p -= lr / (1 - b1^t) m / u``.
* NAdam:    Adam's ``m, v`` with ``mu_t = b1 (1 - 0.96^(t psi) / 2)`` (``psi`` the momentum
  decay), ``den = sqrt(v / (1 - b2^t)) + eps``; ``p -= lr (1 - mu_t) / (1 - prod mu) g / den
  + lr mu_{t+1} / (1 - prod mu mu_{t+1}) m / den``.
* RAdam:    Adam's ``m, v``; ``rho_t = rho_inf - 2 t b2^t / (1 - b2^t)``; if ``rho_t > 5``
  ``p -= lr m / (1 - b1^t) * sqrt(1 - b2^t) / (sqrt(v) + eps) * r_t`` (``r_t`` the
  rectifier), else ``p -= lr m / (1 - b1^t)``.
* Adadelta: ``s = rho s + (1 - rho) g^2``; ``d = sqrt(a + eps) / sqrt(s + eps) g``;
  ``a = rho a + (1 - rho) d^2``; ``p -= lr d``.

``step(params, grads)`` takes two dicts ``name -> array`` and updates ``params`` in
place. A parameter without a gradient is skipped entirely, as ``torch.optim`` skips one
whose ``grad`` is None: no weight decay, no momentum, no state and no step count. It has
none when its gradient is ``None`` or when its name is in the ``frozen`` set of the dict
that ``model.named_parameters()`` / ``named_gradients()`` return (the arrays of layers
with ``trainable=False``), so a frozen layer never changes. State is created lazily per
parameter name, in the parameter's dtype, so float32 training stays float32. Gradient
clipping by global norm (``clipnorm``) or by value (``clipvalue``, torch's
``clip_grad_value_``) is applied to a copy of the gradients, never to the caller's arrays.

Parameter groups (:mod:`.groups`): ``AdamW([{"params": names, "weight_decay": 0.0},
{"params": other_names, "lr": 1e-4}], lr=1e-3, weight_decay=0.01)`` gives each group its
own options, as torch; a group's ``lr`` scales with ``optimizer.lr`` as torch's schedulers
scale it; ``param_groups(model, no_decay=...)`` builds the usual "no decay on biases and
norms" pair.

Keras's spellings (:mod:`handgrad._optim_args`): ``Adam(learning_rate=1e-3, beta_1=0.9,
beta_2=0.999, epsilon=1e-7)``, ``RMSprop(rho=0.9, momentum=0.0, epsilon=1e-7)``, the class
names ``RMSprop`` and ``Adagrad``; the defaults left out stay handgrad's (torch's).
"""

from __future__ import annotations

from .._hyper import build_from_config, get_instance
from .adaptive import Adadelta, Adamax, NAdam, RAdam
from .base import Optimizer, clip_grad_norm
from .classic import SGD, AdaGrad, Adam, AdamW, RMSProp
from .groups import param_groups

RMSprop, Adagrad = RMSProp, AdaGrad  # Keras's class names

__all__ = [
    "SGD",
    "AdaGrad",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "NAdam",
    "Optimizer",
    "RAdam",
    "RMSProp",
    "RMSprop",
    "clip_grad_norm",
    "from_config",
    "get",
    "param_groups",
]

_REGISTRY = {cls.__name__.lower(): cls for cls in (
    SGD, Adam, AdamW, RMSProp, AdaGrad, Adamax, NAdam, RAdam, Adadelta)}


def get(name_or_optimizer, **kwargs) -> Optimizer:
    """An optimizer from a name (case-insensitive: sgd, adam, adamw, rmsprop, adagrad,
    adamax, nadam, radam, adadelta) and keyword arguments, from a config dict, or an
    :class:`Optimizer` returned as is."""
    return get_instance("optimizers", Optimizer, _REGISTRY, name_or_optimizer, kwargs)


def from_config(config) -> Optimizer:
    """Inverse of :meth:`Optimizer.get_config`."""
    return build_from_config("optimizers.from_config", _REGISTRY, config)
