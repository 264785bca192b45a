"""Keras's ``Bidirectional`` and ``TimeDistributed`` wrappers (their gradients, config and
save/load run in the layer contract from ``LAYER_CASES`` too).

Keras semantics relied on: ``Bidirectional(layer, merge_mode)`` runs a forward copy and a
reversed copy (``go_backwards``) of the layer with their own weights, reverses the
backward copy's output sequence back and merges with concat ([forward, backward] on the
last axis), sum, mul, ave or None (a list of both); with ``return_sequences=False`` each
copy gives its last state. torch's ``LSTM(bidirectional=True)`` computes the same concat
(its ``_reverse`` weights are the backward copy's). ``TimeDistributed(layer)`` applies
the same layer (one set of weights) to every time step.
"""

import numpy as np
import pytest

import handgrad
from handgrad import io
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import assert_close

from tolerances_composite import stacked_recurrent_bounds

torch = pytest.importorskip("torch")

N, T, F, H = 3, 5, 4, 3
LENGTHS = [5, 2, 4]
RNG = np.random.default_rng(0)
X = RNG.standard_normal((N, T, F))


def torch_name(path):
    """forward_layer.W_ih_l0 -> weight_ih_l0; backward_layer.b_hh_l0 -> bias_hh_l0_reverse."""
    child, key = path.split(".")
    name = key.replace("W_", "weight_", 1).replace("b_", "bias_", 1)
    return name + ("_reverse" if child == "backward_layer" else "")


@pytest.mark.parametrize(("return_sequences", "lengths"), [
    (True, None), (True, LENGTHS), (False, LENGTHS)])
def test_bidirectional_lstm_concat_matches_torch(return_sequences, lengths):
    layer = L.Bidirectional(L.LSTM(H, return_sequences=return_sequences), dtype="float64",
                            seed=1)
    layer.build((T, F))
    module = torch.nn.LSTM(F, H, batch_first=True, bidirectional=True).double()
    params = dict(module.named_parameters())
    with torch.no_grad():
        for path, value in layer.named_parameters().items():
            params[torch_name(path)].copy_(torch.tensor(value.T if value.ndim == 2 else value))
    dy = RNG.standard_normal((N, T, 2 * H) if return_sequences else (N, 2 * H))
    results = []
    (f_terms, f_scale), (b_terms, b_scales) = stacked_recurrent_bounds(
        lambda: results.extend([layer.forward(X, lengths=lengths), layer.backward(dy)]))
    y, dx = results

    tx = torch.tensor(X, requires_grad=True)
    packed = tx if lengths is None else torch.nn.utils.rnn.pack_padded_sequence(
        tx, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
    out, (h_n, _) = module(packed)
    if lengths is not None:
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
    if not return_sequences:
        out = torch.cat([h_n[0], h_n[1]], dim=-1)
    (out * torch.tensor(dy)).sum().backward()
    assert_close(y, out.detach().numpy(), dtype=np.float64, terms=f_terms, scale=f_scale)
    assert_close(dx, tx.grad.numpy(), dtype=np.float64, terms=b_terms, scale=b_scales["dx"])
    for path, grad in layer.named_gradients().items():
        expected = params[torch_name(path)].grad.numpy()
        assert_close(grad, expected.T if grad.ndim == 2 else expected, dtype=np.float64,
                     terms=b_terms, scale=b_scales["d" + path.split(".")[1].split("_l")[0]],
                     what=path)


@pytest.mark.parametrize("mode", ["sum", "mul", "ave"])
def test_merge_modes_combine_the_two_directions(mode):
    concat = L.Bidirectional(L.GRU(H), dtype="float64", seed=2)
    y = concat.forward(X)
    merged = L.Bidirectional(L.GRU(H), merge_mode=mode, dtype="float64", seed=2)
    y_f, y_b = y[..., :H], y[..., H:]
    expected = {"sum": y_f + y_b, "mul": y_f * y_b, "ave": (y_f + y_b) / 2}[mode]
    np.testing.assert_array_equal(merged.forward(X), expected)


def test_the_two_directions_have_independent_weights_named_by_child():
    layer = L.Bidirectional(L.RNN(H, name="rnn"))
    layer.build((T, F))
    names = layer.named_parameters()
    assert set(names) == {f"{child}.{key}_l0" for child in ("forward_layer", "backward_layer")
                          for key in ("W_ih", "W_hh", "b_ih", "b_hh")}
    assert not np.array_equal(names["forward_layer.W_ih_l0"], names["backward_layer.W_ih_l0"])
    assert layer.backward_layer.name == "rnn_backward"


def test_merge_mode_none_gives_two_graph_outputs():
    inputs = handgrad.Input((T, F))
    wrapper = L.Bidirectional(L.LSTM(H), merge_mode=None, seed=0)
    y_f, y_b = wrapper(inputs)
    model = handgrad.Model(inputs, [y_f, y_b], dtype="float64")
    out_f, out_b = model.forward(X)
    both = np.concatenate([out_f, out_b], axis=-1)
    concat = L.Bidirectional(L.LSTM(H), dtype="float64")
    concat.build((T, F))
    for key, value in wrapper.named_parameters().items():
        concat.named_parameters()[key][...] = value
    np.testing.assert_array_equal(both, concat.forward(X))
    dx = model.backward([np.ones_like(out_f), np.ones_like(out_b)])
    np.testing.assert_array_equal(dx, concat.backward(np.ones_like(both)))


def test_time_distributed_applies_one_layer_to_every_step():
    x = RNG.standard_normal((N, T, 6, 2))
    inner = L.Conv1D(3, 3, padding="same", dtype="float64", seed=0)
    layer = L.TimeDistributed(inner)
    y = layer.forward(x)
    assert y.shape == (N, T, 6, 3) and set(layer.named_parameters()) == {"layer.W", "layer.b"}
    dy = RNG.standard_normal(y.shape)
    dx = layer.backward(dy)
    grads = {k: v.copy() for k, v in inner.gradients.items()}
    inner.zero_grad()
    for t in range(T):  # the reference: the same layer on each step
        np.testing.assert_array_equal(y[:, t], inner.forward(x[:, t]))
        np.testing.assert_array_equal(dx[:, t], inner.backward(dy[:, t]))
    for key, grad in grads.items():
        assert_close(grad, inner.gradients[key], dtype=np.float64, terms=T)


def test_wrappers_save_and_load(tmp_path):
    model = Sequential([L.TimeDistributed(L.Dense(4)), L.Bidirectional(L.GRU(H), "ave"),
                        L.Bidirectional(L.LSTM(2, return_sequences=False))],
                       seed=0, dtype="float64")
    model.build((T, F))
    io.save(model, tmp_path / "m.safetensors")
    loaded = io.load(tmp_path / "m.safetensors")
    assert [type(layer) for layer in loaded.layers] == [type(layer) for layer in model.layers]
    assert loaded.layers[1].merge_mode == "ave"
    assert set(loaded.named_parameters()) == set(model.named_parameters())
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: L.Bidirectional(L.Dense(3)), TypeError, r"'layer' must be a handgrad RNN, GRU"),
    (lambda: L.Bidirectional(L.LSTM(3, bidirectional=True)), ValueError,
     r"bidirectional=True"),
    (lambda: L.Bidirectional(L.LSTM(3), merge_mode="max"), ValueError, r"'merge_mode'"),
    (lambda: L.TimeDistributed("dense"), TypeError, r"'layer' must be a handgrad Layer"),
])
def test_bad_arguments_are_refused_by_name(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_shapes_that_do_not_fit_are_refused_by_name():
    with pytest.raises(ValueError, match=r"merge_mode=None it has two outputs"):
        Sequential([L.Bidirectional(L.GRU(2), merge_mode=None)]).build((T, F))
    with pytest.raises(ValueError, match=r"expects \(N, T, \.\.\.\) inputs with a time axis"):
        L.TimeDistributed(L.Dense(2)).forward(np.zeros((2, 3)))
