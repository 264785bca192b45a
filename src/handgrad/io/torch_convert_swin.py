"""convert_torch handlers of torchvision's Swin Transformer functions.

torchvision wraps ``shifted_window_attention``, ``_get_relative_position_bias`` and
``_patch_merging_pad`` with ``torch.fx.wrap``, so a trace keeps each as one
``call_function`` node (tracing into them is not possible: they branch on shapes). The
handlers here build each call from handgrad layers, on (N, H, W, C) values held as torch
holds them (handgrad's channels-last maps)::

    shifted_window_attention   ZeroPad2D (to whole windows), Roll (the cyclic shift),
                               Reshape/Permute/Reshape (N, nW, T, C) windows, Dense qkv,
                               Cropping3D (q, k, v), Rescaling (q d^-1/2), MatMul (q k^T),
                               Add (the relative position bias, a Parameter gathered from
                               the table by a constant index; the shifted windows' mask, a
                               constant Parameter), Softmax, MatMul (by v), Dense proj,
                               the windows back, Roll back, Cropping2D (the padding off)
    _patch_merging_pad         ZeroPad2D (even H, W), Reshape/Permute/Reshape to
                               (N, H/2, W/2, 4C) in torch's x0, x1, x2, x3 order

Registered into :data:`.torch_convert_functions.FUNCTIONS`. The Dense layers take the
names of torch's ``attn.qkv`` and ``attn.proj`` modules; the relative position bias
(``_get_relative_position_bias(table, relative_position_index, window)``, a gather of
the table that :mod:`.torch_convert_attention` follows as a view) is a Parameter named
after the table, so ``from_torch`` loads them and gradients are found by torch's names.
Swin V2 (cosine attention, a continuous position bias) is refused.
"""

from __future__ import annotations

import numpy as np

from .. import layers as L
from .torch_convert_attention import Attr, parameter
from .torch_convert_functions import handles
from .torch_convert_ops import Value

_SWIN = "torchvision.models.swin_transformer"


def _torchvision(handler):
    """``handler`` for torchvision's Swin function of that name (another is refused)."""
    def checked(conv, node, args, kwargs):
        if getattr(node.target, "__module__", "") != _SWIN:
            conv.refuse(node, f"only torchvision's Swin function {node.target.__name__} is "
                              f"converted")
        return handler(conv, node)
    return checked


def _get_attr(conv, node, arg, what):
    """The qualified name of the parameter that ``arg`` (a get_attr node) reads."""
    if getattr(arg, "op", None) != "get_attr":
        conv.refuse(node, f"its {what} is not a module's parameter")
    return arg.target


def _linear(conv, node, weight, bias, what):
    """A Dense named after the torch Linear whose ``weight`` and ``bias`` the call reads."""
    import torch
    target = _get_attr(conv, node, weight, f"{what} weight")
    path, attr = target.rpartition(".")[::2]
    module = conv.module.get_submodule(path) if path else None
    if attr != "weight" or not isinstance(module, torch.nn.Linear):
        conv.refuse(node, f"its {what} weight {target!r} is not an nn.Linear's weight")
    if bias is not None and _get_attr(conv, node, bias, f"{what} bias") != f"{path}.bias":
        conv.refuse(node, f"its {what} bias is not the bias of {path!r}")
    layer = L.Dense(module.out_features, bias=bias is not None, name=conv.name(path))
    conv.called[path] = (layer, "plain")
    return layer


def _apply(conv, node, layer, ins, suffix):
    """``layer`` (named ``<node>_<suffix>`` unless named) on the symbolic tensor(s)
    ``ins``."""
    if layer.name is None:
        layer.name = conv.name(f"{node.name}_{suffix}")
    return layer(ins)


def _chain(conv, node, tensor, steps):
    """``steps`` [(suffix, layer)] applied in turn to the symbolic ``tensor``."""
    for suffix, layer in steps:
        tensor = _apply(conv, node, layer, tensor, suffix)
    return tensor


def _windows(n_h, n_w, a, b, channels):
    """(N, nh*a, nw*b, C) -> (N, nh*nw, a*b, C): the layers partitioning the windows."""
    return [("part", L.Reshape((n_h, a, n_w, b, channels))),
            ("part_perm", L.Permute((1, 3, 2, 4, 5))),
            ("windows", L.Reshape((n_h * n_w, a * b, channels)))]


def _unwindows(n_h, n_w, a, b, channels):
    """The inverse of :func:`_windows`."""
    return [("merge", L.Reshape((n_h, n_w, a, b, channels))),
            ("merge_perm", L.Permute((1, 3, 2, 4, 5))),
            ("unwindows", L.Reshape((n_h * a, n_w * b, channels)))]


def shift_mask(pad_h, pad_w, window, shift):
    """The additive mask (nW, T, T) of shifted windows: -100 between tokens that came from
    different regions of the rolled map, 0 within one (torchvision's construction)."""
    regions = np.zeros((pad_h, pad_w))
    count = 0
    for h in ((0, -window[0]), (-window[0], -shift[0]), (-shift[0], None)):
        for w in ((0, -window[1]), (-window[1], -shift[1]), (-shift[1], None)):
            regions[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    regions = regions.reshape(pad_h // window[0], window[0], pad_w // window[1], window[1])
    regions = regions.transpose(0, 2, 1, 3).reshape(-1, window[0] * window[1])
    return np.where(regions[:, None, :] != regions[:, :, None], -100.0, 0.0)


@handles("shifted_window_attention", parameters=True)
@_torchvision
def shifted_window_attention(conv, node):
    """torchvision's ``shifted_window_attention`` (see the module docstring)."""
    args = dict(zip(("input", "qkv_weight", "proj_weight", "relative_position_bias",
                     "window_size", "num_heads", "shift_size", "attention_dropout", "dropout",
                     "qkv_bias", "proj_bias", "logit_scale", "training"), node.args))
    args.update(node.kwargs)
    if args.get("logit_scale") is not None:
        conv.refuse(node, "Swin V2's cosine attention (logit_scale) is not converted")
    x = conv.arg(node, args["input"])
    if not isinstance(x, Value) or len(x.shape) != 4:
        conv.refuse(node, "its input must be one (N, H, W, C) tensor")
    x = conv.as_layout(x, "plain", node)
    window, heads = list(args["window_size"]), int(args["num_heads"])
    shift = list(args.get("shift_size", [0, 0]))
    _, height, width, channels = x.shape
    pad_b, pad_r = (-height) % window[0], (-width) % window[1]
    pad_h, pad_w = height + pad_b, width + pad_r
    shift = [0 if window[i] >= size else shift[i] for i, size in enumerate((pad_h, pad_w))]
    n_h, n_w, tokens, depth = pad_h // window[0], pad_w // window[1], \
        window[0] * window[1], channels // heads
    qkv = _linear(conv, node, args["qkv_weight"], args.get("qkv_bias"), "qkv")
    proj = _linear(conv, node, args["proj_weight"], args.get("proj_bias"), "proj")
    bias = conv.arg(node, args["relative_position_bias"])
    if not isinstance(bias, Attr):
        conv.refuse(node, "its relative position bias is not a gather of a parameter")
    steps = []
    if pad_b or pad_r:
        steps.append(("pad", L.ZeroPad2D((0, pad_r, 0, pad_b))))
    if any(shift):
        steps.append(("shift", L.Roll((-shift[0], -shift[1]), (1, 2))))
    steps += _windows(n_h, n_w, *window, channels)
    steps += [("qkv", qkv), ("heads", L.Reshape((n_h * n_w, tokens, 3, heads, depth))),
              ("heads_perm", L.Permute((3, 1, 4, 2, 5))),
              ("qkv_flat", L.Reshape((3, n_h * n_w * heads, tokens, depth)))]
    packed = _chain(conv, node, x.tensor, steps)
    split = {}
    for i, part in enumerate("qkv"):
        crop = L.Cropping3D(((i, 2 - i), (0, 0), (0, 0)), name=conv.name(f"{node.name}_{part}"))
        steps = [(part, crop), (f"{part}_heads", L.Reshape((n_h * n_w, heads, tokens, depth)))]
        split[part] = _chain(conv, node, packed, steps)
    q = _chain(conv, node, split["q"], [("scale", L.Rescaling(depth ** -0.5))])
    k = _chain(conv, node, split["k"], [("k_t", L.Permute((1, 2, 4, 3)))])
    logits = _apply(conv, node, L.MatMul(), [q, k], "logits")
    like = Value(logits, "plain", (x.shape[0], n_h * n_w, heads, tokens, tokens))
    terms = [logits, parameter(conv, node, bias, like).tensor]
    if any(shift):
        mask = shift_mask(pad_h, pad_w, window, shift)[:, None]
        dtype = str(conv.module.get_parameter(bias.target).dtype).replace("torch.", "")
        constant = L.Parameter(mask.shape, trainable=False, dtype=dtype)
        constant.ensure_built(mask.shape)  # the input's shape is not read
        constant.tensor[...] = mask
        terms.append(_apply(conv, node, constant, logits, "mask"))
    steps = [("softmax", L.Softmax(axis=-1))]
    if args.get("attention_dropout", 0.0):
        steps.append(("attention_dropout", L.Dropout(args["attention_dropout"])))
    attention = _chain(conv, node, _apply(conv, node, L.Add(), terms, "scores"), steps)
    out = _apply(conv, node, L.MatMul(), [attention, split["v"]], "mix")
    steps = [("mix_perm", L.Permute((1, 3, 2, 4))),
             ("mix_flat", L.Reshape((n_h * n_w, tokens, channels))), ("proj", proj)]
    if args.get("dropout", 0.0):
        steps.append(("dropout", L.Dropout(args["dropout"])))
    steps += _unwindows(n_h, n_w, *window, channels)
    if any(shift):
        steps.append(("unshift", L.Roll((shift[0], shift[1]), (1, 2))))
    if pad_b or pad_r:
        steps.append(("crop", L.Cropping2D(((0, pad_b), (0, pad_r)))))
    out = _chain(conv, node, out, steps)
    return Value(out, "plain", tuple(conv.runtime[node].shape))


@handles("_patch_merging_pad", parameters=True)
@_torchvision
def patch_merging_pad(conv, node):
    """torchvision's ``_patch_merging_pad``: (N, H, W, C) -> (N, H/2, W/2, 4C)."""
    x = conv.arg(node, node.args[0])
    if not isinstance(x, Value) or len(x.shape) != 4:
        conv.refuse(node, "its input must be one (N, H, W, C) tensor")
    x = conv.as_layout(x, "plain", node)
    _, height, width, channels = x.shape
    steps = [("pad", L.ZeroPad2D((0, width % 2, 0, height % 2)))] if height % 2 or \
        width % 2 else []
    half_h, half_w = (height + 1) // 2, (width + 1) // 2
    steps += [("quads", L.Reshape((half_h, 2, half_w, 2, channels))),
              ("quads_perm", L.Permute((1, 3, 4, 2, 5))),
              ("merged", L.Reshape((half_h, half_w, 4 * channels)))]
    out = _chain(conv, node, x.tensor, steps)
    return Value(out, "plain", tuple(conv.runtime[node].shape))
