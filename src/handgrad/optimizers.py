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

``step(params, grads)`` takes two dicts ``name -> array`` and updates ``params`` in
place. A parameter without a gradient is skipped entirely, as ``torch.optim`` skips one
whose ``grad`` is None: no weight decay, no momentum, no state and no step count. It has
none when its gradient is ``None`` or when its name is in the ``frozen`` set of the dict
that ``model.named_parameters()`` / ``named_gradients()`` return (the arrays of layers
with ``trainable=False``), so a frozen layer never changes. State is created lazily per
parameter name, in the parameter's dtype, so float32 training stays float32. Gradient
clipping by global norm (``clipnorm``) is applied to a scaled copy of the gradients, never
to the caller's arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ._checks import array_module, describe, float_array, same_dtype
from ._hyper import build_from_config, flag, get_instance, number
from ._named import NamedArrays
from ._optim_args import OptimizerArguments
from ._optim_state import parse_state

__all__ = [
    "SGD", "AdaGrad", "Adam", "AdamW", "Optimizer", "RMSProp",
    "clip_grad_norm", "from_config", "get",
]


# --- gradient clipping ----------------------------------------------------------------


def _clip_coefficient(op, grads, max_norm):
    """Global L2 norm of the gradient arrays and torch's ``min(max_norm / (norm + 1e-6), 1)``."""
    max_norm = number(op, "max_norm", max_norm, low=0.0, low_open=True)
    squares = 0.0
    for g in grads:
        norm = float(array_module(g).linalg.norm(g.ravel()))
        squares += norm * norm
    total = math.sqrt(squares)
    return total, min(max_norm / (total + 1e-6), 1.0)


def clip_grad_norm(grads, max_norm) -> float:
    """Scale all arrays of ``grads`` (dict name -> array) in place so that their global L2
    norm is at most ``max_norm``, as ``torch.nn.utils.clip_grad_norm_``:
    ``g *= min(max_norm / (||g||_2 + 1e-6), 1)``. Returns the norm before clipping."""
    if not isinstance(grads, Mapping):
        raise TypeError(f"clip_grad_norm: 'grads' must be a dict; received {describe(grads)}")
    for name, g in grads.items():
        _array("clip_grad_norm", f"grads[{name!r}]", g)
    total, coef = _clip_coefficient("clip_grad_norm", grads.values(), max_norm)
    if coef < 1.0:
        for g in grads.values():
            g *= coef
    return total


def _array(op, name, value):
    """A float32/float64 array (not a list: it may be updated in place)."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise TypeError(f"{op}: '{name}' must be an array; received {describe(value)}")
    return float_array(op, name, value)


def _without_gradient(params, grads):
    """The names that have no gradient: ``None`` in ``grads``, or frozen in either dict."""
    frozen = {name for names in (params, grads) if isinstance(names, NamedArrays)
              for name in names.frozen}
    return frozen | {name for name, g in grads.items() if g is None}


def _to_numpy(array):
    """A NumPy copy of a NumPy or CuPy array."""
    return np.array(array, copy=True) if array_module(array) is np else array.get()


# --- optimizers -----------------------------------------------------------------------


class Optimizer(OptimizerArguments):
    """Base class: validation, lazy per-parameter state, clipping and (de)serialization.
    ``learning_rate`` is accepted as the name of ``lr`` (argument and attribute); setting
    an attribute an optimizer does not have raises (see :mod:`handgrad._optim_args`).

    Subclasses define ``_slots()`` (names of their state arrays), ``_counts_steps`` and
    ``_update(name, p, g, lr)`` which changes ``p`` in place.
    """

    _config_keys: tuple[str, ...] = ()
    _counts_steps = False

    def __init__(self, lr, clipnorm):
        op = type(self).__name__
        self.lr = number(op, "lr", lr, low=0.0)
        self.clipnorm = None if clipnorm is None else number(
            op, "clipnorm", clipnorm, low=0.0, low_open=True
        )
        self.iterations = 0
        self.state: dict[str, dict] = {}

    def _slots(self) -> tuple[str, ...]:
        return ()

    def _all_slots(self) -> tuple[str, ...]:
        return (*self._slots(), "step") if self._counts_steps else self._slots()

    def step(self, params, grads) -> None:
        """Update the arrays of ``params`` in place from ``grads`` (same keys and shapes),
        except those without a gradient (``None``, or a frozen layer's, see above)."""
        op = f"{type(self).__name__}.step"
        self._check(op, params, grads)
        lr = number(op, "lr", self.lr, low=0.0)
        skipped = _without_gradient(params, grads)
        grads = {name: g for name, g in grads.items() if name not in skipped}
        if self.clipnorm is not None:
            _, coef = _clip_coefficient(op, grads.values(), self.clipnorm)
            if coef < 1.0:
                grads = {name: g * coef for name, g in grads.items()}
        for name, p in params.items():
            if name in skipped:
                continue
            if self._counts_steps:
                steps = self.state.setdefault("step", {})
                steps[name] = steps.get(name, 0) + 1
            self._update(name, p, grads[name], lr)
        self.iterations += 1

    def _check(self, op, params, grads):
        """Validate the dicts and the existing state before any array is changed."""
        for arg, value in (("params", params), ("grads", grads)):
            if not isinstance(value, Mapping):
                raise TypeError(f"{op}: '{arg}' must be a dict name -> array; received "
                                f"{describe(value)}")
        if params.keys() != grads.keys():
            missing = sorted(set(params) - set(grads))
            extra = sorted(set(grads) - set(params))
            raise ValueError(f"{op}: 'grads' keys differ from 'params' keys: missing "
                             f"{missing}, unexpected {extra}")
        for name, p in params.items():
            _array(op, f"params[{name!r}]", p)
            if grads[name] is None:  # no gradient: the parameter is left alone
                continue
            _array(op, f"grads[{name!r}]", grads[name])
            same_dtype(op, **{f"params[{name!r}]": p, f"grads[{name!r}]": grads[name]})
        bad = [f"{n}: {tuple(p.shape)} vs {tuple(grads[n].shape)}" for n, p in params.items()
               if grads[n] is not None and p.shape != grads[n].shape]
        if bad:
            raise ValueError(f"{op}: 'grads' shapes differ from 'params' shapes: {bad}")
        for slot, arrays in self.state.items():
            if slot == "step":
                continue
            for name in set(arrays) & set(params):
                state, p = arrays[name], params[name]
                if state.shape != p.shape or state.dtype != p.dtype:
                    raise ValueError(
                        f"{op}: state {slot!r} of {name!r} has shape {tuple(state.shape)} and "
                        f"dtype {state.dtype}, but the parameter has shape {tuple(p.shape)} "
                        f"and dtype {p.dtype}"
                    )

    def _slot(self, slot, name, p, fill=0.0):
        """State array ``slot`` of parameter ``name``, created full of ``fill`` on first use."""
        arrays = self.state.setdefault(slot, {})
        xp = array_module(p)
        array = arrays.get(name)
        if array is None:
            array = arrays[name] = xp.full_like(p, fill)
        elif array_module(array) is not xp:  # state loaded as NumPy, parameters on the GPU
            array = arrays[name] = xp.asarray(array)
        return array

    def state_dict(self) -> dict:
        """Flat copy of the state: ``"<slot>/<param name>" -> array`` plus ``"iterations"``."""
        out = {"iterations": np.array(self.iterations, dtype=np.int64)}
        for slot, arrays in self.state.items():
            for name, value in arrays.items():
                out[f"{slot}/{name}"] = (np.array(value, dtype=np.int64) if slot == "step"
                                         else _to_numpy(value))
        return out

    def load_state_dict(self, state, params=None) -> None:
        """Restore a :meth:`state_dict` exactly (copies the arrays). With ``params`` (dict
        name -> array, e.g. ``model.named_parameters()``) each state array must belong to
        one of them and match its shape and dtype. Nothing changes unless all is valid."""
        op = f"{type(self).__name__}.load_state_dict"
        self.iterations, self.state = parse_state(op, state, self._all_slots(), params)

    def get_config(self) -> dict:
        """JSON-serializable hyper-parameters, ``{"name": class name, ...}``."""
        config = {"name": type(self).__name__}
        for key in self._config_keys:
            value = getattr(self, key)
            config[key] = list(value) if isinstance(value, tuple) else value
        config["clipnorm"] = self.clipnorm
        return config

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "name")
        return f"{type(self).__name__}({args})"


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum, as ``torch.optim.SGD``."""

    _config_keys = ("lr", "momentum", "nesterov", "weight_decay", "dampening")

    def __init__(self, lr=0.01, momentum=0.0, nesterov=False, weight_decay=0.0, dampening=0.0,
                 clipnorm=None):
        super().__init__(lr, clipnorm)
        self.momentum = number("SGD", "momentum", momentum, low=0.0)
        self.nesterov = flag("SGD", "nesterov", nesterov)
        self.weight_decay = number("SGD", "weight_decay", weight_decay, low=0.0)
        self.dampening = number("SGD", "dampening", dampening, low=0.0, high=1.0)
        if self.nesterov and (self.momentum == 0.0 or self.dampening != 0.0):
            raise ValueError(f"SGD: nesterov=True needs momentum > 0 and dampening == 0; "
                             f"received momentum={momentum!r}, dampening={dampening!r}")

    def _slots(self):
        return ("momentum_buffer",) if self.momentum else ()

    def _update(self, name, p, g, lr):
        d = g + self.weight_decay * p if self.weight_decay else g
        if self.momentum:
            if name in self.state.get("momentum_buffer", {}):
                buf = self._slot("momentum_buffer", name, p)
                buf *= self.momentum
                buf += (1.0 - self.dampening) * d
            else:  # the first step copies d, without dampening
                buf = self.state.setdefault("momentum_buffer", {})[name] = d.copy()
            d = d + self.momentum * buf if self.nesterov else buf
        p -= lr * d


class Adam(Optimizer):
    """Adam (or AMSGrad) with L2 weight decay added to the gradient, as ``torch.optim.Adam``."""

    _config_keys = ("lr", "betas", "eps", "weight_decay", "amsgrad")
    _counts_steps = True
    _decoupled = False

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 clipnorm=None):
        super().__init__(lr, clipnorm)
        op = type(self).__name__
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"{op}: 'betas' must be a pair (beta1, beta2); received "
                            f"{describe(betas)}")
        self.betas = tuple(number(op, f"betas[{i}]", b, low=0.0, high=1.0, high_open=True)
                           for i, b in enumerate(betas))
        self.eps = number(op, "eps", eps, low=0.0, low_open=True)
        self.weight_decay = number(op, "weight_decay", weight_decay, low=0.0)
        self.amsgrad = flag(op, "amsgrad", amsgrad)

    def _slots(self):
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if self.amsgrad else ())

    def _update(self, name, p, g, lr):
        xp = array_module(p)
        beta1, beta2 = self.betas
        t = self.state["step"][name]
        if self.weight_decay and self._decoupled:
            p *= 1.0 - lr * self.weight_decay
        elif self.weight_decay:
            g = g + self.weight_decay * p
        m = self._slot("exp_avg", name, p)
        v = self._slot("exp_avg_sq", name, p)
        m += (1.0 - beta1) * (g - m)
        v *= beta2
        v += (1.0 - beta2) * (g * g)
        if self.amsgrad:
            v_max = self._slot("max_exp_avg_sq", name, p)
            xp.maximum(v_max, v, out=v_max)
            v = v_max
        denom = xp.sqrt(v)
        denom /= math.sqrt(1.0 - beta2**t)
        denom += self.eps
        p -= (lr / (1.0 - beta1**t)) * (m / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay ``p *= 1 - lr wd``, as ``torch.optim.AdamW``."""

    _decoupled = True

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False,
                 clipnorm=None):
        super().__init__(lr, betas, eps, weight_decay, amsgrad, clipnorm)


class RMSProp(Optimizer):
    """RMSProp, optionally centered and with momentum, as ``torch.optim.RMSprop``."""

    _config_keys = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")

    def __init__(self, lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, clipnorm=None):
        super().__init__(lr, clipnorm)
        self.alpha = number("RMSProp", "alpha", alpha, low=0.0, high=1.0)
        self.eps = number("RMSProp", "eps", eps, low=0.0, low_open=True)
        self.weight_decay = number("RMSProp", "weight_decay", weight_decay, low=0.0)
        self.momentum = number("RMSProp", "momentum", momentum, low=0.0)
        self.centered = flag("RMSProp", "centered", centered)

    def _slots(self):
        return (("square_avg",) + (("grad_avg",) if self.centered else ())
                + (("momentum_buffer",) if self.momentum else ()))

    def _update(self, name, p, g, lr):
        xp = array_module(p)
        if self.weight_decay:
            g = g + self.weight_decay * p
        square_avg = self._slot("square_avg", name, p)
        square_avg *= self.alpha
        square_avg += (1.0 - self.alpha) * (g * g)
        if self.centered:
            grad_avg = self._slot("grad_avg", name, p)
            grad_avg += (1.0 - self.alpha) * (g - grad_avg)
            denom = xp.sqrt(square_avg - grad_avg * grad_avg)
        else:
            denom = xp.sqrt(square_avg)
        denom += self.eps
        if self.momentum:
            buf = self._slot("momentum_buffer", name, p)
            buf *= self.momentum
            buf += g / denom
            p -= lr * buf
        else:
            p -= lr * (g / denom)


class AdaGrad(Optimizer):
    """AdaGrad with learning-rate decay, as ``torch.optim.Adagrad``."""

    _config_keys = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")
    _counts_steps = True

    def __init__(self, lr=0.01, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10, clipnorm=None):
        super().__init__(lr, clipnorm)
        self.lr_decay = number("AdaGrad", "lr_decay", lr_decay, low=0.0)
        self.weight_decay = number("AdaGrad", "weight_decay", weight_decay, low=0.0)
        self.initial_accumulator_value = number(
            "AdaGrad", "initial_accumulator_value", initial_accumulator_value, low=0.0
        )
        self.eps = number("AdaGrad", "eps", eps, low=0.0, low_open=True)

    def _slots(self):
        return ("sum",)

    def _update(self, name, p, g, lr):
        xp = array_module(p)
        if self.weight_decay:
            g = g + self.weight_decay * p
        t = self.state["step"][name]
        total = self._slot("sum", name, p, fill=self.initial_accumulator_value)
        total += g * g
        denom = xp.sqrt(total)
        denom += self.eps
        p -= (lr / (1.0 + (t - 1) * self.lr_decay)) * (g / denom)


_REGISTRY = {cls.__name__.lower(): cls for cls in (SGD, Adam, AdamW, RMSProp, AdaGrad)}


def get(name_or_optimizer, **kwargs) -> Optimizer:
    """An optimizer from a name (case-insensitive: sgd, adam, adamw, rmsprop, adagrad) and
    keyword arguments, from a config dict, or an :class:`Optimizer` returned as is."""
    return get_instance("optimizers", Optimizer, _REGISTRY, name_or_optimizer, kwargs)


def from_config(config) -> Optimizer:
    """Inverse of :meth:`Optimizer.get_config`."""
    return build_from_config("optimizers.from_config", _REGISTRY, config)
