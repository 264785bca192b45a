"""Benchmarks of the breadth kernels: 3-D convolution and pooling, interpolation,
padding, pixel (un)shuffle, adaptive pooling, RMSNorm and a Transformer encoder layer,
each handgrad forward + backward against the same computation in torch.

Every case brings its own runners (the protocol of :mod:`benchmarks.attention`):
``case.runners(dtype, quick) -> (ours, theirs)``, callables running one forward +
backward, with ``results()`` (y, dx and the parameter gradients, in torch's layout);
ours has ``memory()``, theirs holds ``module``, ``x`` and ``dy`` (what
:func:`benchmarks.bounds.measured_bounds` converts) and ``layout``. Handgrad's maps are
channels-last; torch runs channels-first or channels-last, whichever is faster on this
machine (:func:`benchmarks.layout.fastest`, as for the convolution cases).
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from .layout import channels_first, fastest, torch_dtype
from .memory import pass_memory, traced

LAYOUTS = {4: torch.channels_last, 5: torch.channels_last_3d}


class Function(torch.nn.Module):
    """A torch function with fixed keyword arguments, as a module (for measured_bounds)."""

    def __init__(self, fn, **kwargs):
        super().__init__()
        self.fn, self.kwargs = fn, kwargs

    def forward(self, x):
        return self.fn(x, **self.kwargs)


class TorchRunner:
    """forward + backward of ``module`` on x; ``results()``: y, dx, every parameter's
    gradient (in ``module.parameters()`` order)."""

    def __init__(self, module, x, dy, layout="contiguous_format"):
        self.module, self.layout = module, layout
        fmt = getattr(torch, layout)
        self.x = torch.tensor(x).to(memory_format=fmt).requires_grad_(True)
        self.dy = torch.tensor(dy).to(memory_format=fmt)

    def __call__(self):
        self.x.grad = None
        self.module.zero_grad(set_to_none=True)
        y = self.module(self.x)
        y.backward(self.dy)
        return y

    def results(self):
        y = self()
        return [t.detach().numpy() for t in (y, self.x.grad,
                                            *(p.grad for p in self.module.parameters()))]


class HandgradRunner:
    """forward + backward of a handgrad op: ``forward(x) -> (y, cache)``,
    ``backward(dy, cache) -> grads``; ``convert(y, grads)`` gives torch's layout."""

    def __init__(self, forward, backward, x, dy, convert, keep=()):
        self.forward, self.backward, self.x, self.dy = forward, backward, x, dy
        self.convert, self.keep = convert, keep  # keep: arrays not counted as cache

    def __call__(self):
        y, cache = self.forward(self.x)
        return y, self.backward(self.dy, cache)

    def results(self):
        return self.convert(*self())

    def memory(self):
        return pass_memory(lambda: self.forward(self.x),
                           lambda cache: self.backward(self.dy, cache), (self.x, *self.keep))


@dataclass
class MapCase:
    """An op on channels-last maps x (N, *S, C): handgrad ``ops.<op>(x, *params,
    **kwargs)`` against ``torch_module(dtype)`` on (N, C, *S). ``params(module)`` are
    handgrad's parameters from the torch module's, ``grads(grads)`` the parameter
    gradients back in torch's layout."""

    group = "breadth"  # the 1.5x target (benchmarks.targets)

    name: str
    op: str
    x_shape: tuple
    quick_x_shape: tuple
    torch_module: object
    kwargs: dict = field(default_factory=dict)
    params: object = None
    grads: object = None
    outputs: tuple = ("y", "dx")

    def runners(self, dtype, quick, package="handgrad"):
        """(handgrad's runner, torch's), the same inputs on every call; ``package``: the
        handgrad package to run (another version of it: :mod:`benchmarks.versions`)."""
        ops = importlib.import_module(f"{package}.ops")
        rng = np.random.default_rng(0)
        x = rng.standard_normal(self.quick_x_shape if quick else self.x_shape).astype(dtype)
        torch.manual_seed(0)
        module = self.torch_module().to(torch_dtype(dtype))
        params = self.params(module) if self.params else ()
        forward = partial(getattr(ops, self.op), **self.kwargs)
        y, _ = forward(x, *params)
        dy = rng.standard_normal(y.shape).astype(dtype)

        def convert(y, grads):
            grads = grads if isinstance(grads, tuple) else (grads,)
            rest = self.grads(grads[1:]) if self.grads else []
            return [channels_first(y), channels_first(grads[0]), *rest]

        ours = HandgradRunner(lambda a: forward(a, *params), getattr(ops, self.op + "_backward"),
                              x, dy, convert, keep=params)
        layouts = ["contiguous_format"] + ([] if quick else [str(LAYOUTS[x.ndim]).split(".")[-1]])
        theirs, _ = fastest(lambda layout: TorchRunner(module, channels_first(x).copy(),
                                                     channels_first(dy).copy(), layout), layouts)
        return ours, theirs


def _conv3d_module(cin, cout):
    def make():
        module = torch.nn.Conv3d(cin, cout, 3, padding=1)
        with torch.no_grad():
            module.bias.normal_(0, 0.1)
        return module
    return make


def _conv3d_params(module):
    w = module.weight.detach().numpy().transpose(2, 3, 4, 1, 0)  # (kd, kh, kw, Cin, Cout)
    return np.ascontiguousarray(w), module.bias.detach().numpy().copy()


def _conv3d_grads(grads):
    dw, db = grads
    return [dw.transpose(4, 3, 0, 1, 2), db]


def _rms_module(d):
    def make():
        module = torch.nn.RMSNorm(d, eps=1e-6)
        with torch.no_grad():
            module.weight.normal_(1, 0.3)
        return module
    return make


def _same_layout(y, grads):
    return [y, *grads]


@dataclass
class RMSNormCase(MapCase):
    """RMSNorm over the last axis of (N, T, d): no channel move."""

    outputs: tuple = ("y", "dx", "dgamma")

    def runners(self, dtype, quick, package="handgrad"):
        ops = importlib.import_module(f"{package}.ops")
        rng = np.random.default_rng(0)
        x = rng.standard_normal(self.quick_x_shape if quick else self.x_shape).astype(dtype)
        dy = rng.standard_normal(x.shape).astype(dtype)
        torch.manual_seed(0)
        module = self.torch_module().to(torch_dtype(dtype))
        gamma = module.weight.detach().numpy().copy()
        d = x.shape[-1]
        ours = HandgradRunner(lambda a: ops.rms_norm(a, d, gamma, eps=1e-6),
                              ops.rms_norm_backward, x, dy, _same_layout, keep=(gamma,))
        return ours, TorchRunner(module, x, dy)


TRANSFORMER_PARAMS = ("self_attn.in_proj_weight", "self_attn.in_proj_bias",
                      "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                      "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                      "norm1.bias", "norm2.weight", "norm2.bias")


@dataclass
class EncoderLayerCase:
    """handgrad's ``TransformerEncoderLayer`` against torch's (batch_first, post-norm,
    relu, dropout 0, training mode) with the same weights, x (N, T, E)."""

    group = "breadth"  # the 1.5x target (benchmarks.targets)

    name: str
    batch: int
    length: int
    embed: int
    heads: int
    feedforward: int
    quick_shape: tuple = (2, 8)  # (batch, length) for --quick
    outputs: tuple = ("y", "dx", *(f"d:{name}" for name in TRANSFORMER_PARAMS))

    def runners(self, dtype, quick, package="handgrad"):
        from_torch = importlib.import_module(f"{package}.io.torch_interop").from_torch
        encoder_layer = importlib.import_module(f"{package}.layers").TransformerEncoderLayer

        batch, length = self.quick_shape if quick else (self.batch, self.length)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((batch, length, self.embed)).astype(dtype)
        dy = rng.standard_normal(x.shape).astype(dtype)
        torch.manual_seed(0)
        module = torch.nn.TransformerEncoderLayer(
            self.embed, self.heads, self.feedforward, dropout=0.0, batch_first=True,
            dtype=torch_dtype(dtype))
        with torch.no_grad():  # the norms and biases away from their starting values
            for name, p in module.named_parameters():
                if "norm" in name or "bias" in name:
                    p.add_(0.1 * torch.randn_like(p))
        layer = encoder_layer(self.embed, self.heads, self.feedforward, dropout=0.0,
                                        dtype=dtype).build((length, self.embed))
        from_torch(module.state_dict(), layer)
        return EncoderLayerRunner(layer, x, dy), TorchRunner(module, x, dy)


class EncoderLayerRunner:
    """forward + backward of a handgrad layer; parameter gradients under torch's names."""

    def __init__(self, layer, x, dy):
        self.layer, self.x, self.dy = layer, x, dy

    def __call__(self):
        self.layer.zero_grad()
        y = self.layer.forward(self.x, training=True, grad=True)
        return y, self.layer.backward_all(self.dy)[0]

    def results(self):
        from handgrad.io.torch_interop import to_torch_state_dict

        y, dx = self()
        twin = copy.deepcopy(self.layer)
        for key, value in twin.named_parameters().items():
            value[...] = self.layer.named_gradients()[key]
        state = to_torch_state_dict(twin, numpy=True)
        return [y, dx, *(state[name] for name in TRANSFORMER_PARAMS)]

    def memory(self):
        """(peak temporary MB during forward+backward, MB held by the layer's caches)."""
        with traced() as usage:
            self.layer.zero_grad()
            y = self.layer.forward(self.x, training=True, grad=True)
            held = usage()[0] - y.nbytes
            dx = self.layer.backward_all(self.dy)
            peak = usage()[1]
        del y, dx
        return peak / 2**20, held / 2**20


def _interp(name, mode, align, x_shape, quick_shape):
    kwargs = {"scale_factor": 2, "mode": mode}
    if align is not None:
        kwargs["align_corners"] = align
    return MapCase(name, "interpolate", x_shape, quick_shape,
                   partial(Function, F.interpolate, **kwargs), kwargs)


def _pad(name, mode):
    return MapCase(name, "pad", (8, 64, 64, 32), (2, 6, 6, 3),
                   partial(Function, F.pad, pad=(2, 2, 2, 2), mode=mode),
                   {"padding": 2, "mode": mode})


def _adaptive(name, kind, size):
    op = f"adaptive_{kind}_pool2d"
    return MapCase(name, op, (8, 64, 64, 32), (2, 10, 10, 3),
                   partial(Function, getattr(F, op), output_size=size),
                   {"output_size": size})


MAP_2D, MAP_2D_QUICK = (8, 32, 32, 32), (2, 5, 5, 3)  # upsampled to 64x64
MAP_3D, MAP_3D_QUICK = (2, 16, 16, 16, 32), (2, 4, 4, 4, 3)

BREADTH_CASES = [
    MapCase("13a conv3d 3x3x3 pad1 16^3 16->16", "conv3d", (2, 16, 16, 16, 16),
            (2, 4, 4, 4, 16), _conv3d_module(16, 16), {"padding": 1}, _conv3d_params,
            _conv3d_grads, ("y", "dx", "dW", "db")),
    MapCase("13b max_pool3d 2x2x2/2 16^3", "max_pool3d", MAP_3D, MAP_3D_QUICK,
            partial(Function, F.max_pool3d, kernel_size=2), {"kernel_size": 2}),
    MapCase("13c avg_pool3d 2x2x2/2 16^3", "avg_pool3d", MAP_3D, MAP_3D_QUICK,
            partial(Function, F.avg_pool3d, kernel_size=2), {"kernel_size": 2}),
    _interp("14a nearest x2 32->64", "nearest", None, MAP_2D, MAP_2D_QUICK),
    _interp("14b bilinear x2 32->64", "bilinear", False, MAP_2D, MAP_2D_QUICK),
    _interp("14c bilinear x2 32->64 align", "bilinear", True, MAP_2D, MAP_2D_QUICK),
    _interp("14d trilinear x2 8^3->16^3", "trilinear", False, (2, 8, 8, 8, 32),
            MAP_3D_QUICK),
    _interp("14e trilinear x2 8^3->16^3 align", "trilinear", True, (2, 8, 8, 8, 32),
            MAP_3D_QUICK),
    _pad("15a pad reflect 2 64x64", "reflect"),
    _pad("15b pad replicate 2 64x64", "replicate"),
    _pad("15c pad circular 2 64x64", "circular"),
    _pad("15d pad constant 2 64x64", "constant"),
    MapCase("16a pixel_shuffle r2 32->64", "pixel_shuffle", (8, 32, 32, 128), (2, 3, 3, 8),
            partial(Function, F.pixel_shuffle, upscale_factor=2), {"upscale_factor": 2}),
    MapCase("16b pixel_unshuffle r2 64->32", "pixel_unshuffle", (8, 64, 64, 32),
            (2, 6, 6, 2), partial(Function, F.pixel_unshuffle, downscale_factor=2),
            {"downscale_factor": 2}),
    _adaptive("17a adaptive_avg 64->8", "avg", 8),
    _adaptive("17b adaptive_avg 64->7", "avg", 7),
    _adaptive("17c adaptive_max 64->8", "max", 8),
    _adaptive("17d adaptive_max 64->7", "max", 7),
    RMSNormCase("18 rms_norm N32 T128 d256", "rms_norm", (32, 128, 256), (2, 5, 256),
                _rms_module(256)),
    EncoderLayerCase("19 encoder layer N16 T128 E128 h8", 16, 128, 128, 8, 512),
]
