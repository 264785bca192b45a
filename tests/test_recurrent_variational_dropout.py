"""Keras's recurrent dropout: ``input_dropout`` (Keras's ``dropout``) and
``recurrent_dropout`` of RNN/LSTM/GRU.

Keras semantics relied on (Keras 3 ``DropoutRNNCell``; Keras 2's default
``implementation=2``): in training, one inverted-dropout mask per sequence (values 0 or
1/(1-p)), the same at every time step and for every gate, multiplies the cell's inputs
x_t, and another multiplies the state h_{t-1} where it feeds the gates (h_{t-1} W_hh);
the LSTM's c and the GRU's direct path z h_{t-1} are not masked; no dropout in inference.
"""

import numpy as np
import pytest

from handgrad import io as hio
from handgrad import layers as L
from handgrad import ops
from handgrad.model import Sequential
from handgrad.ops import reference
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient

N, T, F, H = 3, 4, 5, 3
GATES = {"rnn": 1, "lstm": 4, "gru": 3}
OPS = {"rnn": (ops.rnn, ops.rnn_backward), "lstm": (ops.lstm, ops.lstm_backward),
       "gru": (ops.gru, ops.gru_backward)}
TWINS = {cell: (getattr(reference, cell), getattr(reference, f"{cell}_backward"))
         for cell in GATES}


def _case(cell, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    G = GATES[cell]
    arrays = [rng.standard_normal(s) * 0.5 for s in ((N, T, F), (F, G * H), (H, G * H),
                                                      (G * H,), (G * H,), (N, H))]
    masks = [(rng.random(s) >= 0.4) / 0.6 for s in ((N, F), (N, H))]
    dy = rng.standard_normal((N, T, H))
    return [a.astype(dtype) for a in arrays], [m.astype(dtype) for m in masks], dy.astype(dtype)


def _run(cell, arrays, masks=(None, None), kernel=OPS, lengths=None):
    forward, _ = kernel[cell]
    out = forward(*arrays, lengths=lengths, input_mask=masks[0], recurrent_mask=masks[1])
    return out[0], out[-1]


def _grads(cell, dy, cache, kernel=OPS):
    """(dx, dh0, dW_ih, dW_hh, db_ih, db_hh) (the LSTM's dc0 left out)."""
    out = kernel[cell][1](dy, cache)
    return out[:2] + out[3:] if cell == "lstm" else out


@pytest.mark.parametrize("cell", list(GATES))
def test_masks_equal_the_plain_kernel_on_masked_inputs_and_weights(cell):
    """x_t m_x is the plain kernel on the masked input; (h m_h) W_hh is, example by
    example, the plain kernel with W_hh's rows scaled by m_h (diag(m_h) W_hh)."""
    arrays, (m_x, m_h), dy = _case(cell)
    y, cache = _run(cell, arrays, (m_x, m_h))
    dx, dh0, dW_ih, dW_hh, db_ih, db_hh = _grads(cell, dy, cache)
    x, W_ih, W_hh, b_ih, b_hh, h0 = arrays
    grads = {k: 0.0 for k in ("W_ih", "W_hh", "b_ih", "b_hh")}
    for n in range(N):
        scaled = m_h[n][:, None] * W_hh
        one = [x[n:n + 1] * m_x[n], W_ih, scaled, b_ih, b_hh, h0[n:n + 1]]
        y_n, cache_n = _run(cell, one)
        assert_close(y[n], y_n[0], scale=1.0)
        g = _grads(cell, dy[n:n + 1], cache_n)
        assert_close(dx[n], g[0][0] * m_x[n], scale=1.0, what="dx")
        assert_close(dh0[n], g[1][0], scale=1.0, what="dh0")
        grads["W_ih"] += g[2]
        grads["W_hh"] += m_h[n][:, None] * g[3]  # d(diag(m) W)/dW = diag(m)
        grads["b_ih"] += g[4]
        grads["b_hh"] += g[5]
    for name, got in zip(grads, (dW_ih, dW_hh, db_ih, db_hh)):
        assert_close(got, grads[name], terms=N * T, scale=4.0, what=name)


@pytest.mark.parametrize("cell", list(GATES))
def test_loop_twin_agrees_with_masks_and_lengths(cell):
    arrays, masks, dy = _case(cell, seed=1)
    lengths = np.array([4, 2, 3])
    y, cache = _run(cell, arrays, masks, lengths=lengths)
    y_ref, cache_ref = _run(cell, arrays, masks, kernel=TWINS, lengths=lengths)
    assert_close(y, y_ref, scale=1.0)
    for got, want in zip(_grads(cell, dy, cache), _grads(cell, dy, cache_ref,
                                                         TWINS)):
        assert_close(got, want, terms=N * T, scale=4.0)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("cell", list(GATES))
def test_finite_differences_with_a_fixed_mask(cell, reverse):
    arrays, masks, dy = _case(cell, seed=2)
    forward, _ = OPS[cell]

    def loss():
        out = forward(*arrays, reverse=reverse, input_mask=masks[0], recurrent_mask=masks[1])
        return float((out[0] * dy).sum())

    cache = forward(*arrays, reverse=reverse, input_mask=masks[0],
                    recurrent_mask=masks[1])[-1]
    analytic = _grads(cell, dy, cache)
    for index, name in ((0, "x"), (1, "h0"), (2, "W_ih"), (3, "W_hh")):
        target = arrays[[0, 5, 1, 2][index]]
        numeric, error = numeric_gradient(loss, target, with_error=True)
        assert_gradient_close(analytic[index], numeric, error, what=f"{cell} d{name}")


def test_mask_shapes_and_dtypes_are_checked():
    arrays, (_, m_h), _ = _case("lstm")
    with pytest.raises(ValueError, match="'input_mask' must have shape"):
        ops.lstm(*arrays, input_mask=m_h)
    with pytest.raises(TypeError, match="recurrent_mask"):
        ops.lstm(*arrays, recurrent_mask=m_h.astype(np.float32))


def _x(seed=0):
    return np.random.default_rng(seed).standard_normal((N, T, F))


@pytest.mark.parametrize("option", ["input_dropout", "recurrent_dropout"])
@pytest.mark.parametrize("cls", [L.RNN, L.LSTM, L.GRU])
def test_layer_training_draws_seeded_masks_inference_has_none(cls, option):
    x = _x()
    a = cls(H, 2, bidirectional=True, dtype="float64", seed=3, **{option: 0.5})
    b = cls(H, 2, bidirectional=True, dtype="float64", seed=3, **{option: 0.5})
    plain = cls(H, 2, bidirectional=True, dtype="float64", seed=3)
    assert a.draws_random and not plain.draws_random
    first = a.forward(x, training=True)
    np.testing.assert_array_equal(first, b.forward(x, training=True))  # same seed
    assert not np.array_equal(first, a.forward(x, training=True))  # fresh masks a call
    np.testing.assert_array_equal(a.forward(x, training=False), plain.forward(x, False))
    assert not np.array_equal(first, plain.forward(x, training=True))


def test_layer_gradients_match_finite_differences_given_its_masks():
    """The layer's backward with the masks it drew: rerun with the same generator state."""
    layer = L.GRU(H, 2, input_dropout=0.3, recurrent_dropout=0.4, dtype="float64", seed=5)
    x = _x(1)
    dy = np.random.default_rng(2).standard_normal((N, T, H))
    layer.build((T, F))
    state = layer.rng.bit_generator.state
    layer.forward(x, training=True)
    dx = layer.backward(dy)

    def loss():
        layer.rng.bit_generator.state = state
        return float((layer.forward(x, training=True, grad=False) * dy).sum())

    numeric, error = numeric_gradient(loss, x, with_error=True)
    assert_gradient_close(dx, numeric, error, what="dx")


class _Rows:
    """A communicator that only tells which rows of the global batch a process holds."""

    def __init__(self, rows):
        self.rows = rows

    def allreduce(self, array):  # not called: the masks need the rows alone
        raise AssertionError("recurrent dropout needs no allreduce")


def test_data_parallel_shares_get_the_rows_of_the_global_batch_masks():
    x = np.random.default_rng(4).standard_normal((9, T, F))

    def make():
        return L.LSTM(H, 2, input_dropout=0.5, recurrent_dropout=0.5, dtype="float64", seed=6)

    whole = make().forward(x)
    parts = []
    for start, stop in ((0, 4), (4, 7), (7, 9)):
        layer = make()
        layer.register_communicator(_Rows((start, 9)))
        parts.append(layer.forward(x[start:stop]))
    assert_close(np.concatenate(parts), whole, scale=1.0)
    alone = make().forward(x[4:7])
    assert not np.allclose(alone, whole[4:7])  # without the rows, other masks


def test_options_survive_save_and_load_and_bidirectional(tmp_path):
    model = Sequential([L.Bidirectional(L.LSTM(H, input_dropout=0.25, recurrent_dropout=0.5)),
                        L.GRU(H, recurrent_dropout=0.1)], seed=0)
    model.build((T, F))
    path = tmp_path / "model.hg"
    hio.save(model, path)
    loaded = hio.load(path)
    inner = loaded.layers[0].forward_layer, loaded.layers[0].backward_layer
    for layer in inner:
        assert (layer.input_dropout, layer.recurrent_dropout) == (0.25, 0.5)
    assert loaded.layers[1].recurrent_dropout == 0.1
    x = _x(3).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


def test_keras_spelling_of_dropout_is_refused_with_the_argument_to_use():
    with pytest.raises(ValueError, match=r"input_dropout=0\.2"):
        L.LSTM(units=8, dropout=0.2)
    with pytest.warns(UserWarning, match=r"input_dropout=0\.2"):
        L.LSTM(8, dropout=0.2)
    assert L.LSTM(units=8, input_dropout=0.2, recurrent_dropout=0.1).input_dropout == 0.2
    with pytest.raises(ValueError, match="proj_size"):
        L.LSTM(8, proj_size=4, recurrent_dropout=0.1)
    with pytest.raises(ValueError, match="recurrent_dropout"):
        L.GRU(8, recurrent_dropout=1.0)
