"""Every ``dtype`` argument takes float32 or float64 (as a name, type or dtype) and refuses
everything else with a TypeError naming the argument and the value received.

The trap: ``np.dtype("bfloat16")`` raises, a parser that turned that into ``None`` then
compared ``None`` with float64, and under NumPy 2 ``np.dtype("float64") == None`` is True,
so unknown names built float32 weights without a word.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from handgrad import initializers, zoo
from handgrad import layers as L
from handgrad.model import Input, Model, Sequential
from handgrad.testing.layer_cases import LAYER_CASES

#: Names NumPy does not know, then dtypes it knows that handgrad does not compute in.
REFUSED = ["nonsense", "bfloat16", "float16", np.float16, "int32", np.complex64, ">f8",
           "float32, float32"]


def _takes_dtype(cls) -> bool:
    parameters = inspect.signature(cls).parameters.values()
    return any(p.name == "dtype" or p.kind is p.VAR_KEYWORD for p in parameters)


def _layer_entry(name):
    def make(dtype):
        layer, _ = LAYER_CASES[name](np.random.default_rng(0))
        return type(layer).from_config({**layer.get_config(), "dtype": dtype})
    return make


def _graph_model(dtype):
    x = Input((3,))
    return Model(x, L.Dense(2)(x), dtype=dtype)


def _load_word2vec_format(dtype, tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("1 2\nword 0.5 0.25\n")
    return zoo.load_word2vec_format(path, dtype=dtype)


ENTRIES = {
    **{f"layer:{name}": _layer_entry(name) for name in sorted(LAYER_CASES)
       if _takes_dtype(type(LAYER_CASES[name](np.random.default_rng(0))[0]))},
    "Layer.build": lambda dtype: L.Dense(2).build((3,), dtype=dtype),
    "Sequential": lambda dtype: Sequential([L.Dense(2)], dtype=dtype, input_shape=(3,)),
    "Sequential.build": lambda dtype: Sequential([L.Dense(2)]).build((3,), dtype=dtype),
    "Model": _graph_model,
    **{f"initializers.{name}": (lambda dtype, name=name: initializers.get(name)(
        (3, 2), dtype=dtype, rng=0)) for name in ("glorot_uniform", "he_normal", "zeros",
                                                   "torch_default", "truncated_normal")},
    "zoo.resnet1d": lambda dtype: zoo.resnet1d(3, (16, 1), dtype=dtype, seed=0),
    "zoo.VAE": lambda dtype: zoo.VAE(latent_dim=2, hidden=(4,), dtype=dtype),
    "zoo.RBM": lambda dtype: zoo.RBM(n_hidden=3, dtype=dtype),
    "zoo.WGANGP": lambda dtype: zoo.WGANGP((4,), latent_dim=2, hidden=(4,), dtype=dtype),
    "zoo.Word2Vec": lambda dtype: zoo.Word2Vec(dtype=dtype),
}


def _expect_refusal(make, dtype):
    received = re.escape(repr(dtype))
    with pytest.raises(TypeError, match=rf"'dtype' must be float32 or float64.*received "
                                        rf"{received}"):
        make(dtype)


def test_the_table_covers_layers_models_ops_and_the_zoo():
    assert sum(key.startswith("layer:") for key in ENTRIES) >= 20


@pytest.mark.parametrize("dtype", REFUSED, ids=repr)
@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_every_dtype_argument_refuses_what_is_not_float32_or_float64(entry, dtype):
    _expect_refusal(ENTRIES[entry], dtype)


@pytest.mark.parametrize("dtype", REFUSED, ids=repr)
def test_load_word2vec_format_refuses_the_dtype_before_reading(dtype, tmp_path):
    _expect_refusal(lambda d: _load_word2vec_format(d, tmp_path), dtype)


@pytest.mark.parametrize("entry", ["Layer.build", "Sequential", "Model", "zoo.Word2Vec",
                                   "initializers.zeros"])
@pytest.mark.parametrize("dtype", ["float64", np.float64, np.dtype("float64"), "f8", float])
def test_float64_in_any_spelling_is_accepted(entry, dtype):
    made = ENTRIES[entry](dtype)
    assert made.dtype == np.float64


@pytest.mark.parametrize("dtype", [d for d in REFUSED if d != "int32"], ids=repr)
def test_input_refuses_float_dtypes_other_than_float32_or_float64(dtype):
    _expect_refusal(lambda d: Input((2,), dtype=d), dtype)


def test_input_keeps_integer_dtypes_for_ids():
    assert Input((5,), dtype="int64").dtype == np.int64
    assert Input((5,), dtype=None).dtype is None
