"""The handgrad layers of torch's modules and functions, for :mod:`.torch_convert`.

``MODULES`` maps a torch module class name to ``make(module, conv) -> Layer`` (``conv``:
the converter, for the module path in messages); ``POINTWISE_FUNCTIONS`` and
``POINTWISE_METHODS`` map element-wise torch functions and tensor methods to the layer
that computes them (any layout passes through). Channel-aware modules (convolutions,
pools, batch norms, upsampling) read and write channels-last maps: ``CHANNEL_MODULES``.
"""

from __future__ import annotations

import operator

from .. import layers as L

_PADS = ("Zero", "Constant", "Reflection", "Replication", "Circular")

#: torch modules that read channels at axis 1 (their handgrad twins: at the last axis)
CHANNEL_MODULES = {
    *(f"{kind}{n}d" for n in (1, 2, 3) for kind in (
        "Conv", "ConvTranspose", "MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool",
        "BatchNorm", *(f"{pad}Pad" for pad in _PADS))),
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d",
}


class Value:
    """A converted tensor: the handgrad ``tensor``, its ``layout`` ("cf"/"plain"), its
    torch ``shape`` (batch included) and the from_torch walker's view ``spatial``."""

    def __init__(self, tensor, layout, shape, spatial=False):
        self.tensor, self.layout, self.shape, self.spatial = tensor, layout, shape, spatial
        self.views = {}  # the same tensor in the other layout, made once


def only_new_axes(index):
    """Whether a tensor index only adds unit axes (``s[:, :, None, None]``)."""
    index = index if isinstance(index, tuple) else (index,)
    return any(i is None for i in index) and all(
        i is None or i == slice(None) for i in index)


def torch_to_handgrad_axis(dim, rank, layout):
    """handgrad's axis (negative) of torch's ``dim`` of a value of ``rank``."""
    dim = dim % rank
    if layout == "cf" and dim >= 1:
        dim = rank - 1 if dim == 1 else dim - 1
    return dim - rank


def _rank(module):
    """The spatial rank of a torch module (``Conv2d``: 2, as its subclasses)."""
    return int(module_kind(type(module))[-2])


def _bias(m):
    return m.bias is not None


def _conv(m):
    cls = getattr(L, f"Conv{_rank(m)}D")
    return cls(m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation, m.groups,
               _bias(m), padding_mode=m.padding_mode)


def _conv_transpose(m):
    if m.padding_mode != "zeros":
        raise ValueError(f"padding_mode={m.padding_mode!r} (handgrad's transposed "
                         f"convolutions pad with zeros)")
    cls = getattr(L, f"ConvTranspose{_rank(m)}D")
    return cls(m.out_channels, m.kernel_size, m.stride, m.padding, m.output_padding,
               m.dilation, m.groups, _bias(m))


def _batch_norm(m):
    return L.BatchNorm(m.momentum, m.eps, m.affine, m.track_running_stats)


#: torch's pooling settings after the kernel size, with their defaults (functions and modules)
POOL_SETTINGS = {
    "Max": {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
            "return_indices": False},
    "Avg": {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
            "divisor_override": None},
}


def pool_layer(kind, rank, kernel_size, settings):
    """handgrad's ``{kind}Pool{rank}D`` of torch's ``kernel_size`` and ``settings`` (a dict
    of :data:`POOL_SETTINGS` [kind])."""
    settings = {**POOL_SETTINGS[kind], **settings}
    if settings.pop("return_indices", False):
        raise ValueError("return_indices=True (the indices are a second output)")
    if settings.pop("divisor_override", None) is not None:
        raise ValueError("divisor_override (handgrad divides by the window's size)")
    return getattr(L, f"{kind}Pool{rank}D")(kernel_size, **settings)


def _pool(kind):
    def make(m):
        return pool_layer(kind, _rank(m), m.kernel_size, {
            k: getattr(m, k) for k in POOL_SETTINGS[kind] if hasattr(m, k)})
    return make


def _adaptive(kind):
    def make(m):
        if getattr(m, "return_indices", False):
            raise ValueError("return_indices=True (the indices are a second output)")
        return getattr(L, f"Adaptive{kind}Pool{_rank(m)}D")(m.output_size)
    return make


def _upsample(m):
    mode = {"UpsamplingNearest2d": "nearest", "UpsamplingBilinear2d": "bilinear"}.get(
        type(m).__name__, m.mode)
    corners = True if type(m).__name__ == "UpsamplingBilinear2d" else m.align_corners
    return L.Upsample(m.size, m.scale_factor, mode, corners)


def _dropout(m):
    return L.Dropout(m.p)


def _padding(kind, rank):
    """torch's ``<kind>Pad<rank>d`` (``padding``: last axis first, as handgrad's takes it)."""
    cls = getattr(L, f"{kind}Pad{rank}D")
    return lambda m: cls(m.padding, m.value) if kind == "Constant" else cls(m.padding)


MODULES = {
    **{f"Conv{n}d": _conv for n in (1, 2, 3)},
    **{f"ConvTranspose{n}d": _conv_transpose for n in (1, 2, 3)},
    **{f"BatchNorm{n}d": _batch_norm for n in (1, 2, 3)},
    **{f"MaxPool{n}d": _pool("Max") for n in (1, 2, 3)},
    **{f"AvgPool{n}d": _pool("Avg") for n in (1, 2, 3)},
    **{f"AdaptiveAvgPool{n}d": _adaptive("Avg") for n in (1, 2, 3)},
    **{f"AdaptiveMaxPool{n}d": _adaptive("Max") for n in (1, 2, 3)},
    "Upsample": _upsample, "UpsamplingNearest2d": _upsample, "UpsamplingBilinear2d": _upsample,
    "Linear": lambda m: L.Dense(m.out_features, bias=_bias(m)),
    "Dropout": _dropout,
    **{f"{pad}Pad{n}d": _padding(pad, n) for pad in _PADS for n in (1, 2, 3)},
    "LayerNorm": lambda m: L.LayerNorm(m.normalized_shape, m.eps, m.elementwise_affine,
                                       getattr(m, "bias", None) is not None),
}

#: element-wise modules: torch class name -> handgrad layer (their settings as arguments)
POINTWISE_MODULES = {
    "ReLU": lambda m: L.ReLU(), "ReLU6": lambda m: L.ReLU6(), "Sigmoid": lambda m: L.Sigmoid(),
    "Tanh": lambda m: L.Tanh(), "SiLU": lambda m: L.SiLU(), "Hardswish": lambda m: L.Hardswish(),
    "Hardsigmoid": lambda m: L.HardSigmoid(), "Mish": lambda m: L.Mish(),
    "GELU": lambda m: L.GELU(approximate=m.approximate),
    "LeakyReLU": lambda m: L.LeakyReLU(negative_slope=m.negative_slope),
    "ELU": lambda m: L.ELU(alpha=m.alpha), "Identity": lambda m: L.Identity(),
    "Dropout": _dropout, "StochasticDepth": lambda m: L.StochasticDepth(m.p, m.mode),
}

#: packages whose modules of the classes above are converted as they are (torchvision's
#: StochasticDepth), and so are their subclasses that keep the forward (Conv3DSimple)
_LEAF_PACKAGES = ("torch.nn.", "torchvision.ops.")


def module_kind(cls):
    """The name of the converted torch class whose ``forward`` ``cls`` runs (``cls``'s own,
    or a base class's that ``cls`` does not override), or None."""
    for base in cls.__mro__:
        if (base.__name__ in MODULES or base.__name__ in POINTWISE_MODULES) \
                and base.__module__.startswith(_LEAF_PACKAGES) and cls.forward is base.forward:
            return base.__name__
    return None


def _torch_functions():
    import torch
    F = torch.nn.functional
    relu, sigmoid, tanh = (lambda *a, **k: L.ReLU()), (lambda *a, **k: L.Sigmoid()), \
        (lambda *a, **k: L.Tanh())
    return {
        F.relu: relu, torch.relu: relu, sigmoid: sigmoid, torch.sigmoid: sigmoid,
        F.sigmoid: sigmoid, torch.tanh: tanh, F.tanh: tanh,
        F.relu6: lambda *a, **k: L.ReLU6(), F.silu: lambda *a, **k: L.SiLU(),
        F.hardswish: lambda *a, **k: L.Hardswish(),
        F.hardsigmoid: lambda *a, **k: L.HardSigmoid(),
        F.gelu: lambda x, approximate="none", **k: L.GELU(approximate=approximate),
        F.leaky_relu: lambda x, negative_slope=0.01, *a, **k: L.LeakyReLU(
            negative_slope=negative_slope),
        F.dropout: lambda x, p=0.5, *a, **k: L.Dropout(p),
    }


def pointwise_function(target):
    """The maker of the handgrad layer of an element-wise torch function, or None."""
    try:
        return _torch_functions().get(target)
    except TypeError:  # an unhashable target
        return None


POINTWISE_METHODS = {
    "relu": lambda *a, **k: L.ReLU(), "sigmoid": lambda *a, **k: L.Sigmoid(),
    "tanh": lambda *a, **k: L.Tanh(),
}

#: binary operators of two tensors: handgrad merge layer; of a tensor and a number c:
#: (scale, offset) of ``Rescaling`` (``x * scale + offset``), ``swapped`` for ``c op x``
BINARY = {"add": L.Add, "mul": L.Multiply, "sub": L.Subtract}
SCALAR = {
    "add": lambda c, swapped: (1.0, c), "mul": lambda c, swapped: (c, 0.0),
    "sub": lambda c, swapped: (-1.0, c) if swapped else (1.0, -c),
    "truediv": lambda c, swapped: None if swapped else (1.0 / c, 0.0),
}


def binary_name(node):
    """``"add"``, ``"mul"``, ``"sub"``, ``"truediv"`` for the arithmetic nodes, else None."""
    import torch
    functions = {operator.add: "add", operator.mul: "mul", operator.sub: "sub",
                 operator.truediv: "truediv", torch.add: "add", torch.mul: "mul",
                 torch.sub: "sub", torch.div: "truediv", operator.iadd: "add",
                 operator.imul: "mul"}
    if node.op == "call_function":
        try:
            return functions.get(node.target)
        except TypeError:
            return None
    if node.op == "call_method":
        return {"add": "add", "mul": "mul", "sub": "sub", "div": "truediv", "add_": "add",
                "mul_": "mul"}.get(node.target)
    return None
