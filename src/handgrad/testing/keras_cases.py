"""Layer cases (see :mod:`.layer_cases`) for Keras's reshaping layers, the wrappers,
``Lambda``, ``Masking`` and the preprocessing layers, the tensor operations of imported
models (``Roll``, ``Parameter``), and the registered layers outside the float contract:
layer name -> ``draw(rng) -> (layer, input_shape)``."""

from __future__ import annotations

import numpy as np

from .. import layers as L
from .._custom import register_custom

F64 = "float64"


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _cropping(rank):
    cls = getattr(L, f"Cropping{rank}D")

    def draw(rng):
        pairs = tuple((int(rng.integers(0, 2)), int(rng.integers(0, 3))) for _ in range(rank))
        spelling = _pick(rng, [int(rng.integers(0, 2)), pairs,
                               tuple(int(rng.integers(0, 2)) for _ in range(rank))])
        return cls(spelling), (*(5,) * rank, 2)

    return draw


# Registered (so that a config names them and loads back) under names of this module.
@register_custom("handgrad.testing.scaled_tanh")
def scaled_tanh(x):
    """y = 2 tanh(x), a Lambda case's function."""
    return 2 * np.tanh(x)


@register_custom("handgrad.testing.scaled_tanh_backward")
def scaled_tanh_backward(dy, x, y):
    """dx = dy (2 - y^2 / 2), from the cached y = 2 tanh(x)."""
    return dy * (2 - y * y / 2)


#: The Lambda case's callables by the names a saved file gives them (pass as
#: ``custom_objects`` to save and load).
CUSTOM_OBJECTS = {"handgrad.testing.scaled_tanh": scaled_tanh,
                  "handgrad.testing.scaled_tanh_backward": scaled_tanh_backward}


def _bidirectional(rng):
    cls = _pick(rng, [L.RNN, L.GRU, L.LSTM])
    inner = cls(int(rng.integers(2, 4)), return_sequences=bool(rng.integers(2)))
    merge_mode = _pick(rng, ["concat", "sum", "mul", "ave"])
    return L.Bidirectional(inner, merge_mode=merge_mode, dtype=F64), (int(rng.integers(3, 6)), 3)


def _time_distributed(rng):
    return _pick(rng, [(L.TimeDistributed(L.Dense(3), dtype=F64), (4, 2)),
                       (L.TimeDistributed(L.Conv1D(2, 3, padding="same"), dtype=F64), (3, 5, 2))])


KERAS_CASES = {
    "Permute": lambda rng: _pick(rng, [(L.Permute((2, 1)), (3, 4)),
                                       (L.Permute((3, 1, 2)), (2, 3, 4))]),
    "RepeatVector": lambda rng: (L.RepeatVector(int(rng.integers(1, 4))), (3,)),
    "Cropping1D": _cropping(1),
    "Cropping2D": _cropping(2),
    "Cropping3D": _cropping(3),
    "Bidirectional": _bidirectional,
    "TimeDistributed": _time_distributed,
    "Masking": lambda rng: (L.Masking(_pick(rng, [0.0, 0.5])), (4, 3)),
    "Lambda": lambda rng: (L.Lambda(scaled_tanh, backward=scaled_tanh_backward,
                                    output_shape=_pick(rng, [None, (3, 4)])), (3, 4)),
    # tensor operations (layers/tensor_ops.py; MatMul takes two inputs: MULTI_INPUT_LAYERS)
    "Roll": lambda rng: (L.Roll(*_pick(rng, [(1, 2), ((2, -1), (1, -1))])), (3, 4, 2)),
    "Parameter": lambda rng: (L.Parameter((2, 3), _pick(rng, [None, [[5, 0], [0, 2]]]),
                                          "glorot_uniform", dtype=F64), (3, 2)),
}


# Keras's preprocessing layers (layers/preprocessing.py) on floats: statistics given, so
# that the layer needs no adapt() (adapt is checked in tests/test_preprocessing_layers.py)
def _normalization(rng):
    if rng.integers(2):
        return L.Normalization(mean=rng.uniform(-1, 1, 4).tolist(),
                               variance=rng.uniform(0.5, 2, 4).tolist(),
                               invert=bool(rng.integers(2)), dtype=F64), (3, 4)
    return L.Normalization(axis=(1, 2), mean=rng.uniform(-1, 1, (2, 3, 1)).tolist(),
                           variance=rng.uniform(0.5, 2, (2, 3, 1)).tolist(), dtype=F64), (2, 3, 2)


KERAS_CASES.update({
    "Rescaling": lambda rng: (L.Rescaling(float(rng.uniform(-2, 2)),
                                          float(rng.uniform(-1, 1))), (3, 4)),
    "Normalization": _normalization,
})


# Augmentation (layers/augmentation.py): seeded, so a clone and gradcheck draw the same maps
# (bilinear only: a float32 grid could round a nearest tap differently from float64's)
def _augmentation(make):
    def draw(rng):
        fill = ["reflect", "constant", "nearest", "wrap"][int(rng.integers(4))]
        return make(rng, fill), (5, 6, 2)

    return draw


KERAS_CASES.update({
    "RandomFlip": _augmentation(lambda rng, fill: L.RandomFlip(
        ["horizontal", "vertical", "horizontal_and_vertical"][int(rng.integers(3))],
        seed=int(rng.integers(1000)))),
    "RandomRotation": _augmentation(lambda rng, fill: L.RandomRotation(
        float(rng.uniform(0.05, 0.5)), fill_mode=fill, fill_value=0.5,
        seed=int(rng.integers(1000)))),
    "RandomTranslation": _augmentation(lambda rng, fill: L.RandomTranslation(
        (-0.3, 0.2), 0.3, fill_mode=fill, seed=int(rng.integers(1000)))),
    "RandomZoom": _augmentation(lambda rng, fill: L.RandomZoom(
        0.3, [None, (-0.2, 0.4)][int(rng.integers(2))], fill_mode=fill,
        seed=int(rng.integers(1000)))),
    "RandomContrast": _augmentation(lambda rng, fill: L.RandomContrast(
        float(rng.uniform(0.1, 0.9)), seed=int(rng.integers(1000)))),
})

# Registered layers outside the float contract (float input, float output, a dx): their
# contract is checked in the named test file.
NON_FLOAT_LAYERS = {
    "CategoryEncoding": "integer ids in, no dx: tests/test_preprocessing_layers.py",
    "TextVectorization": "strings in, integer ids out: tests/test_text_vectorization.py",
}



# Keras's depthwise and separable convolutions (layers/separable.py)
def _depthwise(rank, separable):
    def draw(rng):
        kwargs = dict(strides=int(rng.integers(1, 3)), padding=_pick(rng, ["valid", "same"]),
                      depth_multiplier=int(rng.integers(1, 3)),
                      use_bias=bool(rng.integers(2)), dtype=F64)
        if kwargs["padding"] == "same":
            kwargs["strides"] = 1  # "same" takes stride 1 (as torch's)
        if separable:
            layer = getattr(L, f"SeparableConv{rank}D")(int(rng.integers(1, 4)), 3, **kwargs)
        else:
            layer = getattr(L, f"DepthwiseConv{rank}D")(3, **kwargs)
        return layer, (*(6,) * rank, int(rng.integers(1, 4)))

    return draw


KERAS_CASES.update({
    "DepthwiseConv1D": _depthwise(1, False),
    "DepthwiseConv2D": _depthwise(2, False),
    "SeparableConv1D": _depthwise(1, True),
    "SeparableConv2D": _depthwise(2, True),
})
