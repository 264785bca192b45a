"""Initial and final states of RNN/LSTM/GRU as graph inputs and outputs (``[x, h0, c0]``,
``return_state=True``), against torch.nn.RNN/LSTM/GRU: gradients to h0/c0 and from
h_n/c_n, stacked and bidirectional, float32/64; an encoder-decoder graph whose encoder's
final state starts the decoder; save/load; bad inputs."""

import numpy as np
import pytest

import handgrad
from handgrad import io as hio
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import assert_close, gradcheck
from test_recurrent_layers import (
    MODELS,
    TORCH_DTYPE,
    copy_to_torch,
    make_pair,
    torch_forward_backward,
    torch_key,
)

from tolerances_composite import stacked_recurrent_bounds

torch = pytest.importorskip("torch")
N, T, F, H = 3, 5, 4, 3


def graph_of(layer, n_states, rows):
    """A Model on [x, h0(, c0)] giving [y, h_n(, c_n)], states (N, rows, H)."""
    inputs = [handgrad.Input((T, F))] + [handgrad.Input((rows, H)) for _ in range(n_states)]
    return handgrad.Model(inputs, layer(inputs))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("num_layers", "bidirectional", "return_sequences"), [
    (1, False, True), (2, True, True), (2, False, False), (1, True, False)])
@pytest.mark.parametrize("key", list(MODELS))
def test_graph_states_match_torch(key, num_layers, bidirectional, return_sequences, dtype):
    layer, module, params = make_pair(key, dtype, num_layers, bidirectional, return_sequences)
    layer.return_state = True
    lstm, d = key == "lstm", 2 if bidirectional else 1
    n_states, rows = 2 if lstm else 1, num_layers * d
    model = graph_of(layer, n_states, rows)
    rng = np.random.default_rng(num_layers + 7 * len(key))
    x = rng.standard_normal((N, T, F)).astype(dtype)
    states = [rng.standard_normal((N, rows, H)).astype(dtype) for _ in range(n_states)]
    y_shape = (N, T, d * H) if return_sequences else (N, d * H)
    grads = [rng.standard_normal(y_shape).astype(dtype)]
    grads += [rng.standard_normal((N, rows, H)).astype(dtype) for _ in range(n_states)]
    results = []

    def run():
        results.append(model.forward([x, *states], training=True))
        results.append(model.backward(grads))

    (f_terms, f_scale), (b_terms, b_scales) = stacked_recurrent_bounds(run)
    (y, *finals), (dx, *d_states) = results
    # torch's states are (L*D, N, H): the transposes of the graph's (N, L*D, H)
    t_y, t_finals, t_dx, t_dstates = torch_forward_backward(
        module, x, [s.swapaxes(0, 1).copy() for s in states], None,
        [grads[0], *[g.swapaxes(0, 1).copy() for g in grads[1:]]], return_sequences, lstm)
    assert len(finals) == len(d_states) == n_states
    assert_close(y, t_y, dtype=dtype, terms=f_terms, scale=f_scale, what="y")
    for ours, theirs, name in zip(finals, t_finals, ("h_n", "c_n")):
        assert ours.shape == (N, rows, H) and ours.dtype == dtype
        assert_close(ours, theirs.swapaxes(0, 1), dtype=dtype, terms=f_terms, scale=f_scale,
                     what=name)
    assert_close(dx, t_dx, dtype=dtype, terms=b_terms, scale=b_scales["dx"], what="dx")
    for ours, theirs, name in zip(d_states, t_dstates, ("dh0", "dc0")):
        assert ours.shape == (N, rows, H) and ours.dtype == dtype
        assert_close(ours, theirs.swapaxes(0, 1), dtype=dtype, terms=b_terms,
                     scale=b_scales[name], what=name)
    for name, grad in layer.gradients.items():
        expected = params[torch_key(name)].grad.numpy()
        assert_close(grad, expected.T if grad.ndim == 2 else expected, dtype=dtype,
                     terms=b_terms, scale=b_scales["d" + name.split("_l")[0]], what=name)


def test_final_state_gradient_changes_every_gradient():
    """dL/dh_n enters the last step's backward: with dy = 0 the gradients still come."""
    layer = L.GRU(H, 2, return_state=True, dtype="float64", seed=0)
    model = graph_of(layer, 1, 2)
    rng = np.random.default_rng(0)
    x, h0 = rng.standard_normal((N, T, F)), rng.standard_normal((N, 2, H))
    model.forward([x, h0])
    dx, dh0 = model.backward([None, rng.standard_normal((N, 2, H))])
    assert np.abs(dx).min() > 0 and np.abs(dh0).min() > 0


def test_plain_forward_and_backward_with_return_state():
    layer = L.LSTM(H, 2, bidirectional=True, return_state=True, dtype="float64", seed=1)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, T, F))
    h0, c0 = rng.standard_normal((2, 4, N, H))
    y, h_n, c_n = layer.forward(x, initial_state=(h0, c0))
    want = layer.forward_with_state(x, initial_state=(h0, c0))
    for a, b in zip((y, h_n, c_n), want):
        np.testing.assert_array_equal(a, b)
    dy, dh, dc = rng.standard_normal(y.shape), *rng.standard_normal((2, 4, N, H))
    dx = layer.backward((dy, dh, dc))
    want_dx, _ = layer.backward_with_state(dy, (dh, dc))
    np.testing.assert_array_equal(dx, want_dx)
    with pytest.raises(TypeError, match=r"LSTM: 'dy' must be dL/dy or \(dy, dh_n, dc_n\)"):
        layer.forward(x)
        layer.backward((dy, dh))


def test_lstm_graph_on_x_and_h0_only():
    layer = L.LSTM(H, return_state=True, dtype="float64", seed=2)
    x_in, h_in = handgrad.Input((T, F)), handgrad.Input((1, H))
    y, h_n, c_n = layer([x_in, h_in])
    model = handgrad.Model([x_in, h_in], [y, h_n, c_n])
    rng = np.random.default_rng(2)
    x, h0 = rng.standard_normal((N, T, F)), rng.standard_normal((N, 1, H))
    outs = model.forward([x, h0])
    dys = [rng.standard_normal(o.shape) for o in outs]
    dx, dh0 = model.backward(dys)
    want = layer.forward_with_state(x, initial_state=(h0.swapaxes(0, 1), None))
    want_dx, (want_dh0, want_dc0) = layer.backward_with_state(
        dys[0], (dys[1].swapaxes(0, 1), dys[2].swapaxes(0, 1)))
    for a, b in zip(outs, (want[0], want[1].swapaxes(0, 1), want[2].swapaxes(0, 1))):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(dx, want_dx)
    np.testing.assert_array_equal(dh0, want_dh0.swapaxes(0, 1))
    assert want_dc0 is None


def seq2seq(key, dtype):
    """Encoder (bidirectional, 2 layers) -> its final states start a decoder of the same
    shape; a Dense on the decoder's output."""
    cls = MODELS[key][0]
    kwargs = MODELS[key][1]
    n_states = 2 if key == "lstm" else 1
    src, tgt = handgrad.Input((T, F), name="src"), handgrad.Input((T - 1, 2), name="tgt")
    encoder = cls(H, 2, bidirectional=True, return_state=True, name="enc", **kwargs)
    _, *finals = encoder(src)
    decoder = cls(H, 2, bidirectional=True, name="dec", **kwargs)
    out = L.Dense(2, name="fc")(decoder([tgt, *finals]))
    return handgrad.Model([src, tgt], out, dtype=np.dtype(dtype).name, seed=3), n_states


class TorchSeq2Seq(torch.nn.Module):
    def __init__(self, key, dtype):
        super().__init__()
        torch_cls, kwargs = MODELS[key][2], MODELS[key][3]
        self.enc = torch_cls(F, H, 2, batch_first=True, bidirectional=True, **kwargs)
        self.dec = torch_cls(2, H, 2, batch_first=True, bidirectional=True, **kwargs)
        self.fc = torch.nn.Linear(2 * H, 2)
        self.to(TORCH_DTYPE[dtype])

    def forward(self, src, tgt):
        _, state = self.enc(src)
        out, _ = self.dec(tgt, state)
        return self.fc(out)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("key", list(MODELS))
def test_seq2seq_graph_matches_torch(key, dtype):
    model, _ = seq2seq(key, dtype)
    twin = TorchSeq2Seq(key, dtype)
    copy_to_torch(model.get_layer("enc"), twin.enc)
    copy_to_torch(model.get_layer("dec"), twin.dec)
    fc = model.get_layer("fc").parameters
    with torch.no_grad():
        twin.fc.weight.copy_(torch.tensor(fc["W"].T))
        twin.fc.bias.copy_(torch.tensor(fc["b"]))
    rng = np.random.default_rng(len(key))
    src = rng.standard_normal((N, T, F)).astype(dtype)
    tgt = rng.standard_normal((N, T - 1, 2)).astype(dtype)
    dy = rng.standard_normal((N, T - 1, 2)).astype(dtype)
    results = []
    (f_terms, f_scale), (b_terms, b_scales) = stacked_recurrent_bounds(
        lambda: results.extend([model.forward([src, tgt], training=True),
                                model.backward(dy)]))
    y, (d_src, d_tgt) = results
    t_src, t_tgt = (torch.tensor(a, requires_grad=True) for a in (src, tgt))
    t_y = twin(t_src, t_tgt)
    (t_y * torch.tensor(dy)).sum().backward()
    # the Dense adds 2H products and a bias to the recurrent part's rounding
    width = 2 * H + 1
    assert_close(y, t_y.detach().numpy(), dtype=dtype, terms=f_terms + width,
                 scale=f_scale * float(np.abs(fc["W"]).sum(axis=0).max() + 1), what="y")
    upstream = float(np.abs(fc["W"]).sum(axis=1).max() + 1)
    for ours, theirs, name in ((d_src, t_src.grad, "d_src"), (d_tgt, t_tgt.grad, "d_tgt")):
        assert_close(ours, theirs.numpy(), dtype=dtype, terms=b_terms + width,
                     scale=b_scales["dx"] * upstream, what=name)
    for layer_name, module in (("enc", twin.enc), ("dec", twin.dec)):
        layer, t_params = model.get_layer(layer_name), dict(module.named_parameters())
        for name, grad in layer.gradients.items():
            expected = t_params[torch_key(name)].grad.numpy()
            assert_close(grad, expected.T if grad.ndim == 2 else expected, dtype=dtype,
                         terms=b_terms + width,
                         scale=b_scales["d" + name.split("_l")[0]] * upstream,
                         what=f"{layer_name}.{name}")


def test_seq2seq_gradcheck_and_save_load(tmp_path):
    model, _ = seq2seq("lstm", np.float64)
    rng = np.random.default_rng(0)
    src, tgt = rng.standard_normal((2, T, F)), rng.standard_normal((2, T - 1, 2))
    result = gradcheck(model, [src, tgt], rng=0)
    assert result.passed, result.errors
    path = tmp_path / "seq2seq.safetensors"
    hio.save(model, path)
    loaded = hio.load(path)
    assert loaded.get_layer("enc").return_state
    np.testing.assert_array_equal(loaded.forward([src, tgt], training=False),
                                  model.forward([src, tgt], training=False))


def test_bad_graph_states():
    lstm = L.LSTM(H, 2, return_state=True)
    x_in = handgrad.Input((T, F))
    with pytest.raises(ValueError, match=r"the graph input 'h0' must have shape "
                                         r"\(N, num_layers \* D, H\) = \(1, 2, 3\); received "
                                         r"shape \(1, 1, 3\)"):
        lstm([x_in, handgrad.Input((1, H))])
    with pytest.raises(ValueError, match=r"LSTM: takes x, \[x, h0\] or \[x, h0, c0\]; "
                                         r"received 4"):
        lstm([x_in] + [handgrad.Input((2, H))] * 3)
    with pytest.raises(TypeError, match=r"'return_state' must be a bool"):
        L.GRU(H, return_state=1)
    with pytest.raises(ValueError, match=r"GRU .*: with return_state=True it has several outputs "
                                         r"\[y, h_n\], so it cannot be a step of a chain"):
        Sequential([L.GRU(H, return_state=True), L.Dense(2)], input_shape=(T, F))
