"""Adapters of ctc_loss / CTCLoss and one_hot (ops.one_hot is checked against torch
in tests/test_rearrange.py; the suite's float samples are torch's refusals too).

CTC: torch's ``ctc_loss`` gradient is the derivative with respect to the logits of
normalized log-probabilities (its kernel adds ``exp(log_probs)``), handgrad's the exact
derivative with respect to ``log_probs``; both rows therefore run through a
``log_softmax`` over the classes (the identity on torch's samples, which are
log-probabilities already), where the two derivatives are the same function. torch's
(T, N, C) is handgrad's (N, T, C).
"""

from __future__ import annotations

import numpy as np
import torch

from handgrad import losses

from .helpers import Unsupported, kernel, named, op_row
from .modules import as_functional

F = torch.nn.functional
CTC = ("log_probs", "targets", "input_lengths", "target_lengths", "blank", "reduction",
       "zero_infinity")


def _ctc_torch(log_probs, *args, **kwargs):
    return F.ctc_loss(F.log_softmax(log_probs, 2), *args, **kwargs)


def ctc(sample, x):
    v, _ = named(sample, CTC, (x,))
    if x.ndim != 3:
        raise Unsupported("unbatched input")
    lp, back = kernel("log_softmax", np.moveaxis(x, 1, 0), axis=-1)
    keywords = {k: v[k] for k in ("blank", "reduction", "zero_infinity") if k in v}
    loss, grad = losses.ctc_loss(lp, np.asarray(v["targets"]), np.asarray(v["input_lengths"]),
                                 np.asarray(v["target_lengths"]), **keywords)

    def backward(dy):
        upstream = grad * (dy[:, None, None] if np.ndim(dy) else dy)
        return [np.moveaxis(back(upstream.astype(x.dtype))[0], 0, 1)]

    return loss, backward


def one_hot(op, sample):
    """The suite draws float32/float64 samples, which torch's one_hot refuses (its row
    is int64 only): nothing to compare."""
    raise Unsupported("float ids (torch's one_hot takes int64 only)")


OPS = {"ctc_loss": op_row(ctc, _ctc_torch), "one_hot": one_hot}
MODULES = {"CTCLoss": as_functional("ctc_loss", _ctc_torch, ("blank", "zero_infinity"))}
