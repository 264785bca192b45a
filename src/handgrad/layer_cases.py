"""Random layer configurations for gradient checking (``python -m handgrad gradcheck``
and the layer contract tests): layer name -> ``draw(rng) -> (layer, input_shape)``."""

from __future__ import annotations

from . import layers as L

F64 = "float64"


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _conv(rank, transposed):
    def draw(rng):
        groups = _pick(rng, [1, 1, 2])
        kernel = tuple(int(rng.integers(1, 4)) for _ in range(rank))
        stride = tuple(int(rng.integers(1, 3)) for _ in range(rank))
        dilation = tuple(int(rng.integers(1, 3)) for _ in range(rank))
        spatial = tuple(int(rng.integers(5, 8)) for _ in range(rank))
        channels, out = 2 * groups, 2 * groups
        if transposed:
            output_padding = tuple(int(rng.integers(0, max(s, d)))
                                   for s, d in zip(stride, dilation))
            cls = L.ConvTranspose1D if rank == 1 else L.ConvTranspose2D
            layer = cls(out, kernel, stride=stride, padding=_pick(rng, [0, 1]),
                        output_padding=output_padding, dilation=dilation, groups=groups,
                        bias=bool(rng.integers(2)), dtype=F64)
        else:
            paddings = ["valid", "same", 1] + (["causal"] if rank == 1 else [])
            cls = L.Conv1D if rank == 1 else L.Conv2D
            layer = cls(out, kernel, stride=stride, padding=_pick(rng, paddings),
                        dilation=dilation, groups=groups, bias=bool(rng.integers(2)), dtype=F64)
        return layer, (*spatial, channels)

    return draw


def _pool(cls, rank, avg):
    def draw(rng):
        kernel = int(rng.integers(2, 4))
        kwargs = {"stride": int(rng.integers(1, 3)), "padding": int(rng.integers(0, 2)),
                  "ceil_mode": bool(rng.integers(2))}
        if avg:
            kwargs["count_include_pad"] = bool(rng.integers(2))
        spatial = tuple(int(rng.integers(5, 8)) for _ in range(rank))
        return cls(kernel, **kwargs), (*spatial, 3)

    return draw


def _simple(factory, shape):
    return lambda rng: (factory(rng), shape)


LAYER_CASES = {
    "Conv1D": _conv(1, False),
    "Conv2D": _conv(2, False),
    "ConvTranspose1D": _conv(1, True),
    "ConvTranspose2D": _conv(2, True),
    "MaxPool1D": _pool(L.MaxPool1D, 1, False),
    "MaxPool2D": _pool(L.MaxPool2D, 2, False),
    "AvgPool1D": _pool(L.AvgPool1D, 1, True),
    "AvgPool2D": _pool(L.AvgPool2D, 2, True),
    "GlobalAvgPool1D": _simple(lambda rng: L.GlobalAvgPool1D(), (6, 3)),
    "GlobalAvgPool2D": _simple(lambda rng: L.GlobalAvgPool2D(), (4, 5, 3)),
    "GlobalMaxPool1D": _simple(lambda rng: L.GlobalMaxPool1D(), (6, 3)),
    "GlobalMaxPool2D": _simple(lambda rng: L.GlobalMaxPool2D(keepdims=bool(rng.integers(2))),
                               (4, 5, 3)),
    "Dense": _simple(lambda rng: L.Dense(int(rng.integers(1, 5)), bias=bool(rng.integers(2)),
                                         dtype=F64), (3, 4)),
    "Flatten": _simple(lambda rng: L.Flatten(), (3, 2, 2)),
    "Reshape": _simple(lambda rng: L.Reshape((4, -1)), (2, 6)),
    "Dropout": _simple(lambda rng: L.Dropout(float(rng.uniform(0.1, 0.6)),
                                             seed=int(rng.integers(1000))), (5, 4)),
    "ReLU": _simple(lambda rng: L.ReLU(), (5, 4)),
    "LeakyReLU": _simple(lambda rng: L.LeakyReLU(negative_slope=float(rng.uniform(0, 0.5))),
                         (5, 4)),
    "ELU": _simple(lambda rng: L.ELU(alpha=float(rng.uniform(0.5, 2))), (5, 4)),
    "SELU": _simple(lambda rng: L.SELU(), (5, 4)),
    "GELU": _simple(lambda rng: L.GELU(approximate=_pick(rng, ["none", "tanh"])), (5, 4)),
    "Tanh": _simple(lambda rng: L.Tanh(), (5, 4)),
    "Sigmoid": _simple(lambda rng: L.Sigmoid(), (5, 4)),
    "Softplus": _simple(lambda rng: L.Softplus(beta=float(rng.uniform(0.5, 2))), (5, 4)),
    "HardSigmoid": _simple(lambda rng: L.HardSigmoid(), (5, 4)),
    "Softmax": _simple(lambda rng: L.Softmax(axis=_pick(rng, [-1, 1])), (5, 4)),
    "LogSoftmax": _simple(lambda rng: L.LogSoftmax(axis=_pick(rng, [-1, 1])), (5, 4)),
    "Identity": _simple(lambda rng: L.Identity(), (5, 4)),
}


def describe_layer(layer) -> str:
    """The non-default parts of a layer's config, for tables."""
    config = {k: v for k, v in layer.get_config().items()
              if k not in ("name", "trainable", "dtype", "kernel_initializer",
                           "bias_initializer", "seed") and v is not None}
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in config.items())
