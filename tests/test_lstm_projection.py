"""LSTM(proj_size=P), torch's projected LSTM (h = W_hr (o tanh c)): against
torch.nn.LSTM(proj_size) with copied weights (stacked, bidirectional, padded batches,
initial states and state gradients, float32/64), torch weight import/export, save/load,
gradcheck, graph states, the ONNX refusal and bad configurations."""

import warnings

import numpy as np
import pytest

import handgrad
from handgrad import io as hio
from handgrad import layers as L
from handgrad.io import export_onnx, from_torch, to_torch_state_dict
from handgrad.model import Sequential
from handgrad.testing import gradcheck
from test_recurrent_layers import TORCH_DTYPE, copy_to_torch, pack, torch_key, unpack

from tolerances import assert_outputs_close, condition_bounds, float64_twin

torch = pytest.importorskip("torch")
N, T, F, H, P = 3, 4, 3, 4, 2
LENGTHS = [4, 2, 3]


def torch_lstm(layer, dtype):
    module = torch.nn.LSTM(F, H, layer.num_layers, batch_first=True, proj_size=P,
                           bidirectional=layer.bidirectional).to(TORCH_DTYPE[dtype])
    copy_to_torch(layer, module)
    return module


def quiet(call, *args):
    """torch's float32 CPU path warns that oneDNN has no projected LSTM (a fallback)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "LSTM with projections is not supported")
        return call(*args)


def ours(layer, x, states, lengths, grads):
    """{name: array} of the forward (y, h_n, c_n) and backward (dx, dh0, dc0, weights)."""
    layer.zero_grad()
    y, h_n, c_n = layer.forward_with_state(x, initial_state=tuple(states), lengths=lengths)
    dx, (dh0, dc0) = layer.backward_with_state(grads[0], tuple(grads[1:]))
    return {"y": y, "h_n": h_n, "c_n": c_n, "dx": dx, "dh0": dh0, "dc0": dc0,
            **{f"d{k}": g.copy() for k, g in layer.gradients.items()}}


def theirs(module, x, states, lengths, grads):
    tx = torch.tensor(x, requires_grad=True)
    ts = [torch.tensor(s, requires_grad=True) for s in states]
    seq = tx if lengths is None else pack(tx, torch.tensor(lengths), batch_first=True,
                                          enforce_sorted=False)
    out, (h_n, c_n) = quiet(module, seq, tuple(ts))
    if lengths is not None:
        out, _ = unpack(out, batch_first=True, total_length=x.shape[1])
    loss = sum((a * torch.tensor(g)).sum() for a, g in zip((out, h_n, c_n), grads))
    loss.backward()
    result = {"y": out, "h_n": h_n, "c_n": c_n, "dx": tx.grad, "dh0": ts[0].grad,
              "dc0": ts[1].grad}
    result = {k: v.detach().numpy() for k, v in result.items()}
    for name, param in module.named_parameters():  # weight_hr_l0 -> dW_hr_l0 (transposed)
        grad = param.grad.numpy()
        key = name.replace("weight_", "W_", 1).replace("bias_", "b_", 1)
        assert torch_key(key) == name
        result[f"d{key}"] = grad.T if grad.ndim == 2 else grad
    return result


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("num_layers", "bidirectional", "lengths"), [
    (1, False, None), (2, True, None), (2, False, LENGTHS), (1, True, LENGTHS)])
def test_matches_torch(num_layers, bidirectional, lengths, dtype):
    layer = L.LSTM(H, num_layers, bidirectional=bidirectional, proj_size=P,
                   dtype=np.dtype(dtype).name, seed=num_layers).build((T, F))
    module = torch_lstm(layer, dtype)
    rows, d = num_layers * (2 if bidirectional else 1), 2 if bidirectional else 1
    rng = np.random.default_rng(num_layers + d)
    x = rng.standard_normal((N, T, F)).astype(dtype)
    states = [rng.standard_normal((rows, N, size)).astype(dtype) for size in (P, H)]
    grads = [rng.standard_normal(shape).astype(dtype)
             for shape in ((N, T, d * P), (rows, N, P), (rows, N, H))]
    got = ours(layer, x, states, lengths, grads)
    want = theirs(module, x, states, lengths, grads)
    assert got["y"].shape == (N, T, d * P) and got["h_n"].shape == (rows, N, P)
    assert got["c_n"].shape == (rows, N, H) and got["y"].dtype == dtype
    twin = float64_twin(layer)
    wide = [np.array(a, np.float64) for a in (x, *states, *grads)]
    perturbed = [wide[0], wide[1], wide[2], *twin.parameters.values()]
    bounds = condition_bounds(lambda: ours(twin, wide[0], wide[1:3], lengths, wide[3:]),
                              perturbed)
    assert_outputs_close(got, want, bounds, dtype)
    if lengths is not None:
        assert np.all(got["dx"][np.arange(T)[None, :] >= np.array(lengths)[:, None]] == 0)


def test_projection_changes_the_output():
    """W_hr is used: scaling it changes y (a kernel ignoring it would not notice)."""
    layer = L.LSTM(H, proj_size=P, dtype="float64", seed=0)
    x = np.random.default_rng(0).standard_normal((N, T, F))
    y = layer.forward(x, training=False)
    layer.parameters["W_hr_l0"] *= 2
    assert not np.allclose(layer.forward(x, training=False), y)


def test_torch_weights_in_and_out():
    module = torch.nn.LSTM(F, H, 2, batch_first=True, bidirectional=True,
                           proj_size=P).double()
    wrapped = torch.nn.Sequential(module)  # torch's names "0.weight_hr_l0", ...
    model = Sequential([L.LSTM(H, 2, bidirectional=True, proj_size=P)], input_shape=(T, F),
                       dtype="float64", seed=0)
    from_torch(wrapped, model)
    state = to_torch_state_dict(model)
    assert set(state) == set(wrapped.state_dict())
    for key, value in wrapped.state_dict().items():
        np.testing.assert_array_equal(np.asarray(state[key]), value.numpy())
    x = np.random.default_rng(1).standard_normal((N, T, F))
    want = quiet(module, torch.tensor(x))[0].detach().numpy()
    twin = float64_twin(model)
    bounds = condition_bounds(lambda: {"y": twin.predict(x)},
                              list(twin.named_parameters().values()))
    assert_outputs_close({"y": model.predict(x)}, {"y": want}, bounds, np.float64)


def test_save_load_and_gradcheck(tmp_path):
    model = Sequential([L.LSTM(H, 2, bidirectional=True, proj_size=P, return_sequences=False,
                               name="lstm"), L.Dense(2, name="fc")], input_shape=(T, F),
                       dtype="float64", seed=2)
    x = np.random.default_rng(2).standard_normal((2, T, F))
    result = gradcheck(model, x, rng=0)
    assert result.passed, result.errors
    assert "lstm.W_hr_l1_reverse" in model.named_parameters()
    path = tmp_path / "proj.safetensors"
    hio.save(model, path)
    loaded = hio.load(path)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


def test_graph_states_have_p_features():
    x_in, h_in, c_in = handgrad.Input((T, F)), handgrad.Input((2, P)), handgrad.Input((2, H))
    layer = L.LSTM(H, 2, proj_size=P, return_state=True)
    outs = layer([x_in, h_in, c_in])
    assert [t.shape for t in outs] == [(T, P), (2, P), (2, H)]
    model = handgrad.Model([x_in, h_in, c_in], outs, dtype="float64", seed=0)
    result = gradcheck(model, [np.random.default_rng(3).standard_normal((2, *t.shape))
                               for t in (x_in, h_in, c_in)], rng=0)
    assert result.passed, result.errors
    with pytest.raises(ValueError, match=r"'h0' must have shape \(N, num_layers \* D, P\)"):
        layer([x_in, handgrad.Input((2, H)), c_in])


def test_onnx_export_refuses_proj_size():
    pytest.importorskip("onnx")
    model = Sequential([L.LSTM(H, proj_size=P)], input_shape=(T, F))
    with pytest.raises(ValueError, match=r"proj_size=2, and ONNX's LSTM has no output "
                                         r"projection"):
        export_onnx(model, None)


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: L.LSTM(4, proj_size=4), ValueError, r"LSTM: 'proj_size' must be smaller than "
                                                 r"hidden_size=4"),
    (lambda: L.LSTM(4, proj_size=-1), ValueError, r"'proj_size' must be an int >= 0"),
    (lambda: L.LSTM(4, proj_size=1.5), TypeError, r"'proj_size' must be an int >= 0"),
    (lambda: L.GRU(4, proj_size=2), ValueError, r"GRU: 'proj_size' is only for the LSTM"),
])
def test_bad_proj_size(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("missing", ["W_ih", "W_hh"])
def test_kernel_refuses_a_missing_weight(missing):
    from handgrad import ops
    from handgrad.ops import reference
    weights = {"W_ih": np.zeros((F, 4 * H)), "W_hh": np.zeros((P, 4 * H)),
               "W_hr": np.zeros((H, P)), missing: None}
    for kernel in (ops.lstm_projected, reference.lstm_projected):
        with pytest.raises(TypeError, match=rf"lstm_projected: '{missing}' is required .*None"):
            kernel(np.zeros((N, T, F)), **weights)


def test_bad_state_shapes_name_p():
    layer = L.LSTM(H, proj_size=P, dtype="float64")
    x = np.zeros((N, T, F))
    with pytest.raises(ValueError, match=r"'initial_state' must have shape "
                                         r"\(num_layers \* D, N, P\) = \(1, 3, 2\)"):
        layer.forward(x, initial_state=(np.zeros((1, N, H)), None))
