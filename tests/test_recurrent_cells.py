"""Single-step recurrent cells (RNNCell, LSTMCell, GRUCell) against torch's nn.*Cell:
output, input, state and weight gradients in float64 and float32; the zero state; graph
calls with given states; save/load; clear errors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import handgrad  # noqa: E402
from handgrad import io  # noqa: E402
from handgrad import layers as L  # noqa: E402
from handgrad.testing import assert_close  # noqa: E402

from tolerances_composite import recurrent_bounds  # noqa: E402

CELLS = {"rnn": (L.RNNCell, torch.nn.RNNCell), "lstm": (L.LSTMCell, torch.nn.LSTMCell),
         "gru": (L.GRUCell, torch.nn.GRUCell)}
N, F, H = 4, 5, 3


def make(cell, dtype, bias=True, **kwargs):
    ours = CELLS[cell][0](H, bias=bias, dtype=dtype, seed=1, **kwargs)
    ours.build((F,))
    theirs = CELLS[cell][1](F, H, bias=bias, **kwargs).to(getattr(torch, dtype))
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            key = name.replace("weight", "W").replace("bias", "b")
            value = ours.parameters[key]
            param.copy_(torch.from_numpy(value.T if value.ndim == 2 else value))
    return ours, theirs


def data(cell, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x, h, c, dh, dc = (rng.standard_normal(s).astype(dtype) for s in
                       [(N, F), (N, H), (N, H), (N, H), (N, H)])
    return x, h, c, dh, dc


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("given", [True, False])
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_cell_matches_torch(cell, given, bias, dtype):
    kwargs = {"nonlinearity": "relu"} if cell == "rnn" and not bias else {}
    ours, theirs = make(cell, dtype, bias, **kwargs)
    x, h, c, dh, dc = data(cell, dtype)
    lstm = cell == "lstm"
    state = ((h, c) if lstm else h) if given else None
    out = ours.forward_with_state(x, state=state)
    dx, d_state = ours.backward_with_state(dh, dc if lstm else None)
    tx = torch.from_numpy(x).requires_grad_()
    th, tc = (torch.from_numpy(a).requires_grad_() for a in (h, c))
    t_out = theirs(tx, ((th, tc) if lstm else th) if given else None)
    t_outs = t_out if lstm else (t_out,)
    torch.autograd.backward(t_outs, [torch.from_numpy(dh), torch.from_numpy(dc)][:len(t_outs)])

    p = ours.parameters
    arrays = [x[:, None], p["W_ih"], p["W_hh"], p.get("b_ih"), p.get("b_hh"),
              h if given else None] + ([c if given else None] if lstm else [])
    grads_in = [None, dh] + ([dc] if lstm else [])
    (f_terms, f_scale), (b_terms, b_scales) = recurrent_bounds(cell, arrays, kwargs, grads_in)
    outs = out if lstm else (out,)
    for name, a, e in zip(("h'", "c'"), outs, t_outs):
        assert a.dtype == np.dtype(dtype) and a.shape == (N, H)
        assert_close(a, e.detach().numpy(), dtype=dtype, terms=f_terms, scale=f_scale,
                     what=name)
    expected = {"dx": (dx, tx.grad)}
    if given:
        states = d_state if lstm else (d_state,)
        expected.update(dh0=(states[0], th.grad))
        if lstm:
            expected.update(dc0=(states[1], tc.grad))
    else:
        assert d_state is None
    for name, t_param in theirs.named_parameters():
        key = name.replace("weight", "W").replace("bias", "b")
        grad = t_param.grad.numpy()
        expected["d" + key] = (ours.gradients[key], grad.T if grad.ndim == 2 else grad)
    for name, (a, e) in expected.items():
        assert_close(a, np.asarray(e), dtype=dtype, terms=b_terms, scale=b_scales[name],
                     what=name)


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_forward_on_x_starts_from_the_zero_state(cell):
    ours, _ = make(cell, "float64")
    x, *_ = data(cell, "float64")
    zeros = np.zeros((N, H))
    y = ours.forward(x, training=False)
    assert y.shape == (N, H)
    given = ours.forward(x, training=False, state=(zeros, zeros) if cell == "lstm" else zeros)
    np.testing.assert_array_equal(y, given)


def test_lstm_graph_with_given_state_and_two_outputs():
    x_in, h_in, c_in = handgrad.Input((F,)), handgrad.Input((H,)), handgrad.Input((H,))
    cell = L.LSTMCell(H, return_state=True, dtype="float64")
    h1, c1 = cell([x_in, h_in, c_in])
    model = handgrad.Model([x_in, h_in, c_in], [h1, c1], seed=0)
    x, h, c, dh, dc = data("lstm", "float64")
    got_h, got_c = model.forward([x, h, c])
    dx, d_h, d_c = model.backward([dh, dc])
    grads = {k: v.copy() for k, v in cell.gradients.items()}
    cell.zero_grad()
    want_h, want_c = cell.forward_with_state(x, state=(h, c))
    want_dx, (want_dh, want_dc) = cell.backward_with_state(dh, dc)
    for a, e in ((got_h, want_h), (got_c, want_c), (dx, want_dx), (d_h, want_dh),
                 (d_c, want_dc)):
        np.testing.assert_array_equal(a, e)
    for key, value in cell.gradients.items():
        np.testing.assert_array_equal(grads[key], value)


def test_gru_graph_on_x_and_h():
    x_in, h_in = handgrad.Input((F,)), handgrad.Input((H,))
    cell = L.GRUCell(H, dtype="float64")
    model = handgrad.Model([x_in, h_in], cell([x_in, h_in]), seed=0)
    x, h, _, dh, _ = data("gru", "float64")
    y = model.forward([x, h])
    dx, d_h = model.backward(dh)
    np.testing.assert_array_equal(y, cell.forward_with_state(x, state=h))
    want_dx, want_dh = cell.backward_with_state(dh)
    np.testing.assert_array_equal(dx, want_dx)
    np.testing.assert_array_equal(d_h, want_dh)


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_save_load_round_trip(cell, tmp_path):
    kwargs = {"nonlinearity": "relu"} if cell == "rnn" else {}
    model = handgrad.Sequential([CELLS[cell][0](H, bias=False, **kwargs), L.Dense(2)],
                                input_shape=(F,), seed=3)
    path = tmp_path / "cell.safetensors"
    io.save(model, path)
    loaded = io.load(path)
    x, *_ = data(cell, "float32")
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    assert loaded[0].get_config() == model[0].get_config()


@pytest.mark.parametrize("call, error, message", [
    (lambda c, x, h: c.forward(x, state=h[:2]), ValueError, "'state' must have shape"),
    (lambda c, x, h: c.forward(x, state=h.astype(np.float32)), TypeError, "dtype"),
    (lambda c, x, h: c.forward(x[:, :2]), ValueError, "F = 5 features"),
    (lambda c, x, h: L.LSTMCell(H, dtype="float64").forward(x, state=h), TypeError, "pair (h, c)"),
    (lambda c, x, h: L.GRUCell(0), ValueError, "hidden_size"),
])
def test_bad_inputs_raise_clear_errors(call, error, message):
    cell, _ = make("gru", "float64")
    x, h, *_ = data("gru", "float64")
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(cell, x, h)


def test_lstm_graph_call_with_too_many_inputs_is_refused():
    inputs = [handgrad.Input((F,)) for _ in range(4)]
    with pytest.raises(ValueError, match=r"x, \[x, h\] or \[x, h, c\]"):
        L.LSTMCell(H)(inputs)
