"""Adapters of the convolution and linear rows: torch's (N, C, *S) maps and
(C_out, C_in / groups, *K) weights moved to handgrad's (N, *S, C) and (*K, C_in / groups,
C_out) (transposed convolutions: (C_in, C_out / groups, *K) -> (*K, C_out / groups, C_in));
an unbatched (C, *S) input gets a batch axis of one."""

from __future__ import annotations

import numpy as np

from .helpers import Unsupported, batched, first, kernel, last, named_row

CONV = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
TRANSPOSED = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups",
              "dilation")


def weight_in(w):
    """torch's (B, A, *K) -> handgrad's (*K, A, B)."""
    nd = w.ndim - 2
    return w.transpose(*range(2, nd + 2), 1, 0)


def weight_out(w):
    """handgrad's (*K, A, B) -> torch's (B, A, *K)."""
    nd = w.ndim - 2
    return w.transpose(nd + 1, nd, *range(nd))


def conv(name, nd, names):
    def run(v):
        x, added = batched(v["input"], nd)
        if v.get("padding") == "same" and np.any(np.asarray(v.get("stride", 1)) > 1):
            raise Unsupported("'same' at stride > 1 (TF's, an extension)")
        keywords = {k: v[k] for k in names[3:] if k in v}
        y, back = kernel(name, last(x), weight_in(v["weight"]), v.get("bias"), **keywords)
        y = first(y)

        def backward(dy):
            dx, dw, db = back(last(dy[None] if added else dy))
            dx = first(dx)
            return {"input": dx[0] if added else dx, "weight": weight_out(dw), "bias": db}

        return (y[0] if added else y), backward

    return named_row(names, run)


def linear(v):
    """torch's weight (out, in) is handgrad's w (in, out); a 1-D input is one row."""
    w = v["weight"]
    if w.ndim != 2:
        raise Unsupported("1-d weight")
    y, back = kernel("linear", v["input"], w.T, v.get("bias"))

    def backward(dy):
        dx, dw, db = back(dy)
        return {"input": dx, "weight": dw.T, "bias": db}

    return y, backward


def bilinear(v):
    """torch's weight (O, I, J) is handgrad's W (I, J, O)."""
    w = np.moveaxis(v["weight"], 0, -1)
    y, back = kernel("bilinear", v["input1"], v["input2"], w, v.get("bias"))

    def backward(dy):
        dx1, dx2, dw, db = back(dy)
        return {"input1": dx1, "input2": dx2, "weight": np.moveaxis(dw, -1, 0), "bias": db}

    return y, backward


OPS = {f"conv{nd}d": conv(f"conv{nd}d", nd, CONV) for nd in (1, 2, 3)}
OPS.update({f"conv_transpose{nd}d": conv(f"conv_transpose{nd}d", nd, TRANSPOSED)
            for nd in (1, 2, 3)})
OPS["linear"] = named_row(("input", "weight", "bias"), linear)
OPS["bilinear"] = named_row(("input1", "input2", "weight", "bias"), bilinear)
