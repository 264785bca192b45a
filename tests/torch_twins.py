"""Run an op case through ``torch.nn.functional`` after moving the channel axis.

Padding that torch cannot express natively (``"same"`` at stride > 1, per-side
pairs) is applied explicitly with ``F.pad`` (convolution) or by cropping
(transposed convolution); the pairs are computed here independently of
handgrad, from TensorFlow's and PyTorch's published formulas.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


def to_torch(a, requires_grad=True):
    """Channels-last array -> channels-first leaf tensor."""
    t = torch.tensor(np.ascontiguousarray(np.moveaxis(a, -1, 1)))
    return t.requires_grad_(requires_grad)


def from_torch(t):
    return np.moveaxis(t.detach().numpy(), 1, -1)


def weight_to_torch(w):
    """(*K, A, B) -> (B, A, *K): conv (C_out, C_in/g, *K), conv-transpose (C_in, C_out/g, *K)."""
    nd = w.ndim - 2
    return torch.tensor(np.ascontiguousarray(w.transpose(nd + 1, nd, *range(nd))),
                        requires_grad=True)


def weight_from_torch(t):
    nd = t.ndim - 2
    return t.detach().numpy().transpose(*range(2, nd + 2), 1, 0)


def _tuple(value, nd):
    return (value,) * nd if isinstance(value, int) else tuple(value)


def padding_pairs(padding, nd, spatial, kernel, stride, dilation):
    """Independent (before, after) pairs for every padding form."""
    if padding == "valid":
        return [(0, 0)] * nd
    if padding == "causal":
        return [((kernel[0] - 1) * dilation[0], 0)]
    if padding == "same":
        pairs = []
        for size, k, s, d in zip(spatial, kernel, stride, dilation):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            pairs.append((total // 2, total - total // 2))
        return pairs
    if isinstance(padding, int):
        return [(padding, padding)] * nd
    return [(p, p) if isinstance(p, int) else tuple(p) for p in padding]


def _native(padding):
    return isinstance(padding, int) or (
        isinstance(padding, tuple) and all(isinstance(p, int) for p in padding)
    )


def _flat_pad(pairs):
    """F.pad wants the last axis first."""
    return [v for pair in reversed(pairs) for v in pair]


def _crop(t, pairs):
    index = [slice(None), slice(None)]
    index += [slice(before, t.shape[2 + i] - after) for i, (before, after) in enumerate(pairs)]
    return t[tuple(index)]


def _conv(case, tx, tw, tb, nd):
    kw = dict(case.kwargs)
    stride, dilation = _tuple(kw.get("stride", 1), nd), _tuple(kw.get("dilation", 1), nd)
    padding, groups = kw.get("padding", 0), kw.get("groups", 1)
    fn = getattr(F, f"conv{nd}d")
    if _native(padding):
        return fn(tx, tw, tb, stride=stride, padding=padding, dilation=dilation, groups=groups)
    kernel = tuple(tw.shape[2:])
    pairs = padding_pairs(padding, nd, tuple(tx.shape[2:]), kernel, stride, dilation)
    return fn(F.pad(tx, _flat_pad(pairs)), tw, tb, stride=stride, dilation=dilation,
              groups=groups)


def _conv_transpose(case, tx, tw, tb, nd):
    kw = dict(case.kwargs)
    stride, dilation = _tuple(kw.get("stride", 1), nd), _tuple(kw.get("dilation", 1), nd)
    padding, groups = kw.get("padding", 0), kw.get("groups", 1)
    output_padding = _tuple(kw.get("output_padding", 0), nd)
    fn = getattr(F, f"conv_transpose{nd}d")
    common = dict(stride=stride, output_padding=output_padding, dilation=dilation,
                  groups=groups)
    if _native(padding):
        return fn(tx, tw, tb, padding=padding, **common)
    pairs = padding_pairs(padding, nd, None, None, None, None)
    return _crop(fn(tx, tw, tb, **common), pairs)


def _pool(case, tx, nd):
    kw = dict(case.kwargs)
    kind = case.op.split("_")[0]
    return getattr(F, f"{kind}_pool{nd}d")(tx, **kw)


def _global(case, tx, nd):
    keepdims = case.kwargs.get("keepdims", False)
    if case.op == "global_avg_pool":
        y = tx.mean(dim=tuple(range(2, 2 + nd)), keepdim=True)
    else:
        y = getattr(F, f"adaptive_max_pool{nd}d")(tx, 1)
    return y if keepdims else y.reshape(y.shape[0], y.shape[1])


def torch_supports(case):
    """Whether torch can express the case (its pooling has only symmetric int padding)."""
    return case.family != "pool" or _native(case.kwargs.get("padding", 0))


def torch_run(case, arrays, dy):
    """(y, grads) from torch, in handgrad's layout; grads in the op's input order."""
    x = arrays[0]
    nd = x.ndim - 2
    tx = to_torch(x)
    leaves = [tx]
    if case.family in ("conv", "conv_transpose"):
        tw = weight_to_torch(arrays[1])
        tb = None if arrays[2] is None else torch.tensor(arrays[2], requires_grad=True)
        leaves += [tw, tb]
        run = _conv if case.family == "conv" else _conv_transpose
        ty = run(case, tx, tw, tb, nd)
    elif case.family == "pool":
        ty = _pool(case, tx, nd)
    else:
        ty = _global(case, tx, nd)
    if ty.numel() == 0:
        raise RuntimeError("empty output")
    keep_channels_last = ty.ndim > 2
    t_dy = to_torch(dy, False) if keep_channels_last else torch.tensor(dy)
    ty.backward(t_dy)
    y = from_torch(ty) if keep_channels_last else ty.detach().numpy()
    grads = [from_torch(tx.grad)]
    if len(leaves) > 1:
        grads.append(weight_from_torch(leaves[1].grad))
        grads.append(None if leaves[2] is None else leaves[2].grad.numpy())
    return y, grads
