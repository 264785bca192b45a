"""Adapters of the loss rows: torch's call bound by name, renamed to handgrad's loss of
``handgrad.losses`` (which returns ``(loss, gradient(s))``); classes moved from axis 1
to the last axis where torch reads them there."""

from __future__ import annotations

import inspect

import numpy as np
import torch

from handgrad import losses

from .core import Plan
from .helpers import Sample, Unsupported, kernel, leaf_call, value


class Loss:
    """One row: handgrad's ``loss``, torch's parameter name -> handgrad's (``rename``),
    the handgrad names the returned gradients belong to (``grads``), torch names whose
    gradient is minus another's (``negate``: {name: of}), classes on torch's axis 1."""

    def __init__(self, loss, grads, rename=None, negate=None, classes=(), data=("target",),
                 rows=False, check=None, ids=False, drop=(), shared=()):
        self.loss, self.grads = loss, grads
        self.rename, self.negate = rename or {}, negate or {}
        self.classes, self.data, self.rows = classes, data, rows
        self.check, self.ids, self.drop = check, ids, drop
        self.shared = ("weight", "pos_weight", *shared)  # not per row: no batch axis added

    def __call__(self, op, sample):
        bound = inspect.signature(op.op).bind(sample.input, *sample.args, **sample.kwargs)
        sample = _as_data(sample, [v for k, v in bound.arguments.items()
                                   if k in self.data and k not in self.negate])
        leaves, call = leaf_call(op.op, sample)
        bound = inspect.signature(op.op).bind(sample.input, *sample.args, **sample.kwargs)
        names = []
        for leaf in leaves:
            names.append(next(k for k, v in bound.arguments.items() if v is leaf))
        params = dict(bound.arguments)
        if self.check is not None:
            self.check(params)
        for old in ("size_average", "reduce"):
            if params.get(old) is not None:
                raise Unsupported("size_average/reduce")
        return Plan(leaves, call, lambda *arrays: self.run(params, names, arrays))

    def _moved(self, key, a, batched_classes):
        if key in self.classes and isinstance(a, np.ndarray) and batched_classes:
            return np.moveaxis(a, 1, -1)
        return a

    def run(self, params, names, arrays):
        floats = [a for a in (*arrays, *map(value, params.values()))
                  if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
        dtype = floats[0].dtype
        given = dict(params)
        given.update(zip(names, arrays))
        first_name = next(iter(params))
        x = given[first_name]
        added = self.rows and x.ndim == 1
        if self.rows and x.ndim == 0:
            raise Unsupported("0-d input")
        if added:  # torch's unbatched (C,) input: one row
            given = {k: (value(v)[None] if isinstance(value(v), np.ndarray)
                         and k not in self.shared else v) for k, v in given.items()}
            if self.ids:  # one class id for the row, () or (1,)
                given["target"] = value(given["target"]).reshape(1)
        moved = x.ndim >= 2 and bool(self.classes)
        kwargs = {}
        for key, v in given.items():
            if key in self.drop:
                continue
            v = value(v, dtype)
            if key == "target" and np.ndim(v) != x.ndim:
                kwargs[self.rename.get(key, key)] = v  # class ids: no class axis to move
                continue
            kwargs[self.rename.get(key, key)] = self._moved(key, v, moved)
        loss, grads = self.loss(**kwargs)
        if added:
            loss = loss[0] if np.ndim(loss) else loss
            grads = tuple(g if g is None or name in self.shared else g[0] for name, g in
                          zip(self.grads, grads if isinstance(grads, tuple) else (grads,)))
        grads = grads if isinstance(grads, tuple) else (grads,)
        by_name = dict(zip(self.grads, grads))
        missing = [n for n in names if self.rename.get(n, n) not in by_name
                   and n not in self.negate]
        if missing:
            raise Unsupported(f"gradient of {missing[0]}")
        y = np.asarray(loss)

        def backward(dy):
            out = []
            for n in names:
                g = by_name.get(self.rename.get(n, self.negate.get(n, n)))
                g = -g if n in self.negate else g
                if g is None:
                    out.append(None)
                    continue
                up = np.reshape(dy, np.shape(y) + (1,) * (np.ndim(g) - np.ndim(y)))
                if self.rename.get(n, n) in self.classes and moved and np.ndim(y):
                    up = np.reshape(dy, np.shape(y) + (1,))
                g = g * up
                out.append(self._moved_back(n, g, moved))
            return out

        return y, backward, {}

    def _moved_back(self, key, g, moved):
        if key in self.classes and moved:
            return np.moveaxis(g, -1, 1)
        return g


def _as_data(sample, tensors):
    """``sample`` with ``tensors`` (targets: handgrad's losses take them as data, never
    differentiated) detached, so they are not leaves."""
    def fix(v):
        return v.detach() if any(v is t for t in tensors) else v

    return Sample(fix(sample.input), tuple(fix(v) for v in sample.args),
                   {k: fix(v) for k, v in sample.kwargs.items()})


def _gaussian(params):
    shape = params["input"].shape
    target = params["target"]
    if target.shape != shape:
        try:
            params["target"] = target.expand(shape)  # data: its broadcast is its value
        except RuntimeError:
            pass  # not broadcastable to the input: handgrad must refuse it
    var = params["var"].shape
    if var not in (shape, shape[:-1], shape[:-1] + (1,)):
        raise Unsupported("broadcast var")


class _GaussianNLL(Loss):
    """``reduction="none"`` with one variance per row: handgrad's dvar comes summed over
    the row, which an upstream ``dy`` per entry cannot weight; the variance is given
    broadcast to the mean's shape and its gradient summed back."""

    def run(self, params, names, arrays):
        shape = tuple(params["input"].shape)
        if params.get("reduction", "mean") != "none" or params["var"].shape == shape \
                or "var" not in names:
            return super().run(params, names, arrays)
        i = names.index("var")
        var = arrays[i].reshape(shape[:-1] + (1,))
        wide = [*arrays[:i], np.ascontiguousarray(np.broadcast_to(var, shape)), *arrays[i + 1:]]
        y, backward, extras = super().run(params, names, wide)

        def summed(dy):
            grads = backward(dy)
            grads[i] = grads[i].sum(axis=-1).reshape(arrays[i].shape)
            return grads

        return y, summed, extras


def _linear_ce(params):
    """Probabilities for several class axes, (N, C, d1, ..., dK) in torch, are
    (N, d1, ..., dK, C) in handgrad (class ids have no class axis to move)."""
    target, weight = params["target"], params["linear_weight"]
    if weight.ndim > 2 and target.is_floating_point() and target.ndim == weight.ndim:
        params["target"] = target.movedim(1, -1)


class _LinearCrossEntropy(Loss):
    """``reduction="none"``: handgrad's linear_cross_entropy gives the items' losses and
    the weight gradients summed over them, which an upstream ``dy`` per item cannot
    weight; the gradients are then those of its two stages, ``ops.linear`` (the weight
    (C, d1, ..., dK, D) read as (C d1...dK, D)) and ``losses.softmax_cross_entropy``
    (classes moved last), with ``dy`` between them."""

    def run(self, params, names, arrays):
        if params.get("reduction", "mean") != "none":
            return super().run(params, names, arrays)
        y = super().run(params, names, arrays)[0]
        v = dict(params, **dict(zip(names, arrays)))
        v = {k: value(a, arrays[0].dtype) for k, a in v.items()}
        unbatched = v["input"].ndim == 1
        if unbatched:  # one row: a class id () or probabilities (C,) for it
            v["input"], v["target"] = v["input"][None], np.asarray(v["target"])[None]
        shape = v["linear_weight"].shape
        bias = v.get("linear_bias")
        z, back = kernel("linear", v["input"], v["linear_weight"].reshape(-1, shape[-1]).T,
                         None if bias is None else bias.reshape(-1))
        z = np.moveaxis(z.reshape(z.shape[:1] + shape[:-1]), 1, -1)
        keywords = {k: v[k] for k in ("weight", "ignore_index", "label_smoothing")
                    if v.get(k) is not None}
        _, dz = losses.softmax_cross_entropy(z, v["target"], reduction="none", **keywords)

        def backward(dy):
            upstream = np.moveaxis(dz * np.reshape(dy, np.shape(dz)[:-1])[..., None], -1, 1)
            dx, dw, db = back(upstream.reshape(len(upstream), -1))
            got = {"input": dx[0] if unbatched else dx, "linear_weight": dw.T.reshape(shape),
                   "linear_bias": None if db is None else db.reshape(shape[:-1])}
            return [got.get(n) for n in names]

        return y, backward, {}


def _triplet_distance(params):
    """The default distance (or nn.PairwiseDistance with its defaults) is the triplet
    margin loss's own p = 2 distance."""
    distance = params.pop("distance_function", None)
    default = torch.nn.PairwiseDistance()
    if distance is not None and not (isinstance(distance, torch.nn.PairwiseDistance) and
                                     (distance.norm, distance.eps, distance.keepdim) ==
                                     (default.norm, default.eps, default.keepdim)):
        raise Unsupported("distance function")


def _symmetric(loss, **rename):
    return Loss(loss, ("pred",), {"input": "pred", **rename}, {"target": "pred"})


_LCE = _LinearCrossEntropy(losses.linear_cross_entropy, ("inputs", "linear_weight", "linear_bias"),
           {"input": "inputs", "target": "labels"}, rows=True, check=_linear_ce,
           drop=("options",), shared=("linear_weight", "linear_bias"))
OPS = {
    "mse_loss": _symmetric(losses.mse),
    "l1_loss": _symmetric(losses.mae),
    "huber_loss": _symmetric(losses.huber),
    "smooth_l1_loss": _symmetric(losses.smooth_l1),
    "binary_cross_entropy": Loss(losses.binary_cross_entropy, ("probabilities",),
                                 {"input": "probabilities", "target": "targets"}),
    "binary_cross_entropy_with_logits": Loss(
        losses.binary_cross_entropy_with_logits, ("logits",),
        {"input": "logits", "target": "targets"}),
    "cosine_embedding_loss": Loss(losses.cosine_embedding, ("x1", "x2"),
                                  {"input1": "x1", "input2": "x2", "target": "y"}, rows=True),
    "hinge_embedding_loss": Loss(losses.hinge_embedding, ("x",),
                                 {"input": "x", "target": "y"}),
    "kl_div": Loss(losses.kl_div, ("input_log_probs",), {"input": "input_log_probs"}),
    "margin_ranking_loss": Loss(losses.margin_ranking, ("x1", "x2"),
                                {"input1": "x1", "input2": "x2", "target": "y"}),
    "multi_margin_loss": Loss(losses.multi_margin, ("x",), {"input": "x", "target": "y"},
                              rows=True, ids=True),
    "multilabel_margin_loss": Loss(losses.multilabel_margin, ("x",),
                                   {"input": "x", "target": "y"}, rows=True),
    "multilabel_soft_margin_loss": Loss(losses.multilabel_soft_margin, ("x",),
                                        {"input": "x", "target": "y"}, rows=True),
    "soft_margin_loss": Loss(losses.soft_margin, ("x",), {"input": "x", "target": "y"}),
    "poisson_nll_loss": Loss(losses.poisson_nll, ("input",)),
    "gaussian_nll_loss": _GaussianNLL(losses.gaussian_nll, ("mean", "var"), {"input": "mean"},
                              check=_gaussian),
    "triplet_margin_loss": Loss(losses.triplet_margin, ("anchor", "positive", "negative"),
                                rows=True),
    "triplet_margin_with_distance_loss": Loss(
        losses.triplet_margin, ("anchor", "positive", "negative"), rows=True,
        check=_triplet_distance, data=()),
    "linear_cross_entropy": _LCE,
    "linear_cross_entropy.chunked": _LCE,
    "linear_cross_entropy.chunked_none": _LCE,
    "nll_loss": Loss(losses.nll_loss, ("log_probs",),
                     {"input": "log_probs", "target": "labels"}, classes=("input",),
                     rows=True),
    "cross_entropy": Loss(losses.softmax_cross_entropy, ("logits",),
                          {"input": "logits", "target": "labels"},
                          classes=("input", "target"), rows=True),
}
__all__ = ["OPS", "torch"]
