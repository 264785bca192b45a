"""The ONNX import's converters, by op type (``CONVERTERS``): ``f(loader, node)`` reads the
node's held inputs and constants from the loader (:class:`.load.Loader`) and holds its
outputs (see :mod:`.load` for the layout scheme)."""

from __future__ import annotations

import numpy as np

from ... import layers as L
from ...layers.declarations import conv_weight_perm
from .held import Held, channels_last_perm

CONVERTERS = {}


def converts(*op_types):
    def register(fn):
        for op_type in op_types:
            CONVERTERS[op_type] = fn
        return fn
    return register


def attrs(node):
    """The node's attributes; a float one (stored as float32) as the shortest decimal that
    rounds to it (torch's ``0.1`` comes back as 0.1, not 0.10000000149)."""
    from onnx import helper
    values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return {k: float(str(np.float32(v))) if isinstance(v, float) else v
            for k, v in values.items()}


def _identity_perm(rank):
    return tuple(range(rank))


# --------------------------------------------------------------------- pass-through
@converts("Identity", "Dropout")
def passthrough(ld, node):
    """Inference: the input itself (Dropout's mask output is not supported)."""
    if len(node.output) > 1 and node.output[1]:
        raise ld.fail("its mask output has no handgrad counterpart")
    source = node.input[0]
    if source in ld.consts:
        ld.consts[node.output[0]] = ld.consts[source]
    else:
        ld.set_out(node, ld.get(source))


@converts("Constant")
def constant(ld, node):
    a = attrs(node)
    if "value" not in a:
        raise ld.fail(f"only the 'value' attribute is supported; received {sorted(a)}")
    ld.consts[node.output[0]] = ld.numpy_helper.to_array(a["value"])


# --------------------------------------------------------------------- activations
def _unary(layer_of):
    def convert(ld, node):
        held = ld.get(node.input[0])
        layer = layer_of(ld, node, attrs(node), held)
        if held.flat is not None and not isinstance(layer, (L.Softmax, L.LogSoftmax)):
            ld.set_out(node, Held(None, held.perm, ld.call(layer, held.flat)))
        else:
            ld.set_out(node, ld.call(layer, ld.materialize(held)))
    return convert


def _fixed(ld, a, **expected):
    for key, value in expected.items():
        if key in a and not np.isclose(a[key], value, rtol=1e-6, atol=0):
            raise ld.fail(f"{key}={a[key]} is not handgrad's ({value})")


for _op, _cls in (("Relu", L.ReLU), ("Sigmoid", L.Sigmoid), ("Tanh", L.Tanh),
                  ("Softplus", L.Softplus), ("HardSwish", L.Hardswish)):
    CONVERTERS[_op] = _unary(lambda ld, node, a, held, cls=_cls: cls())
CONVERTERS["LeakyRelu"] = _unary(lambda ld, n, a, h: L.LeakyReLU(float(a.get("alpha", 0.01))))
CONVERTERS["Elu"] = _unary(lambda ld, n, a, h: L.ELU(float(a.get("alpha", 1.0))))
CONVERTERS["Gelu"] = _unary(lambda ld, n, a, h: L.GELU(
    approximate=a.get("approximate", b"none").decode()
    if isinstance(a.get("approximate"), bytes) else a.get("approximate", "none")))


@converts("Selu")
def selu(ld, node):
    _fixed(ld, attrs(node), alpha=1.6732632423543772, gamma=1.0507009873554805)
    _unary(lambda *_: L.SELU())(ld, node)


@converts("HardSigmoid")
def hard_sigmoid(ld, node):
    a = attrs(node)
    _fixed(ld, {"alpha": a.get("alpha", 0.2), "beta": a.get("beta", 0.5)}, alpha=1 / 6,
           beta=0.5)
    _unary(lambda *_: L.HardSigmoid())(ld, node)


@converts("Clip")
def clip(ld, node):
    """ReLU6 for bounds (0, 6), else Hardtanh; both bounds must be constants."""
    bounds = []
    for i, default in ((1, -np.inf), (2, np.inf)):
        given = len(node.input) > i and node.input[i]
        bounds.append(float(ld.const(node.input[i], "bound").reshape(())) if given
                      else default)
    a = attrs(node)  # opset < 11 keeps the bounds as attributes
    lo, hi = float(a.get("min", bounds[0])), float(a.get("max", bounds[1]))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ld.fail(f"bounds ({lo}, {hi}): a one-sided Clip has no handgrad layer")
    _unary(lambda *_: L.ReLU6() if (lo, hi) == (0.0, 6.0)
           else L.Hardtanh(min_val=lo, max_val=hi))(ld, node)


def _softmax(cls):
    return _unary(lambda ld, n, a, held: cls(axis=ld.axis(held, a.get("axis", -1))))


CONVERTERS["Softmax"] = _softmax(L.Softmax)
CONVERTERS["LogSoftmax"] = _softmax(L.LogSoftmax)


# ------------------------------------------------------------- convolution, pooling
def _padding(ld, a, rank):
    """Per-axis ints, or (before, after) pairs, from ``pads`` / ``auto_pad``."""
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return 0
    if auto == "SAME_UPPER":
        return "same"
    if auto != "NOTSET":
        raise ld.fail(f"auto_pad={auto} has no handgrad padding")
    pads = list(a.get("pads", [0] * (2 * rank)))
    pairs = tuple(zip(pads[:rank], pads[rank:]))
    if all(b == e for b, e in pairs):
        return tuple(b for b, _ in pairs)
    return pairs


def _spatial_class(ld, prefix, rank):
    cls = getattr(L, f"{prefix}{rank}D", None)
    if cls is None:
        raise ld.fail(f"{rank} spatial axes have no handgrad {prefix} layer")
    return cls


@converts("Conv", "ConvTranspose")
def conv(ld, node):
    held, a = ld.get(node.input[0]), attrs(node)
    w = ld.const(node.input[1], "weight")
    n = w.ndim - 2
    if "output_shape" in a:
        raise ld.fail("output_shape has no handgrad counterpart; give pads instead")
    ones = (1,) * n
    kw = {"stride": tuple(a.get("strides", ones)), "dilation": tuple(a.get("dilations", ones)),
          "groups": int(a.get("group", 1)), "bias": len(node.input) > 2 and bool(node.input[2])}
    hg_w = w.transpose(np.argsort(conv_weight_perm(n)))
    padding = _padding(ld, a, n)
    if node.op_type == "Conv":
        layer = _spatial_class(ld, "Conv", n)(w.shape[0], tuple(w.shape[2:]), padding=padding,
                                              name=ld.layer_name(node.input[1]), **kw)
    else:
        if not isinstance(padding, tuple) or any(isinstance(p, tuple) for p in padding):
            pads = list(a.get("pads", [0] * (2 * n)))
        else:
            pads = [*padding, *padding]
        extra = a.get("output_padding", [0] * n)
        output_padding = tuple(b - e + o for b, e, o in zip(pads[:n], pads[n:], extra))
        if any(o < 0 for o in output_padding):
            raise ld.fail(f"pads {pads} end beyond the start padding, which handgrad's "
                          f"ConvTranspose cannot express")
        layer = _spatial_class(ld, "ConvTranspose", n)(
            w.shape[1] * kw["groups"], tuple(w.shape[2:]), padding=tuple(pads[:n]),
            output_padding=output_padding, name=ld.layer_name(node.input[1]), **kw)
    params = {"W": hg_w}
    if kw["bias"]:
        params["b"] = ld.const(node.input[2], "bias")
    ld.set_out(node, ld.call(layer, held, channels_last_perm(held.rank), params))


@converts("MaxPool", "AveragePool")
def pool(ld, node):
    held, a = ld.get(node.input[0]), attrs(node)
    if len(node.output) > 1 and node.output[1]:
        raise ld.fail("its indices output has no handgrad counterpart")
    n = held.rank - 2
    kernel = tuple(a["kernel_shape"])
    kw = {"stride": tuple(a.get("strides", (1,) * n)), "padding": _padding(ld, a, n),
          "ceil_mode": bool(a.get("ceil_mode", 0))}
    if node.op_type == "MaxPool":
        if a.get("storage_order", 0):
            raise ld.fail("storage_order=1 is not supported")
        layer = _spatial_class(ld, "MaxPool", n)(kernel, dilation=tuple(
            a.get("dilations", (1,) * n)), **kw)
    else:
        layer = _spatial_class(ld, "AvgPool", n)(
            kernel, count_include_pad=bool(a.get("count_include_pad", 0)), **kw)
    ld.set_out(node, ld.call(layer, held, channels_last_perm(held.rank)))


@converts("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ld, node):
    held = ld.get(node.input[0])
    prefix = "GlobalAvgPool" if node.op_type == "GlobalAveragePool" else "GlobalMaxPool"
    layer = _spatial_class(ld, prefix, held.rank - 2)(keepdims=True)
    ld.set_out(node, ld.call(layer, held, channels_last_perm(held.rank)))


def channels_last(ld, held, onnx_axes):
    """``held`` laid out channels last (a Permute) where an operator acts on the ONNX
    spatial axes ``onnx_axes`` (2, ...) of a map held otherwise (after a Reshape)."""
    perm = channels_last_perm(held.rank)
    if held.rank < 3 or held.perm == perm or 1 in onnx_axes or 0 in onnx_axes:
        return held
    return Held(ld.need(held, perm), perm)


@converts("ReduceMean", "ReduceMax")
def reduce(ld, node):
    """A global pool where the reduced axes are all the spatial ones."""
    held, a = ld.get(node.input[0]), attrs(node)
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = ld.const(node.input[1], "axes").tolist()
    held = ld.materialize(held)
    if sorted(int(ax) % held.rank for ax in (axes or [])) == list(range(2, held.rank)):
        held = channels_last(ld, held, range(2, held.rank))
    hg_axes = sorted(ld.axis(held, int(ax)) for ax in (axes or []))
    if held.rank < 3 or hg_axes != list(range(1, held.rank - 1)):
        raise ld.fail(f"reducing axes {axes} of a tensor held as {held.perm} is not a global "
                      f"pool over the spatial axes, the one form handgrad has")
    prefix = "GlobalAvgPool" if node.op_type == "ReduceMean" else "GlobalMaxPool"
    keep = bool(a.get("keepdims", 1))
    out = ld.call(_spatial_class(ld, prefix, held.rank - 2)(keepdims=keep), held)
    if not keep:  # the remaining ONNX axes keep their relative order
        rest = [p for p in held.perm if p == 0 or p == held.rank - 1]
        out = Held(out.sym, tuple(0 if p == 0 else 1 for p in rest))
    ld.set_out(node, out)


# ---------------------------------------------------------------------- dense, norm
def _bias_after(ld, node, out_features):
    """The constant bias of the one Add reading ``node``'s output (it is then skipped)."""
    readers = ld.consumers.get(node.output[0], [])
    if len(readers) != 1 or readers[0].op_type != "Add":
        return None, None
    add = readers[0]
    other = [name for name in add.input if name != node.output[0]]
    if len(other) != 1 or other[0] not in ld.consts:
        return None, None
    bias = ld.consts[other[0]]
    if bias.shape not in ((out_features,), (1, out_features)):
        return None, None
    return add, bias.reshape(out_features)


def _dense(ld, node, held, w, bias):
    """Dense of the ONNX weight ``w`` (in, out) on ``held``; rows permuted for a lazily
    flattened channels-first map."""
    if held.flat is not None:
        source = held.flat
        onnx_shape = source.onnx_shape
        hg_order = [source.perm.index(j) - 1 for j in range(1, source.rank)]
        w = w.reshape(*onnx_shape, -1).transpose(*hg_order, source.rank - 1)
        w = w.reshape(-1, w.shape[-1])
        sym = L.Flatten()(source.sym)
        held = Held(sym, (0, 1))
    if held.perm[-1] != held.rank - 1:
        held = Held(ld.need(held, _identity_perm(held.rank)), _identity_perm(held.rank))
    layer = L.Dense(w.shape[1], bias=bias is not None,
                    name=ld.layer_name(node.input[1]))
    params = {"W": w} if bias is None else {"W": w, "b": bias}
    return ld.call(layer, held, None, params)


@converts("Gemm")
def gemm(ld, node):
    held, a = ld.get(node.input[0]), attrs(node)
    if a.get("transA", 0):
        raise ld.fail("transA=1 has no handgrad Dense form")
    w = ld.const(node.input[1], "weight") * float(a.get("alpha", 1.0))
    w = w.T if a.get("transB", 0) else w
    bias = None
    if len(node.input) > 2 and node.input[2]:
        bias = np.broadcast_to(ld.const(node.input[2], "bias") * float(a.get("beta", 1.0)),
                               (w.shape[1],)).copy()
    ld.set_out(node, _dense(ld, node, held, w, bias))


@converts("MatMul")
def matmul(ld, node):
    held, w = ld.get(node.input[0]), ld.const(node.input[1], "second input")
    if w.ndim != 2:
        raise ld.fail(f"a constant of shape {w.shape} is not a Dense weight (in, out)")
    add, bias = _bias_after(ld, node, w.shape[1])
    out = _dense(ld, node, held, w, bias)
    ld.set_out(node, out)
    if add is not None:
        ld.skip.add(id(add))
        ld.held[add.output[0]] = out


@converts("BatchNormalization")
def batch_norm(ld, node):
    held, a = ld.get(node.input[0]), attrs(node)
    if a.get("training_mode", 0) or any(node.output[1:]):
        raise ld.fail("training_mode=1 (batch statistics outputs) is not supported")
    scale, bias, mean, var = (ld.const(name) for name in node.input[1:5])
    # torch's momentum 0.1 is written as float32 0.9: 1 - 0.9 is 0.09999999999999998 in
    # float64; the shortest decimal that rounds to it in float32 is torch's 0.1 again
    momentum = float(str(np.float32(1.0 - float(a.get("momentum", 0.9)))))
    layer = L.BatchNorm(momentum=momentum,
                        eps=float(a.get("epsilon", 1e-5)), name=ld.layer_name(node.input[1]))
    params = {"gamma": scale, "beta": bias, "running_mean": mean, "running_var": var}
    held = ld.materialize(held)
    ld.set_out(node, ld.call(layer, held, channels_last_perm(held.rank), params))
