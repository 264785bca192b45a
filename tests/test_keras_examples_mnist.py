"""Sequential takes a leading hg.Input as Keras's ``Sequential([keras.Input(shape), ...])``."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers


def test_sequential_takes_a_leading_input_as_keras():
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    made = hg.Sequential([hg.Input((6,)), layers.Dense(3)], seed=1)
    given = hg.Sequential([layers.Dense(3)], input_shape=(6,), seed=1)
    assert made.input_shape == given.input_shape == (6,)
    assert len(made.layers) == 1
    np.testing.assert_array_equal(made.predict(x), given.predict(x))
    with pytest.raises(TypeError, match="an Input goes first"):
        made.add(hg.Input((3,)))
    with pytest.raises(ValueError, match=r"'input_shape' \(5,\) differs"):
        hg.Sequential([hg.Input((6,)), layers.Dense(3)], input_shape=(5,))
    with pytest.raises(ValueError, match="free"):
        hg.Sequential([hg.Input((None,)), layers.Dense(3)])
    with pytest.raises(TypeError, match="not the output of a layer call"):
        hg.Sequential([layers.Dense(3)(hg.Input((6,))), layers.Dense(3)])
