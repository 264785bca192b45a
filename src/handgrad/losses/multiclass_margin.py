"""Margin losses of scores per class, classes last (N, C): soft margin, multi-label soft
margin, multi-class margin and multi-label margin; each returns ``(loss, dinput)``."""

from __future__ import annotations

from .._checks import array_module, describe, float_array
from .._hyper import number
from ..ops import special
from ._common import class_weight, labels_array, nonempty, reduce, weights
from .margin import signs


def _scores(op, x):
    x = float_array(op, "input", x, ndim=2)
    nonempty(op, "input", x)
    return array_module(x), x


def soft_margin(x, y, *, reduction="mean"):
    """log(1 + exp(-y x)) (torch's ``soft_margin_loss``), x and y of one shape;
    dx = -y sigmoid(-y x)."""
    op = "soft_margin"
    x = float_array(op, "input", x)
    nonempty(op, "input", x)
    xp = array_module(x)
    y = signs(op, y, x.shape, x)
    z = -y * x
    return reduce(op, special.softplus(xp, z), -y * special.sigmoid(xp, z), reduction)


def multilabel_soft_margin(x, y, weight=None, *, reduction="mean"):
    """Multi-label soft margin (torch's ``multilabel_soft_margin_loss``): x (N, C) logits,
    y (N, C) in {0, 1}; per row mean_c w_c (softplus(x) - y x), dx = w (sigmoid(x) - y) / C.
    ``weight`` broadcasts to (N, C)."""
    op = "multilabel_soft_margin"
    xp, x = _scores(op, x)
    y = signs(op, y, x.shape, x)
    weight = weights(op, "weight", weight, x)
    values = special.softplus(xp, x) - y * x
    grad = special.sigmoid(xp, x) - y
    if weight is not None:
        values, grad = values * weight, grad * weight
    classes = x.dtype.type(x.shape[-1])
    return reduce(op, xp.sum(values, axis=-1) / classes, grad / classes, reduction)


def _class_ids(op, xp, y, x):
    y = labels_array(x, y)
    if y.dtype.kind not in "iu":
        raise TypeError(f"{op}: 'y' must be integer class ids; received {describe(y)}")
    return y


def multi_margin(x, y, *, p=1, margin=1.0, weight=None, reduction="mean"):
    """Multi-class margin (torch's ``multi_margin_loss``): x (N, C), y (N,) class ids;
    per row sum_{i != y} w_y max(0, margin - x_y + x_i)^p / C with p 1 or 2;
    dx_i = w_y p h_i^(p-1) / C where h_i > 0, and dx_y = -sum_i dx_i."""
    op = "multi_margin"
    xp, x = _scores(op, x)
    if p not in (1, 2) or isinstance(p, bool):
        raise ValueError(f"{op}: 'p' must be 1 or 2; received {p!r}")
    margin = number(op, "margin", margin)
    weight = class_weight(op, weight, x)
    y = _class_ids(op, xp, y, x)
    n, classes = x.shape
    if y.shape != (n,) or bool(xp.any((y < 0) | (y >= classes))):
        raise ValueError(f"{op}: 'y' must be class ids in [0, {classes}) of shape ({n},); "
                         f"received {describe(y)}")
    onehot = y[:, None] == xp.arange(classes)
    h = margin - xp.take_along_axis(x, y[:, None], axis=1) + x
    on = (h > 0) & ~onehot
    h = xp.where(on, h, 0).astype(x.dtype)
    values, slope = (h, on.astype(x.dtype)) if p == 1 else (h * h, 2 * h)
    scale = 1.0 if weight is None else weight[y][:, None]
    grad = scale * slope / x.dtype.type(classes)
    grad = grad - onehot * xp.sum(grad, axis=1, keepdims=True)
    return reduce(op, xp.sum(scale * values, axis=1) / x.dtype.type(classes), grad, reduction)


def multilabel_margin(x, y, *, reduction="mean"):
    """Multi-label margin (torch's ``multilabel_margin_loss``): x (N, C), y (N, C) class
    ids of each row's targets, ended by the first -1. Per row
    sum_{j listed, i not} max(0, 1 - (x_j - x_i)) / C (an id listed twice counts twice, as
    in torch); each active pair gives dx_i += 1/C, dx_j -= 1/C."""
    op = "multilabel_margin"
    xp, x = _scores(op, x)
    y = _class_ids(op, xp, y, x)
    classes = x.shape[1]
    if y.shape != x.shape:
        raise ValueError(f"{op}: 'y' must have the input's shape {tuple(x.shape)}; "
                         f"received shape {tuple(y.shape)}")
    listed = xp.cumprod(y != -1, axis=1).astype(bool)  # the ids before the first -1
    if bool(xp.any(listed & ((y < 0) | (y >= classes)))):
        raise ValueError(f"{op}: 'y' must hold class ids in [0, {classes}) ended by -1; "
                         f"received {describe(y)}")
    # each listed id counts once per listing (torch sums over the list, repeats included)
    listings = xp.sum((y[:, :, None] == xp.arange(classes)) & listed[:, :, None], axis=1)
    target = listings > 0
    h = 1 - x[:, :, None] + x[:, None, :]  # [n, j, i]: 1 - (x_j - x_i)
    on = (h > 0) & target[:, :, None] & ~target[:, None, :]
    c = x.dtype.type(classes)
    on = on.astype(x.dtype) * listings[:, :, None].astype(x.dtype)
    values = xp.sum(on * h, axis=(1, 2)).astype(x.dtype) / c
    grad = (xp.sum(on, axis=1) - xp.sum(on, axis=2)) / c
    return reduce(op, values, grad, reduction)
