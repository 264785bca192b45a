"""Residual CNNs written as graph Models: the defaults of ``python -m handgrad train``.

A residual block is ``ReLU(BN(conv(ReLU(BN(conv(x))))) + shortcut(x))``; the shortcut is
``x`` itself, or a 1x1 convolution and BatchNorm where the width changes. Stages are
separated by 2x max-pooling; a global average pool and a dense layer make the head.

    model = resnet1d(10, input_shape=(40, 1), seed=0)    # MNIST-1D
    model = resnet2d(10, input_shape=(8, 8, 1), seed=0)  # digits
"""

from __future__ import annotations

from .. import layers as L
from .._checks import describe, is_int
from ..model.graph import Input, Model

_FAMILY = {  # spatial rank -> (convolution, max-pool, global average pool)
    1: (L.Conv1D, L.MaxPool1D, L.GlobalAvgPool1D),
    2: (L.Conv2D, L.MaxPool2D, L.GlobalAvgPool2D),
}


def _ints(op, name, value, minimum, length=None):
    values = tuple(value) if isinstance(value, (tuple, list)) else None
    if (values is None or not values or not all(is_int(v) for v in values)
            or (length is not None and len(values) != length)):
        size = f"{length} " if length is not None else ""
        raise TypeError(f"{op}: '{name}' must be a non-empty tuple of {size}ints; received "
                        f"{describe(value)}")
    if any(v < minimum for v in values):
        raise ValueError(f"{op}: '{name}' must hold ints >= {minimum}; received {value!r}")
    return tuple(int(v) for v in values)


def _odd(op, name, value):
    if not is_int(value) or value < 1 or value % 2 == 0:
        raise ValueError(f"{op}: '{name}' must be an odd int >= 1 (the convolutions keep the "
                         f"length with padding kernel // 2); received {describe(value)}")
    return int(value)


def residual_block(x, width, kernel, rank, name):
    """One residual block on the tensor ``x`` (``rank`` spatial axes) -> a tensor."""
    conv = _FAMILY[rank][0]
    pad = kernel // 2
    h = conv(width, kernel, padding=pad, bias=False, name=f"{name}_conv1")(x)
    h = L.ReLU(name=f"{name}_relu1")(L.BatchNorm(name=f"{name}_bn1")(h))
    h = conv(width, kernel, padding=pad, bias=False, name=f"{name}_conv2")(h)
    h = L.BatchNorm(name=f"{name}_bn2")(h)
    shortcut = x
    if x.shape[-1] != width:
        shortcut = conv(width, 1, bias=False, name=f"{name}_proj")(x)
        shortcut = L.BatchNorm(name=f"{name}_proj_bn")(shortcut)
    return L.ReLU(name=f"{name}_out")(L.Add(name=f"{name}_add")([h, shortcut]))


def resnet(num_classes, input_shape, *, widths, blocks=None, stem_kernel=3, kernel=3,
           name="resnet", seed=None, dtype=None):
    """A residual CNN over inputs of per-example ``input_shape`` (``(L, C)`` or
    ``(H, W, C)``): a stem convolution of ``widths[0]`` channels (``stem_kernel``), then
    one stage per width with ``blocks[i]`` residual blocks (default one each), 2x
    max-pooling between stages, global average pooling and ``Dense(num_classes)``."""
    op = name
    if not is_int(num_classes) or num_classes < 1:
        raise ValueError(f"{op}: 'num_classes' must be an int >= 1; received "
                         f"{describe(num_classes)}")
    shape = _ints(op, "input_shape", input_shape, 1)
    if len(shape) - 1 not in _FAMILY:
        raise ValueError(f"{op}: 'input_shape' must be (L, C) or (H, W, C), without the "
                         f"batch axis; received {input_shape!r}")
    widths = _ints(op, "widths", widths, 1)
    blocks = _ints(op, "blocks", (1,) * len(widths) if blocks is None else blocks, 0,
                   len(widths))
    stem_kernel, kernel = _odd(op, "stem_kernel", stem_kernel), _odd(op, "kernel", kernel)
    rank = len(shape) - 1
    conv, pool, global_pool = _FAMILY[rank]
    inputs = Input(shape, name="x")
    h = conv(widths[0], stem_kernel, padding=stem_kernel // 2, bias=False, name="stem_conv")(
        inputs)
    h = L.ReLU(name="stem_relu")(L.BatchNorm(name="stem_bn")(h))
    for stage, (width, count) in enumerate(zip(widths, blocks, strict=True)):
        if stage > 0:
            if min(h.shape[:-1]) < 2:
                raise ValueError(f"{op}: input_shape {shape} is too small for "
                                 f"{len(widths)} stages (each after the first halves it)")
            h = pool(2, name=f"pool{stage}")(h)
        for index in range(count):
            h = residual_block(h, width, kernel, rank, f"stage{stage + 1}_block{index + 1}")
    logits = L.Dense(num_classes, name="logits")(global_pool(name="gap")(h))
    return Model(inputs, logits, name=name, seed=seed, dtype=dtype)


RESNET1D = {"widths": (64, 64, 128), "blocks": None, "stem_kernel": 5, "kernel": 3}
RESNET2D = {"widths": (32, 64), "blocks": None, "stem_kernel": 3, "kernel": 3}


def resnet1d(num_classes=10, input_shape=(40, 1), *, seed=None, dtype=None, **overrides):
    """The 1-D residual CNN for MNIST-1D: :data:`RESNET1D` (stem 64 channels of kernel 5;
    stages of 64, 64 and 128 channels, one block each), any setting overridable."""
    return resnet(num_classes, input_shape, **{**RESNET1D, **overrides}, name="resnet1d",
                  seed=seed, dtype=dtype)


def resnet2d(num_classes=10, input_shape=(8, 8, 1), *, seed=None, dtype=None, **overrides):
    """The 2-D residual CNN for small images (digits): :data:`RESNET2D` (stages of 32 and
    64 channels, one block each), any setting overridable."""
    return resnet(num_classes, input_shape, **{**RESNET2D, **overrides}, name="resnet2d",
                  seed=seed, dtype=dtype)
