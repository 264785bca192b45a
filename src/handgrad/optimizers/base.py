"""The optimizer base class: validation, gradient clipping, parameter groups, lazy
per-parameter state and (de)serialization (see :mod:`handgrad.optimizers`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .._checks import array_module, describe, float_array, same_dtype
from .._device import check_device, device_of, move_dict, to_device, to_host
from .._hyper import number
from .._named import NamedArrays
from .._optim_args import OptimizerArguments
from .._optim_state import parse_state
from .groups import groups_state, load_groups, parse_groups

__all__ = ["Optimizer", "clip_grad_norm"]


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
    return np.array(array, copy=True) if array_module(array) is np else to_host(array)


def betas_pair(op, betas):
    """A pair ``(beta1, beta2)``, each in ``[0, 1)``."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError(f"{op}: 'betas' must be a pair (beta1, beta2); received "
                        f"{describe(betas)}")
    return tuple(number(op, f"betas[{i}]", b, low=0.0, high=1.0, high_open=True)
                 for i, b in enumerate(betas))


# --- optimizers -----------------------------------------------------------------------


class Optimizer(OptimizerArguments):
    """Base class: validation, lazy per-parameter state, clipping and (de)serialization.
    ``learning_rate`` is accepted as the name of ``lr`` (argument and attribute); setting
    an attribute an optimizer does not have raises (see :mod:`handgrad._optim_args`).

    Subclasses define ``_slots()`` (names of their state arrays), ``_counts_steps`` and
    ``_update(name, p, g, lr, h)`` which changes ``p`` in place, reading the
    hyper-parameters from ``h`` (this optimizer, or the one holding the group's options).
    """

    _config_keys: tuple[str, ...] = ()
    _counts_steps = False

    def __init__(self, lr, clipnorm, clipvalue=None):
        op = type(self).__name__
        self.lr = number(op, "lr", lr, low=0.0)
        self.clipnorm = None if clipnorm is None else number(
            op, "clipnorm", clipnorm, low=0.0, low_open=True
        )
        self.clipvalue = None if clipvalue is None else number(
            op, "clipvalue", clipvalue, low=0.0, low_open=True
        )
        if self.clipnorm is not None and self.clipvalue is not None:
            raise ValueError(f"{op}: give 'clipnorm' or 'clipvalue', not both; received "
                             f"clipnorm={clipnorm!r}, clipvalue={clipvalue!r}")
        self.iterations = 0
        self.state: dict[str, dict] = {}
        self.param_groups: list[dict] = []
        self._base_lr = self.lr

    def _set_groups(self, groups):
        """Install parameter groups (see :mod:`.groups`); each is checked by building the
        optimizer it describes."""
        op = type(self).__name__
        self.param_groups = parse_groups(op, groups, self._config_keys)
        self._base_lr = self.lr
        for index in range(len(self.param_groups)):
            self._group_optimizer(op, index)

    def _group_optimizer(self, op, index):
        """An optimizer holding group ``index``'s hyper-parameters (the others' are ours)."""
        options = {k: getattr(self, k) for k in self._config_keys}
        options.update((k, v) for k, v in self.param_groups[index].items() if k != "params")
        try:
            return type(self)(**options)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{op}: param_groups[{index}]: {error}") from None

    def _hyper_by_name(self, op, params):
        """``name -> (hyper-parameter holder, lr)`` for the names of ``params``."""
        lr = number(op, "lr", self.lr, low=0.0)
        if not self.param_groups:
            return dict.fromkeys(params, (self, lr))
        if self._base_lr > 0.0:
            scale = lr / self._base_lr
        elif lr == 0.0:
            scale = 1.0
        else:
            raise ValueError(f"{op}: cannot scale the groups' learning rates to lr={lr!r}: "
                             f"the optimizer was built with lr=0")
        out = {}
        for index, group in enumerate(self.param_groups):
            holder = self._group_optimizer(op, index)
            group_lr = holder.lr * scale if "lr" in group else lr
            out.update(dict.fromkeys(group["params"], (holder, group_lr)))
        lost = sorted(set(params) - set(out))
        if lost:
            raise ValueError(f"{op}: parameters {lost} are in no parameter group; the groups "
                             f"hold {sorted(out)}")
        return out

    def _slots(self) -> tuple[str, ...]:
        return ()

    def _all_slots(self) -> tuple[str, ...]:
        return (*self._slots(), "step") if self._counts_steps else self._slots()

    def step(self, params, grads) -> None:
        """Update the arrays of ``params`` in place from ``grads`` (same keys and shapes),
        except those without a gradient (``None``, or a frozen layer's, see above)."""
        op = f"{type(self).__name__}.step"
        self._check(op, params, grads)
        hyper = self._hyper_by_name(op, params)
        skipped = _without_gradient(params, grads)
        grads = {name: g for name, g in grads.items() if name not in skipped}
        if self.clipnorm is not None:
            _, coef = _clip_coefficient(op, grads.values(), self.clipnorm)
            if coef < 1.0:
                grads = {name: g * coef for name, g in grads.items()}
        if self.clipvalue is not None:  # torch.nn.utils.clip_grad_value_
            grads = {name: array_module(g).clip(g, -self.clipvalue, self.clipvalue)
                     for name, g in grads.items()}
        for name, p in params.items():
            if name in skipped:
                continue
            if self._counts_steps:
                steps = self.state.setdefault("step", {})
                steps[name] = steps.get(name, 0) + 1
            holder, lr = hyper[name]
            self._update(name, p, grads[name], lr, holder)
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
        elif array_module(array) is not xp:  # state loaded or left on the other device
            array = arrays[name] = to_device(array, device_of(p))
        return array

    def to(self, device) -> None:
        """Move the state arrays to ``device`` ("cpu" or "cuda"); ``Layer.to`` calls this
        for a compiled model's optimizer."""
        device = check_device(f"{type(self).__name__}.to", device)
        for slot, arrays in self.state.items():
            if slot != "step":
                move_dict(arrays, device)

    def state_dict(self) -> dict:
        """Flat copy of the state: ``"<slot>/<param name>" -> array`` plus ``"iterations"``;
        with groups also each group's options (``"param_groups/<i>/<option>"``) and the lr
        given at construction (``"param_groups/base_lr"``)."""
        out = {"iterations": np.array(self.iterations, dtype=np.int64)}
        for slot, arrays in self.state.items():
            for name, value in arrays.items():
                out[f"{slot}/{name}"] = (np.array(value, dtype=np.int64) if slot == "step"
                                         else _to_numpy(value))
        return {**out, **groups_state(self.param_groups, self._base_lr)}

    def load_state_dict(self, state, params=None) -> None:
        """Restore a :meth:`state_dict` exactly (copies the arrays). With ``params`` (dict
        name -> array, e.g. ``model.named_parameters()``) each state array must belong to
        one of them and match its shape and dtype. Nothing changes unless all is valid."""
        op = f"{type(self).__name__}.load_state_dict"
        groups, base_lr, state = load_groups(op, state, self.param_groups, self._base_lr)
        old = self.param_groups, self._base_lr
        self.param_groups, self._base_lr = groups, base_lr
        try:
            holders = [self._group_optimizer(op, i) for i in range(len(groups))]
            required = {name: h._all_slots() for h, g in zip(holders, groups)
                        for name in g["params"]}
            slots = tuple(dict.fromkeys(s for h in [self, *holders] for s in h._all_slots()))
            self.iterations, self.state = parse_state(op, state, slots, params, required)
        except (TypeError, ValueError):
            self.param_groups, self._base_lr = old
            raise

    def get_config(self) -> dict:
        """JSON-serializable hyper-parameters, ``{"name": class name, ...}`` (with groups,
        ``"params"``: the groups with lists of names)."""
        config = {"name": type(self).__name__}
        for key in self._config_keys:
            value = getattr(self, key)
            config[key] = list(value) if isinstance(value, tuple) else value
        config["clipnorm"] = self.clipnorm
        if self.clipvalue is not None:
            config["clipvalue"] = self.clipvalue
        if self.param_groups:
            config["params"] = [{k: list(v) if isinstance(v, tuple) else v
                                 for k, v in g.items()} for g in self.param_groups]
        return config

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "name")
        return f"{type(self).__name__}({args})"
