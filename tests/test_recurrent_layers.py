"""The recurrent layers (RNN, LSTM, GRU, BiLSTM) against torch.nn.RNN/LSTM/GRU with
copied weights: multi-layer, bidirectional, initial states, padded batches
(pack_padded_sequence), return_sequences=False; torch's parameter names and default
initialization; final states; use inside Sequential; save/load; bad inputs."""

import math

import numpy as np
import pytest

from handgrad import io as hio
from handgrad import layers as L
from handgrad import optimizers, zoo
from handgrad.data import Dataset
from handgrad.model import Sequential
from handgrad.testing import assert_close, gradcheck

from tolerances import std_bound, uniform_max_gap
from tolerances_composite import stacked_recurrent_bounds

torch = pytest.importorskip("torch")
pack = torch.nn.utils.rnn.pack_padded_sequence
unpack = torch.nn.utils.rnn.pad_packed_sequence

TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}
N, T, F, H = 3, 5, 4, 3
LENGTHS = [5, 2, 4]
# (handgrad class, kwargs, torch class, torch kwargs)
MODELS = {
    "rnn-tanh": (L.RNN, {}, torch.nn.RNN, {}),
    "rnn-relu": (L.RNN, {"nonlinearity": "relu"}, torch.nn.RNN, {"nonlinearity": "relu"}),
    "lstm": (L.LSTM, {}, torch.nn.LSTM, {}),
    "gru": (L.GRU, {}, torch.nn.GRU, {}),
}


def torch_key(name):
    """handgrad parameter name -> torch's: W_ih_l0_reverse -> weight_ih_l0_reverse."""
    return name.replace("W_", "weight_", 1).replace("b_", "bias_", 1)


def copy_to_torch(layer, module):
    """Weights are (F, G*H) in handgrad, (G*H, F) in torch; biases are the same."""
    params = dict(module.named_parameters())
    assert set(params) == {torch_key(k) for k in layer.parameters}
    with torch.no_grad():
        for key, value in layer.parameters.items():
            params[torch_key(key)].copy_(torch.tensor(value.T if value.ndim == 2 else value))
    return params


def make_pair(key, dtype, num_layers, bidirectional, return_sequences=True, bias=True):
    cls, kwargs, torch_cls, torch_kwargs = MODELS[key]
    layer = cls(H, num_layers, bidirectional=bidirectional, bias=bias,
                return_sequences=return_sequences, dtype=np.dtype(dtype).name, seed=3, **kwargs)
    layer.build((T, F))
    module = torch_cls(F, H, num_layers, batch_first=True, bidirectional=bidirectional,
                       bias=bias, **torch_kwargs).to(TORCH_DTYPE[dtype])
    return layer, module, copy_to_torch(layer, module)


def torch_forward_backward(module, x, states, lengths, grads, return_sequences, lstm):
    """Outputs and gradients of <out, dy> + <h_n, dh_n> (+ <c_n, dc_n>) in torch."""
    tx = torch.tensor(x, requires_grad=True)
    t_states = [torch.tensor(s, requires_grad=True) for s in states]
    seq = tx if lengths is None else pack(tx, torch.tensor(lengths), batch_first=True,
                                          enforce_sorted=False)
    hx = None if not t_states else tuple(t_states) if lstm else t_states[0]
    out, final = module(seq, hx)
    if lengths is not None:
        out, _ = unpack(out, batch_first=True, total_length=x.shape[1])
    finals = list(final) if lstm else [final]
    d = 2 if module.bidirectional else 1
    if not return_sequences:
        out = torch.cat([finals[0][-d + i] for i in range(d)], dim=-1)
    loss = (out * torch.tensor(grads[0])).sum()
    for f, g in zip(finals, grads[1:]):
        loss = loss + (f * torch.tensor(g)).sum()
    loss.backward()
    return (out.detach().numpy(), [f.detach().numpy() for f in finals], tx.grad.numpy(),
            [s.grad.numpy() for s in t_states])


CONFIGS = [
    pytest.param(1, False, True, None, id="1-layer"),
    pytest.param(2, True, True, None, id="2-layer-bi-states"),
    pytest.param(2, False, True, LENGTHS, id="2-layer-lengths-states"),
    pytest.param(2, True, True, LENGTHS, id="2-layer-bi-lengths-states"),
    pytest.param(1, True, False, LENGTHS, id="bi-lengths-last-output"),
    pytest.param(2, False, False, None, id="2-layer-last-output-states"),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("num_layers", "bidirectional", "return_sequences", "lengths"),
                         CONFIGS)
@pytest.mark.parametrize("key", list(MODELS))
def test_layer_matches_torch(key, num_layers, bidirectional, return_sequences, lengths, dtype):
    layer, module, params = make_pair(key, dtype, num_layers, bidirectional, return_sequences)
    lstm = key == "lstm"
    rng = np.random.default_rng(len(key) + num_layers)
    x = rng.standard_normal((N, T, F)).astype(dtype)
    d = 2 if bidirectional else 1
    with_states = num_layers == 2
    states = [rng.standard_normal((num_layers * d, N, H)).astype(dtype)
              for _ in range(2 if lstm else 1)] if with_states else []
    initial = None if not states else tuple(states) if lstm else states[0]
    out_shape = (N, T, d * H) if return_sequences else (N, d * H)
    grads = [rng.standard_normal(out_shape).astype(dtype)]
    grads += [rng.standard_normal((num_layers * d, N, H)).astype(dtype)
              for _ in range(2 if lstm else 1)]
    d_final = tuple(grads[1:]) if lstm else grads[1]
    results = []

    def run():
        results.extend(layer.forward_with_state(x, initial_state=initial, lengths=lengths))
        results.extend(layer.backward_with_state(grads[0], d_final))

    (f_terms, f_scale), (b_terms, b_scales) = stacked_recurrent_bounds(run)
    y, *finals, dx, d_initial = results

    def check(actual, expected, key, name):
        terms, scale = (f_terms, f_scale) if key is None else (b_terms, b_scales[key])
        assert_close(actual, expected, dtype=dtype, terms=terms, scale=scale, what=name)

    t_out, t_finals, t_dx, t_dstates = torch_forward_backward(
        module, x, states, lengths, grads, return_sequences, lstm)
    assert y.shape == out_shape and y.dtype == dtype
    check(y, t_out, None, "output")
    for ours, theirs, name in zip(finals, t_finals, ["h_n", "c_n"]):
        assert ours.shape == (num_layers * d, N, H)
        check(ours, theirs, None, name)
    check(dx, t_dx, "dx", "dx")
    if with_states:
        ours = list(d_initial) if lstm else [d_initial]
        for a, b, name in zip(ours, t_dstates, ["dh0", "dc0"]):
            assert a.dtype == dtype
            check(a, b, name, name)
    else:
        assert d_initial is None
    for key_, grad in layer.gradients.items():
        assert grad.dtype == dtype
        expected = params[torch_key(key_)].grad.numpy()
        check(grad, expected.T if grad.ndim == 2 else expected, "d" + key_.split("_l")[0], key_)
    if lengths is not None:
        assert np.all(dx[np.arange(T)[None, :] >= np.array(lengths)[:, None]] == 0)


@pytest.mark.parametrize("key", list(MODELS))
def test_layer_without_bias_matches_torch(key):
    layer, module, params = make_pair(key, np.float64, 2, True, bias=False)
    assert not any(k.startswith("b_") for k in layer.parameters)
    x = np.random.default_rng(0).standard_normal((N, T, F))
    dy = np.random.default_rng(1).standard_normal((N, T, 2 * H))
    results = []
    bounds = stacked_recurrent_bounds(
        lambda: results.extend([layer.forward(x), layer.backward(dy)]))
    (f_terms, f_scale), (b_terms, b_scales) = bounds
    y, dx = results
    lstm = key == "lstm"
    t_out, _, t_dx, _ = torch_forward_backward(module, x, [], None, [dy], True, lstm)
    assert_close(y, t_out, dtype=np.float64, terms=f_terms, scale=f_scale, what="output")
    assert_close(dx, t_dx, dtype=np.float64, terms=b_terms, scale=b_scales["dx"], what="dx")
    for key_, grad in layer.gradients.items():
        assert_close(grad, params[torch_key(key_)].grad.numpy().T, dtype=np.float64,
                     terms=b_terms, scale=b_scales["d" + key_.split("_l")[0]], what=key_)


# ------------------------------------------------------------ names and init
@pytest.mark.parametrize("key", list(MODELS))
def test_parameter_names_shapes_and_default_init_follow_torch(key):
    cls, kwargs, torch_cls, torch_kwargs = MODELS[key]
    hidden = 50
    layer = cls(hidden, 2, bidirectional=True, seed=0, **kwargs).build((7, 20))
    module = torch_cls(20, hidden, 2, bidirectional=True, **torch_kwargs)
    torch_shapes = {k: tuple(v.shape) for k, v in module.named_parameters()}
    ours = {torch_key(k): tuple(reversed(v.shape)) for k, v in layer.parameters.items()}
    assert ours == torch_shapes  # same names, transposed weights
    assert list(ours) == list(torch_shapes)  # and torch's order
    bound = 1 / math.sqrt(hidden)
    for name, value in layer.parameters.items():
        assert value.dtype == np.float32
        assert np.abs(value).max() <= np.float32(bound), name  # rounding is monotonic
    W = layer.parameters["W_hh_l1_reverse"]
    assert np.abs(W).max() >= bound * (1 - uniform_max_gap(W.size))
    sigma = bound / math.sqrt(3)  # U(-bound, bound); a uniform's kurtosis is 1.8
    assert abs(W.std() - sigma) <= std_bound(sigma, W.size, kurtosis=1.8)
    again = cls(hidden, 2, bidirectional=True, seed=0, **kwargs).build((7, 20))
    np.testing.assert_array_equal(again.parameters["W_ih_l0"], layer.parameters["W_ih_l0"])


def test_bilstm_is_a_bidirectional_lstm():
    block = L.BiLSTM(4, num_layers=2, return_sequences=False, seed=5, dtype="float64")
    plain = L.LSTM(4, num_layers=2, bidirectional=True, return_sequences=False, seed=5,
                   dtype="float64")
    x = np.random.default_rng(0).standard_normal((2, 6, 3))
    np.testing.assert_array_equal(block.forward(x), plain.forward(x))
    assert block.bidirectional and block.forward(x).shape == (2, 8)
    assert "bidirectional" not in block.get_config()
    assert type(L.REGISTRY["BiLSTM"].from_config(block.get_config())) is L.BiLSTM


# ------------------------------------------------------------------ states
def test_final_state_and_state_gradients_round_trip():
    layer = L.LSTM(3, 2, bidirectional=True, dtype="float64", seed=1)
    x = np.random.default_rng(0).standard_normal((2, 4, 5))
    y = layer.forward(x, lengths=[4, 2])
    h_n, c_n = layer.final_state
    assert h_n.shape == c_n.shape == (4, 2, 3)
    # the last layer's forward state is its output at t = length - 1, the reverse one at t = 0
    np.testing.assert_array_equal(h_n[2], y[[0, 1], [3, 1], :3])
    np.testing.assert_array_equal(h_n[3], y[:, 0, 3:])
    # running on from the final state equals running the concatenated sequence
    gru = L.GRU(3, 2, dtype="float64", seed=2)
    whole = []
    (terms, scale), _ = stacked_recurrent_bounds(
        lambda: whole.append(gru.forward(x, training=False)))
    first = gru.forward(x[:, :2], training=False)
    rest = gru.forward(x[:, 2:], training=False, initial_state=gru.final_state)
    assert_close(np.concatenate([first, rest], axis=1), whole[0], dtype=np.float64, terms=terms,
                 scale=scale, what="two runs")  # the same steps in differently shaped matmuls


def test_two_forwards_then_two_backwards_with_states_and_lengths():
    layer = L.GRU(3, 2, bidirectional=True, dtype="float64", seed=4)
    rng = np.random.default_rng(0)
    runs = []
    for n, lengths in ((2, [3, 1]), (3, None)):
        runs.append((rng.standard_normal((n, 3, 2)), rng.standard_normal((4, n, 3)), lengths))
    ys = [layer.forward(x, initial_state=h0, lengths=lengths) for x, h0, lengths in runs]
    dys = [rng.standard_normal(y.shape) for y in ys]
    second = layer.backward_with_state(dys[1])
    first = layer.backward_with_state(dys[0])
    total = {k: g.copy() for k, g in layer.gradients.items()}
    layer.zero_grad()
    separate = {k: 0 for k in total}
    for (x, h0, lengths), dy, (dx, dh0) in zip(runs, dys, (first, second)):
        layer.forward(x, initial_state=h0, lengths=lengths)
        dx_again, dh0_again = layer.backward_with_state(dy)
        np.testing.assert_array_equal(dx_again, dx)  # the same kernels on the same inputs
        np.testing.assert_array_equal(dh0_again, dh0)
        for k, g in layer.gradients.items():
            separate[k] = separate[k] + g
        layer.zero_grad()
    for k, g in total.items():  # a sum of two: the same in either order
        np.testing.assert_array_equal(g, separate[k])


# --------------------------------------------------------------- in models
@pytest.mark.parametrize("cls", [L.RNN, L.LSTM, L.GRU, L.BiLSTM])
def test_gradcheck_in_a_sequential_model(cls):
    model = Sequential([cls(3, 2, return_sequences=False, name="rnn"), L.Dense(2, name="fc")],
                       dtype="float64", seed=0)
    x = np.random.default_rng(1).standard_normal((2, 4, 3))
    result = gradcheck(model, x, rng=0)
    assert result.passed, result.errors
    text = model.summary(print_fn=None)
    d = 2 if cls is L.BiLSTM else 1
    assert f"(None, {d * 3})" in text


def test_save_and_load_a_recurrent_model(tmp_path):
    model = Sequential([L.BiLSTM(4, name="bi"), L.GRU(3, 2, return_sequences=False, name="gru"),
                        L.Dense(2, name="fc")], input_shape=(6, 2), seed=3)
    x = np.random.default_rng(0).standard_normal((3, 6, 2)).astype(np.float32)
    expected = model.predict(x)
    path = tmp_path / "model.safetensors"
    hio.save(model, path)
    loaded = hio.load(path)
    np.testing.assert_array_equal(loaded.predict(x), expected)
    assert set(loaded.named_parameters()) == set(model.named_parameters())
    assert "gru.W_hh_l1" in model.named_parameters()


# ------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: L.LSTM(0), ValueError, r"LSTM: 'hidden_size' must be an int >= 1"),
    (lambda: L.GRU(3, num_layers=1.5), TypeError, r"GRU: 'num_layers' must be an int"),
    (lambda: L.RNN(3, nonlinearity="sigmoid"), ValueError, r"RNN: 'nonlinearity' must be one "
                                                            r"of 'tanh', 'relu'"),
    (lambda: L.LSTM(3, bidirectional=1), TypeError, r"LSTM: 'bidirectional' must be a bool"),
    (lambda: L.GRU(3, return_sequences="yes"), TypeError, r"'return_sequences' must be a bool"),
])
def test_bad_configuration(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_bad_forward_and_backward_inputs():
    x = np.zeros((2, 4, 3))
    lstm = L.LSTM(2, 2, bidirectional=True, dtype="float64")
    lstm.forward(x)
    with pytest.raises(ValueError, match=r"LSTM: 'x' must have F = 3 features \(N, T, F\)"):
        lstm.forward(np.zeros((2, 4, 5)))
    with pytest.raises(ValueError, match=r"LSTM: 'x' must be a 3-D array \(N, T, F\)"):
        lstm.forward(np.zeros((2, 4)))
    with pytest.raises(TypeError, match=r"LSTM: input dtype float32 does not match"):
        lstm.forward(x.astype(np.float32))
    with pytest.raises(TypeError, match=r"LSTM: 'initial_state' must be a pair \(h, c\)"):
        lstm.forward(x, initial_state=np.zeros((4, 2, 2)))
    with pytest.raises(ValueError, match=r"LSTM: 'initial_state' must have shape \(num_layers "
                                         r"\* D, N, H\) = \(4, 2, 2\); received shape "
                                         r"\(2, 2, 2\)"):
        lstm.forward(x, initial_state=(np.zeros((2, 2, 2)), None))
    with pytest.raises(TypeError, match=r"LSTM: 'initial_state' must have dtype float64"):
        lstm.forward(x, initial_state=(None, np.zeros((4, 2, 2), np.float32)))
    with pytest.raises(ValueError, match=r"LSTM: 'lengths' must be an int array of shape "
                                         r"\(2,\) with values in \[1, 4\]"):
        lstm.forward(x, lengths=[5, 1])
    gru = L.GRU(2, dtype="float64")
    y = gru.forward(x)
    with pytest.raises(ValueError, match=r"GRU: 'd_final_state' must have shape \(num_layers "
                                         r"\* D, N, H\) = \(1, 2, 2\)"):
        gru.backward(y, np.zeros((2, 2, 2)))
    gru.forward(x)
    with pytest.raises(ValueError, match=r"GRU: 'dy' must have the forward output's shape "
                                         r"\(2, 4, 2\)"):
        gru.backward(np.zeros((2, 4, 3)))
    with pytest.raises(RuntimeError, match=r"GRU: backward\(\) called without a matching"):
        gru.backward(y)
    with pytest.raises(ValueError, match=r"RNN: expects sequences \(N, T, F\)"):
        L.RNN(2).build((4,))


# ------------------------------------------------------------------ training
def sign_of_sum(n, seed):
    """Sequences (n, 10, 1) labelled by the sign of their sum: needs the whole sequence."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 10, 1)).astype(np.float32)
    return x, (x.sum(axis=(1, 2)) > 0).astype(np.int64)


@pytest.mark.parametrize("shape", [(10, 1), (5, 2, 1)], ids=["sequence", "image"])
def test_zoo_gru_model(shape):
    x_train, y_train = sign_of_sum(256, 0)
    x_test, y_test = sign_of_sum(128, 1)
    if len(shape) == 3:  # images are read row by row
        x_train, x_test = x_train.reshape(-1, *shape), x_test.reshape(-1, *shape)
    data = Dataset(x_train, y_train, x_test, y_test, num_classes=2, name="sign")
    model = zoo.build("gru", data, seed=0)
    assert any(isinstance(layer, L.GRU) for layer in model)
    assert model.output_shape(shape) == (2,)
    if len(shape) == 3:
        return
    model.compile(optimizers.Adam(lr=1e-2), "cross_entropy", metrics=("accuracy",))
    model.fit(x_train, y_train, epochs=15, batch_size=32, rng=0, verbose=0)
    assert model.evaluate(x_test, y_test, return_dict=True)["accuracy"] > 0.9
