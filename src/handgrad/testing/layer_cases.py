"""Random layer configurations for gradient checking (``python -m handgrad gradcheck``
and the layer contract tests): layer name -> ``draw(rng) -> (layer, input_shape)``."""

from __future__ import annotations

import inspect

from .. import layers as L
from .. import ops
from ..model.sequential import Sequential
from .keras_cases import KERAS_CASES

F64 = "float64"


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


_CONVS = {(n, t): getattr(L, f"Conv{'Transpose' if t else ''}{n}D")
          for n in (1, 2, 3) for t in (False, True)}


def _conv(rank, transposed):
    cls = _CONVS[rank, transposed]

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
            layer = cls(out, kernel, stride=stride, padding=_pick(rng, [0, 1]),
                        output_padding=output_padding, dilation=dilation, groups=groups,
                        bias=bool(rng.integers(2)), dtype=F64)
        else:
            paddings = ["valid", "same", 1] + (["causal"] if rank == 1 else [])
            layer = cls(out, kernel, stride=stride, padding=_pick(rng, paddings),
                        dilation=dilation, groups=groups, bias=bool(rng.integers(2)), dtype=F64,
                        padding_mode=_pick(rng, ["zeros", "reflect", "replicate", "circular"]))
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
    "Conv3D": _conv(3, False),
    "ConvTranspose3D": _conv(3, True),
    "MaxPool1D": _pool(L.MaxPool1D, 1, False),
    "MaxPool2D": _pool(L.MaxPool2D, 2, False),
    "MinPool1D": _pool(L.MinPool1D, 1, False),
    "MinPool2D": _pool(L.MinPool2D, 2, False),
    "AvgPool1D": _pool(L.AvgPool1D, 1, True),
    "AvgPool2D": _pool(L.AvgPool2D, 2, True),
    "MaxPool3D": _pool(L.MaxPool3D, 3, False),
    "AvgPool3D": _pool(L.AvgPool3D, 3, True),
    "GlobalAvgPool1D": _simple(lambda rng: L.GlobalAvgPool1D(), (6, 3)),
    "GlobalAvgPool2D": _simple(lambda rng: L.GlobalAvgPool2D(), (4, 5, 3)),
    "GlobalMaxPool1D": _simple(lambda rng: L.GlobalMaxPool1D(), (6, 3)),
    "GlobalMaxPool2D": _simple(lambda rng: L.GlobalMaxPool2D(keepdims=bool(rng.integers(2))),
                               (4, 5, 3)),
    "AdaptiveAvgPool1D": _simple(lambda rng: L.AdaptiveAvgPool1D(_pick(rng, [1, 3, 4])), (7, 3)),
    "AdaptiveAvgPool2D": _simple(lambda rng: L.AdaptiveAvgPool2D(_pick(rng, [(2, 3), (None, 2)])),
                                 (5, 4, 2)),
    "AdaptiveMaxPool1D": _simple(lambda rng: L.AdaptiveMaxPool1D(_pick(rng, [2, 3])), (7, 3)),
    "AdaptiveMaxPool2D": _simple(lambda rng: L.AdaptiveMaxPool2D(_pick(rng, [(3, 2), 1])),
                                 (5, 4, 2)),
    "AdaptiveAvgPool3D": _simple(
        lambda rng: L.AdaptiveAvgPool3D(_pick(rng, [(2, 3, 2), (None, 1, 2)])), (3, 5, 4, 2)),
    "AdaptiveMaxPool3D": _simple(lambda rng: L.AdaptiveMaxPool3D(_pick(rng, [(2, 2, 3), 1])),
                                 (3, 5, 4, 2)),
    "LPPool1D": _simple(lambda rng: L.LPPool1D(_pick(rng, [1, 2]), 3, 2, True), (7, 3)),
    "LPPool2D": _simple(lambda rng: L.LPPool2D(_pick(rng, [2, 4]), (2, 3), 1), (4, 5, 2)),
    "LocalResponseNorm": _simple(lambda rng: L.LocalResponseNorm(_pick(rng, [2, 3, 4]), 0.7,
                                                                 0.9, 1.5), (4, 3, 5)),
    "GlobalAvgPool3D": _simple(lambda rng: L.GlobalAvgPool3D(), (3, 4, 2, 3)),
    "GlobalMaxPool3D": _simple(lambda rng: L.GlobalMaxPool3D(keepdims=bool(rng.integers(2))),
                               (3, 4, 2, 3)),
    "Dense": _simple(lambda rng: L.Dense(int(rng.integers(1, 5)), bias=bool(rng.integers(2)),
                                         dtype=F64, seed=int(rng.integers(1000))), (3, 4)),
    "SparseEvolution": _simple(lambda rng: L.SparseEvolution(
        int(rng.integers(2, 6)), epsilon=float(rng.uniform(0.5, 2)), bias=bool(rng.integers(2)),
        dtype=F64, seed=int(rng.integers(1000))), (3, 4)),
    "Flatten": _simple(lambda rng: L.Flatten(), (3, 2, 2)),
    "Upsample": _simple(lambda rng: _pick(rng, [
        L.Upsample(scale_factor=1.5, mode="bilinear"), L.Upsample(size=(6, 3), mode="bicubic"),
        L.Upsample(scale_factor=(2, 0.5)), L.Upsample(size=(3, 2), mode="area")]), (4, 5, 2)),
    "UpsamplingNearest2D": _simple(lambda rng: L.UpsamplingNearest2D(scale_factor=2),
                                   (3, 4, 2)),
    "UpsamplingBilinear2D": _simple(lambda rng: L.UpsamplingBilinear2D(size=(5, 7)),
                                    (3, 4, 2)),
    "AffineGrid": lambda rng: _pick(rng, [(L.AffineGrid((4, 5, 2)), (2, 3)), (
        L.AffineGrid((3, 2, 4, 1), align_corners=True), (3, 4))]),
    "Reshape": _simple(lambda rng: L.Reshape((4, -1)), (2, 6)),
    "Dropout": _simple(lambda rng: L.Dropout(float(rng.uniform(0.1, 0.6)),
                                             seed=int(rng.integers(1000))), (5, 4)),
}


def _dropout(cls, shape, modes=None):
    return _simple(lambda rng: cls(float(rng.uniform(0.1, 0.6)), *(
        [_pick(rng, modes)] if modes else []), seed=int(rng.integers(1000))), shape)


# The other random layers (layers/dropout.py): whole channels, alpha dropout.
LAYER_CASES.update({
    "Dropout1D": _dropout(L.Dropout1D, (5, 4)),
    "Dropout2D": _dropout(L.Dropout2D, (3, 2, 4)),
    "Dropout3D": _dropout(L.Dropout3D, (2, 2, 2, 3)),
    "AlphaDropout": _dropout(L.AlphaDropout, (5, 4)),
    "FeatureAlphaDropout": _dropout(L.FeatureAlphaDropout, (3, 2, 4)),
    "StochasticDepth": _dropout(L.StochasticDepth, (3, 2, 4), ["row", "batch"]),
})



def _activation(decl):
    """An activation layer with one of its op's declared samples of hyper-parameters."""
    cls = getattr(L, decl.layer)
    return _simple(lambda rng: cls(**_pick(rng, decl.samples)), (5, 4))


# One case per declared activation (ops/declare.py).
LAYER_CASES.update({decl.layer: _activation(decl) for decl in ops.DECLARED.values()
                    if decl.layer})
LAYER_CASES.update({
    "PReLU": lambda rng: (L.PReLU(_pick(rng, [1, 4]), float(rng.uniform(-0.5, 0.5)),
                                  dtype=F64), (5, 4)),
    "GLU": lambda rng: (L.GLU(_pick(rng, [-1, 1])), (6, 4)),
    # lower == upper: one slope, so training and evaluation agree as the contract checks
    # (the random slopes: tests/test_gated_activations.py)
    "RReLU": lambda rng: (L.RReLU(0.3, 0.3, seed=int(rng.integers(1000))), (5, 4)),
})


# Attention and structure layers. Dropout stays 0 (the contract compares training and
# evaluation outputs); WaveNetBlock drops its skip branch (skip_channels=0), whose weights
# get no gradient through forward/backward alone (its skip path is tested in
# tests/test_structure.py). Add, Multiply, Concatenate, CosineSimilarity,
# PairwiseDistance and Bilinear take a list of inputs, so
# they are tested in tests/test_structure.py instead (MULTI_INPUT_LAYERS).
def _attention(rng):
    # The key bias gets an exactly-zero gradient (softmax ignores a per-row shift), which
    # finite differences cannot check relatively: only the packed form (one b_in) has bias.
    causal, embed, packed = bool(rng.integers(2)), _pick(rng, [4, 6]), bool(rng.integers(2))
    layer = L.MultiHeadAttention(embed, _pick(rng, [1, 2]), bias=packed, packed=packed,
                                 causal=causal, dtype=F64, seed=int(rng.integers(1000)))
    return layer, (int(rng.integers(3, 6)), embed)


def _residual(rng):
    if rng.integers(2):  # identity shortcut
        block = [L.Conv2D(3, 3, padding="same"), L.Tanh(), L.Conv2D(3, 3, padding="same")]
        return L.Residual(Sequential(block), dtype=F64), (5, 4, 3)
    block = [L.Conv2D(4, 3, stride=2, padding="same"), L.Tanh(), L.Conv2D(4, 3, padding=1)]
    shortcut = L.Conv2D(4, 1, stride=2, bias=False)
    return L.Residual(Sequential(block), shortcut, dtype=F64), (5, 4, 3)


def _wavenet(rng):
    channels = int(rng.integers(2, 4))
    layer = L.WaveNetBlock(channels, int(rng.integers(1, 4)), int(rng.integers(1, 4)),
                           skip_channels=0, dtype=F64)
    return layer, (6, channels)


def _encoder_layer(rng):
    heads = _pick(rng, [1, 2])
    return L.TransformerEncoderLayer(
        4, heads, int(rng.integers(3, 7)), dropout=0.0, activation=_pick(rng, ["relu", "gelu"]),
        norm_first=bool(rng.integers(2)), causal=bool(rng.integers(2)), dtype=F64,
        seed=int(rng.integers(1000))), (3, 4)


def _encoder(rng):
    layer, shape = _encoder_layer(rng)
    norm = L.LayerNorm(4) if rng.integers(2) else None
    return L.TransformerEncoder(layer, 2, norm, dtype=F64, seed=int(rng.integers(1000))), shape


LAYER_CASES.update({"MultiHeadAttention": _attention, "Residual": _residual,
                    "WaveNetBlock": _wavenet, "TransformerEncoderLayer": _encoder_layer,
                    "TransformerEncoder": _encoder})
# MaxUnpool takes [x, indices]: tested in test_pooling_extra; GridSample takes [x, grid]:
# tested in test_spatial_transformer; the transformer decoders take [tgt, memory] or
# [src, tgt]: tests/test_transformer_layers.py.
MULTI_INPUT_LAYERS = ("Add", "Multiply", "Concatenate", "Subtract", "Average", "Maximum",
                      "Minimum", "CosineSimilarity", "PairwiseDistance",
                      "Bilinear", "MaxUnpool1D", "MaxUnpool2D", "MaxUnpool3D", "GridSample",
                      "TransformerDecoderLayer", "TransformerDecoder", "Transformer", "MatMul")


# Normalization layers, with and without running statistics. Every statistic covers >= 4
# values: with 2, the normalized output barely depends on x and finite differences of it
# are noise.
def _norm_case(factory, shapes):
    def draw(rng):
        return factory(rng), _pick(rng, shapes)

    return draw


def _flag(rng):
    return bool(rng.integers(2))


LAYER_CASES.update({
    "BatchNorm": _norm_case(lambda rng: L.BatchNorm(affine=_flag(rng),
                                                    track_running_stats=_flag(rng),
                                                    dtype=F64), [(5, 3), (3, 4, 2)]),
    "LayerNorm": _norm_case(lambda rng: L.LayerNorm(axes=_pick(rng, [1, 2]),
                                                    elementwise_affine=_flag(rng),
                                                    bias=_flag(rng), dtype=F64), [(3, 4)]),
    "RMSNorm": _norm_case(lambda rng: L.RMSNorm(axes=_pick(rng, [1, 2]),
                                                elementwise_affine=_flag(rng), dtype=F64),
                          [(3, 4)]),
    "GroupNorm": _norm_case(lambda rng: L.GroupNorm(_pick(rng, [1, 2, 4]), affine=_flag(rng),
                                                    dtype=F64), [(5, 4), (3, 2, 4)]),
    "InstanceNorm": _norm_case(lambda rng: L.InstanceNorm(affine=_flag(rng),
                                                          track_running_stats=_flag(rng),
                                                          dtype=F64),
                               [(5, 3), (3, 4, 2)]),
})


def _embedding(rng):
    vocabulary = int(rng.integers(3, 9))
    layer = L.Embedding(vocabulary, int(rng.integers(1, 5)),
                        padding_idx=_pick(rng, [None, 0, -1]), dtype=F64)
    return layer, _pick(rng, [(4,), (3, 2)])


# Layers whose input is integer ids (no float input, no dx): the float-input contract cannot
# drive them, so tests/test_embedding.py runs the contract for these draws instead.
def _embedding_bag(rng):
    layer = L.EmbeddingBag(int(rng.integers(3, 9)), int(rng.integers(1, 5)),
                           mode=_pick(rng, ["sum", "mean", "max"]),
                           padding_idx=_pick(rng, [None, 0, -1]), dtype=F64)
    return layer, _pick(rng, [(4,), (1,)])


INTEGER_INPUT_CASES = {"Embedding": _embedding, "EmbeddingBag": _embedding_bag}


# Recurrent layers: small sizes, random depth, direction, bias, output mode and projection.
def _recurrent(cls):
    def draw(rng):
        # torch's projected LSTM (P = 1 < H) first, so that seeds 0 and 2 draw it
        kwargs = {"proj_size": _pick(rng, [0, 1])} if cls is L.LSTM else {}
        kwargs.update({"num_layers": _pick(rng, [1, 2]), "bias": _flag(rng),
                       "return_sequences": _flag(rng), "dtype": F64})
        if cls is L.RNN:
            kwargs["nonlinearity"] = _pick(rng, ["tanh", "relu"])
        if cls is not L.BiLSTM:
            kwargs["bidirectional"] = _flag(rng)
        return cls(int(rng.integers(2, 4)), **kwargs), (int(rng.integers(3, 6)), 3)

    return draw


LAYER_CASES.update({name: _recurrent(getattr(L, name))
                    for name in ("RNN", "LSTM", "GRU", "BiLSTM")})


def _cell(cls):
    def draw(rng):
        kwargs = {"bias": _flag(rng), "dtype": F64}
        if cls is L.RNNCell:
            kwargs["nonlinearity"] = _pick(rng, ["tanh", "relu"])
        return cls(int(rng.integers(2, 4)), **kwargs), (int(rng.integers(2, 5)),)

    return draw


LAYER_CASES.update({name: _cell(getattr(L, name)) for name in ("RNNCell", "LSTMCell", "GRUCell")})


# Padding layers: padding up to the axis size (circular) or below it (reflect), as an int
# or in torch's last-axis-first order; ConstantPad draws a value.
def _padding(cls):
    def draw(rng):
        spatial = tuple(int(rng.integers(3, 6)) for _ in range(cls.rank))
        padding = _pick(rng, [int(rng.integers(0, 3)), tuple(
            int(rng.integers(0, 3)) for _ in range(2 * cls.rank))])
        extra = {} if issubclass(cls, L.padding.FixedModePad) else {
            "value": float(rng.uniform(-1, 1))}
        return cls(padding, dtype=F64, **extra), (*spatial, 2)

    return draw


LAYER_CASES.update({f"{kind}Pad{rank}D": _padding(getattr(L, f"{kind}Pad{rank}D"))
                    for kind in ("Zero", "Constant", "Reflection", "Replication", "Circular")
                    for rank in (1, 2, 3)})


LAYER_CASES.update({
    "PixelShuffle": lambda rng: (L.PixelShuffle(_pick(rng, [2, 3])), (2, 3, 36)),
    "PixelUnshuffle": lambda rng: (L.PixelUnshuffle(_pick(rng, [2, 3])), (6, 6, 2)),
    "ChannelShuffle": lambda rng: (L.ChannelShuffle(_pick(rng, [2, 3, 6])),
                                   _pick(rng, [(6,), (3, 6), (2, 3, 6)])),
    "Unfold": lambda rng: (L.Unfold(_pick(rng, [2, (3, 2)]), dilation=_pick(rng, [1, 2]),
                                    padding=_pick(rng, [0, 1]), stride=_pick(rng, [1, 2])),
                           (6, 5, 2)),
    "Fold": lambda rng: (L.Fold((5, 6), (2, 3), padding=(1, 0), stride=(2, 1)), (12, 12)),
    # seeded: gradcheck restores the generator's state, so every forward pools the same
    # regions
    "FractionalMaxPool2D": lambda rng: (L.FractionalMaxPool2D(
        _pick(rng, [2, (3, 2)]), **_pick(rng, [{"output_size": (3, 4)},
                                              {"output_ratio": 0.6}]),
        seed=int(rng.integers(1000))), (7, 8, 2)),
    "FractionalMaxPool3D": lambda rng: (L.FractionalMaxPool3D(
        2, output_size=(2, 3, 2), seed=int(rng.integers(1000))), (6, 6, 5, 2)),
})


# Keras's class names (layers/keras_layers.py) with Keras's spellings, and Activation("name")
def _keras(name, make, rank):
    """The alias ``name`` made by ``make(cls)`` on a map of ``rank`` spatial axes."""
    return _simple(lambda rng: make(getattr(L, name)), (3, 4, 3)[3 - rank:] + (2,))


LAYER_CASES.update({
    **{f"MaxPooling{r}D": _pool(getattr(L, f"MaxPooling{r}D"), r, False) for r in (1, 2, 3)},
    **{f"AveragePooling{r}D": _pool(getattr(L, f"AveragePooling{r}D"), r, True) for r in (1, 2, 3)},
    **{f"Global{kind}Pooling{r}D": _keras(f"Global{kind}Pooling{r}D", lambda c: c(), r)
       for kind in ("Average", "Max") for r in (1, 2, 3)},
    **{f"Conv{r}DTranspose": _keras(f"Conv{r}DTranspose", lambda c: c(
        filters=2, kernel_size=2, strides=2, dtype=F64), r) for r in (1, 2, 3)},
    **{f"SpatialDropout{r}D": _dropout(getattr(L, f"SpatialDropout{r}D"), (3, 4, 3)[3 - r:] + (2,))
       for r in (1, 2, 3)},
    **{f"UpSampling{r}D": _keras(f"UpSampling{r}D", lambda c: c(2), r) for r in (1, 2, 3)},
    **{f"ZeroPadding{r}D": _keras(f"ZeroPadding{r}D", lambda c: c(((1, 0),) * c.rank), r)
       for r in (1, 2, 3)},
    "BatchNormalization": _simple(lambda rng: L.BatchNormalization(dtype=F64), (4,)),
    "LayerNormalization": _simple(lambda rng: L.LayerNormalization(dtype=F64), (3, 4)),
    "Activation": _simple(lambda rng: L.Activation(_pick(rng, ["gelu", "softmax", "selu"])),
                          (3, 4)),
    **KERAS_CASES,  # Keras's reshaping layers, wrappers, Lambda, masking (keras_cases.py)
})
LAYER_CASES.update(KERAS_CASES)  # Keras's preprocessing and augmentation layers


def _seeded(draw):
    """The same draw, with a parameter seed taken from ``rng`` too, so that a layer
    built lazily from its first input gets the same weights for the same ``rng``."""

    def seeded_draw(rng):
        layer, shape = draw(rng)
        parameters = inspect.signature(type(layer)).parameters.values()
        takes_seed = any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in parameters)
        if takes_seed and layer.seed is None:
            layer.seed = int(rng.integers(2**31))
        return layer, shape

    return seeded_draw


LAYER_CASES = {name: _seeded(draw) for name, draw in LAYER_CASES.items()}


def _nested(entry) -> str:
    """A nested layer config ({"class", "config"}) as "Class" or "Sequential[A, B]"."""
    children = entry["config"].get("layers")
    return entry["class"] + (f"[{', '.join(map(_nested, children))}]" if children else "")


def describe_layer(layer) -> str:
    """The non-default parts of a layer's config, for tables."""
    config = {k: _nested(v) if isinstance(v, dict) and "class" in v else v
              for k, v in layer.get_config().items()
              if k not in ("name", "trainable", "dtype", "kernel_initializer",
                           "bias_initializer", "seed") and v is not None}
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in config.items())
