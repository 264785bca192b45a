"""Masks of padded steps: ``Masking`` and ``Embedding(mask_zero=True)`` make them;
recurrent layers, ``Bidirectional``, ``GlobalAvgPool1D``/``GlobalMaxPool1D`` and
``MultiHeadAttention`` honor them; ``Sequential`` and the graph ``Model`` carry them.

Keras semantics relied on (written down, Keras is not a dependency):
- ``Masking(mask_value)``: a step is masked when all its features equal mask_value; the
  layer outputs ``x * mask``. ``Embedding(mask_zero=True)``: id 0 is masked.
- A layer that does not consume the mask passes it on (Keras's ``compute_mask``:
  ``Dense`` on (N, T, F) keeps it); an RNN with ``return_sequences=True`` passes it, one
  that returns the last output drops it, and so do the global poolings.
- An RNN given a mask skips the masked steps: the state is carried over them, so the
  final output is the output at each sequence's last kept step; for the output sequence,
  Keras gives zeros at masked steps when ``zero_output_for_mask=True`` (what
  ``Bidirectional`` sets with ``return_sequences``; a lone RNN otherwise repeats the
  previous output there): handgrad gives zeros. A right-padded batch therefore equals
  running each sequence alone, trimmed to its true length.
- ``GlobalAveragePooling1D`` with a mask: ``sum(x * mask) / sum(mask)`` over time;
  ``GlobalMaxPooling1D``: the max over the kept steps.
- ``MultiHeadAttention``: the value's mask masks the keys (query positions attend only to
  kept steps).
"""

import numpy as np
import pytest

import handgrad
from handgrad import io
from handgrad import layers as L
from handgrad.layers.masking import MaskedPool
from handgrad.model import Sequential
from handgrad.testing import assert_close

N, T, F, H = 3, 6, 4, 3
LENGTHS = [6, 2, 4]
RNG = np.random.default_rng(0)


def padded(features=F):
    x = RNG.standard_normal((N, T, features))
    for n, length in enumerate(LENGTHS):
        x[n, length:] = 0.0
    return x


def per_example(run, x):
    """``run`` on each example alone, trimmed to its true length."""
    return [run(x[n:n + 1, :length]) for n, length in enumerate(LENGTHS)]


def masked_steps():
    return np.arange(T)[None, :] >= np.array(LENGTHS)[:, None]


@pytest.mark.parametrize("cls", [L.LSTM, L.GRU, L.RNN])
def test_recurrent_on_a_padded_batch_equals_the_trimmed_sequences_one_by_one(cls):
    x, dy = padded(), RNG.standard_normal((N, T, H))
    model = Sequential([L.Masking(0.0), cls(H)], dtype="float64", seed=1)
    y = model.forward(x)
    dx = model.backward(dy * ~masked_steps()[..., None])
    grads = {k: v.copy() for k, v in model.named_gradients().items()}
    assert np.all(y[masked_steps()] == 0) and np.all(dx[masked_steps()] == 0)
    model.zero_grad()
    rnn = model.layers[1]
    for n, length in enumerate(LENGTHS):
        alone = rnn.forward(x[n:n + 1, :length])
        assert_close(y[n, :length], alone[0], dtype=np.float64, terms=T * F)
        assert_close(dx[n, :length], rnn.backward(dy[n:n + 1, :length])[0],
                     dtype=np.float64, terms=T * F)
    for key, grad in model.named_gradients().items():  # the sum of the per-example ones
        assert_close(grads[key], grad, dtype=np.float64, terms=N * T * F, what=key)


def test_last_output_and_bidirectional_follow_each_true_length():
    x = padded()
    last = Sequential([L.Masking(), L.LSTM(H, return_sequences=False)], dtype="float64", seed=2)
    both = Sequential([L.Masking(), L.Bidirectional(L.GRU(H))], dtype="float64", seed=3)
    y_last, y_both = last.forward(x, training=False), both.forward(x, training=False)
    refs_last = per_example(lambda s: last.layers[1].forward(s, training=False), x)
    refs_both = per_example(lambda s: both.layers[1].forward(s, training=False), x)
    for n, length in enumerate(LENGTHS):
        assert_close(y_last[n], refs_last[n][0], dtype=np.float64, terms=T * F)
        assert_close(y_both[n, :length], refs_both[n][0], dtype=np.float64, terms=T * F)
    assert np.all(y_both[masked_steps()] == 0)


def test_embedding_mask_zero_masks_id_zero_through_dense_into_the_lstm():
    ids = np.array([[3, 1, 2, 5, 4, 1], [4, 2, 0, 0, 0, 0], [1, 1, 3, 2, 0, 0]])
    inputs = handgrad.Input((T,), dtype="int64")
    embed, dense = L.Embedding(6, 4, mask_zero=True), L.Dense(5)
    lstm = L.LSTM(H, return_sequences=False)
    outputs = lstm(dense(embed(inputs)))  # Dense passes the mask
    model = handgrad.Model(inputs, outputs, dtype="float64", seed=0)
    y = model.forward(ids, training=False)
    for n, length in enumerate(LENGTHS):
        alone = lstm.forward(dense.forward(embed.forward(ids[n:n + 1, :length])),
                             training=False)
        assert_close(y[n], alone[0], dtype=np.float64, terms=T * F)
    plain = Sequential([L.Embedding(6, 4), L.LSTM(H, return_sequences=False)], seed=0)
    masked = Sequential([L.Embedding(6, 4, mask_zero=True), L.LSTM(H, return_sequences=False)],
                        seed=0)
    assert not np.allclose(plain.predict(ids)[1], masked.predict(ids)[1])  # mask is used


def test_global_poolings_reduce_over_the_kept_steps_and_only_they_get_gradient():
    x, dy = padded(), RNG.standard_normal((N, F))
    for pool, reduce in ((L.GlobalAvgPool1D(), np.mean), (L.GlobalMaxPool1D(), np.max)):
        model = Sequential([L.Masking(), pool], dtype="float64")
        y = model.forward(x)
        dx = model.backward(dy)
        for n, length in enumerate(LENGTHS):
            assert_close(y[n], reduce(x[n, :length], axis=0), dtype=np.float64, terms=T)
        assert np.all(dx[masked_steps()] == 0)
        kept = ~masked_steps()
        if reduce is np.mean:  # dx = dy / length on the kept steps
            expected = dy[:, None, :] / np.array(LENGTHS)[:, None, None] * kept[..., None]
            assert_close(dx, expected, dtype=np.float64)
        else:  # dy at the argmax over the kept steps
            top = np.where(kept[..., None], x, -np.inf).argmax(axis=1)
            expected = np.zeros_like(x)
            np.put_along_axis(expected, top[:, None, :], dy[:, None, :], axis=1)
            np.testing.assert_array_equal(dx, expected)


def test_masked_pool_gradient_matches_finite_differences_with_the_mask_fixed():
    x, mask = padded(), ~masked_steps()
    x[~mask] = RNG.standard_normal((int((~mask).sum()), F))  # values the mask must hide
    for kind in ("avg", "max"):
        y, cache = MaskedPool.run(x, mask, kind)
        dy = RNG.standard_normal(y.shape)
        dx, eps = cache.backward("pool", dy), 1e-6
        numeric = np.zeros_like(x)
        for index in np.ndindex(*x.shape):
            step = np.zeros_like(x)
            step[index] = eps
            numeric[index] = ((MaskedPool.run(x + step, mask, kind)[0]
                               - MaskedPool.run(x - step, mask, kind)[0]) * dy).sum() / (2 * eps)
        assert_close(dx, numeric, dtype=np.float64, scale=np.abs(dy).max(), factor=1e6)


def test_attention_masks_the_padded_keys():
    x = padded(4)
    model = Sequential([L.Masking(), L.MultiHeadAttention(4, 2)], dtype="float64", seed=0)
    y = model.forward(x, training=False)
    mha = model.layers[1]
    for n, length in enumerate(LENGTHS):  # the kept queries see only the kept keys
        alone = mha.forward(x[n:n + 1, :length], training=False)
        assert_close(y[n, :length], alone[0], dtype=np.float64, terms=T * 4)


def test_permute_passes_the_mask_only_while_time_stays_first():
    x = padded(T)  # F == T: the shapes alone cannot tell the axes apart
    kept = Sequential([L.Masking(), L.Permute((1, 2)), L.GlobalAvgPool1D()], dtype="float64")
    swapped = Sequential([L.Masking(), L.Permute((2, 1)), L.GlobalAvgPool1D()],
                         dtype="float64")
    assert_close(kept.forward(x)[1], x[1, :LENGTHS[1]].mean(axis=0), dtype=np.float64, terms=T)
    assert_close(swapped.forward(x), x.mean(axis=2), dtype=np.float64, terms=T)


def test_a_mask_that_is_not_right_padding_is_refused_by_name():
    x = padded()
    x[0, 1] = 0.0  # a hole in the first sequence
    with pytest.raises(ValueError, match=r"right-padded sequences .* row 0 of the mask is "
                                         r"\[1, 0, 1, 1, 1, 1\]"):
        Sequential([L.Masking(), L.LSTM(H)]).forward(x.astype(np.float32))
    with pytest.raises(TypeError, match=r"'mask_value'"):
        L.Masking("zero")
    with pytest.raises(TypeError, match=r"'mask_zero'"):
        L.Embedding(4, 2, mask_zero="yes")


def test_masking_layers_save_and_load(tmp_path):
    model = Sequential([L.Embedding(6, 4, mask_zero=True), L.Masking(0.5), L.GRU(H),
                        L.GlobalMaxPool1D()], seed=0)
    model.build((T,))
    io.save(model, tmp_path / "m.safetensors")
    loaded = io.load(tmp_path / "m.safetensors")
    assert loaded.layers[0].mask_zero and loaded.layers[1].mask_value == 0.5
    ids = np.array([[3, 1, 2, 5, 4, 1], [4, 2, 0, 0, 0, 0]])
    np.testing.assert_array_equal(loaded.predict(ids), model.predict(ids))
