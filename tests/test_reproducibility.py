"""A seeded model is reproducible, random layers included.

A layer that draws random numbers (``Layer.draws_random``: Dropout, attention dropout)
and has no seed of its own takes its generator from the model's build generator and its
place among the random layers, as the weights do; before, it was seeded by the operating
system, so the same seeded script gave other weights on every run. Its generator's state
is the layer's extra state: a checkpoint continues the stream.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import handgrad
from handgrad import io, optimizers
from handgrad import layers as L
from handgrad.model import Input, Model, Sequential

TIMEOUT = 120  # seconds for one training process

TRAIN = """
import sys
import numpy as np
from handgrad import layers as L, optimizers
from handgrad.model import Sequential

rng = np.random.default_rng(0)
x, y = rng.standard_normal((40, 6)), rng.integers(0, 3, 40)
net = Sequential([L.Dense(16), L.ReLU(), L.Dropout(0.5), L.Dense(3)], seed=5, dtype="float64",
                 input_shape=(6,))
net.compile(optimizers.SGD(lr=0.1), "cross_entropy")
net.fit(x, y, epochs=2, batch_size=8, rng=1, verbose=0)
np.savez(sys.argv[1], **net.named_parameters())
"""


def _train_in_a_process(path):
    env = {**os.environ, "PYTHONPATH": str(Path(handgrad.__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", TRAIN, str(path)], env=env, timeout=TIMEOUT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return dict(np.load(path))


def test_a_seeded_model_with_dropout_trains_to_the_same_bits_in_two_processes(tmp_path):
    first = _train_in_a_process(tmp_path / "first.npz")
    second = _train_in_a_process(tmp_path / "second.npz")
    assert first.keys() == second.keys() and "dense_3.W" in first
    for name in first:
        assert first[name].tobytes() == second[name].tobytes(), name


def _model(seed=0, layers=None):
    layers = layers or [L.Dense(8), L.Dropout(0.5), L.Dense(8), L.Dropout(0.5), L.Dense(2)]
    return Sequential(layers, seed=seed, input_shape=(4,), dtype="float64")


def _masks(net, steps=3):
    """Each Dropout's training output on ones, ``steps`` times: its masks."""
    ones = np.ones((5, 8))
    return [[layer.forward(ones) for _ in range(steps)] for layer in net
            if isinstance(layer, L.Dropout)]


def test_the_stream_follows_the_model_seed_and_the_layer_s_place():
    first, again, other = _masks(_model(0)), _masks(_model(0)), _masks(_model(1))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], other[0])  # another model seed, another stream
    assert not np.array_equal(first[0], first[1])  # two places, two streams


def test_a_layer_s_own_seed_still_decides_its_stream():
    mine = [L.Dense(8), L.Dropout(0.5, seed=3), L.Dense(2)]
    theirs = [L.Dense(8), L.Dropout(0.5, seed=3), L.Dense(2)]
    assert np.array_equal(_masks(_model(0, mine)), _masks(_model(1, theirs)))


def test_the_dropout_stream_leaves_the_weights_alone():
    with_dropout = _model(0).named_parameters()
    without = _model(0, [L.Dense(8), L.Identity(), L.Dense(8), L.Identity(), L.Dense(2)])
    assert list(with_dropout) == list(without.named_parameters())
    for name, value in without.named_parameters().items():
        assert np.array_equal(with_dropout[name], value), name


def test_graph_models_and_attention_dropout_take_the_model_seed():
    def build():
        x = Input((3, 4))
        h = L.MultiHeadAttention(4, 2, dropout=0.5)(x)
        return Model(x, L.Dense(2)(L.Dropout(0.3)(h)), seed=2, dtype="float64")

    x = np.random.default_rng(0).standard_normal((3, 3, 4))
    first, second = build(), build()
    assert set(first.extra_state()) == {"multi_head_attention_0", "dropout_1"}
    assert first.extra_state() == second.extra_state()
    for _ in range(2):
        np.testing.assert_array_equal(first.forward(x), second.forward(x))


def test_a_loaded_checkpoint_continues_the_dropout_stream(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((24, 4)), rng.integers(0, 2, 24)
    net = _model(0)
    net.compile(optimizers.SGD(lr=0.1), "cross_entropy")
    net.fit(x, y, epochs=1, batch_size=8, rng=1, verbose=0)  # the streams moved on
    path = tmp_path / "checkpoint.safetensors"
    io.save_checkpoint(path, net, net.optimizer, epoch=1)
    loaded = io.load_checkpoint(path).model
    assert loaded.extra_state() == net.extra_state()
    assert loaded.extra_state() != _model(0).extra_state()  # not a fresh model's streams
    np.testing.assert_array_equal(loaded.forward(x, training=True),
                                  net.forward(x, training=True))
