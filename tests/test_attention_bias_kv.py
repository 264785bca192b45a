"""MultiHeadAttention's add_bias_kv / add_zero_attn against torch.nn.MultiheadAttention:
output, input gradients and every parameter gradient (bias_k/bias_v included), self- and
cross-attention, with and without masks; torch weight import; save/load; ONNX refusal."""

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.testing import assert_close
from test_attention_mha import copy_into_layer, torch_in_weights

from tolerances_composite import mha_bounds

torch = pytest.importorskip("torch")


def randn(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def make_pair(dtype, bias_kv, zero, kdim=None, seed=0):
    torch.manual_seed(seed)
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    mha = torch.nn.MultiheadAttention(8, 2, kdim=kdim, vdim=kdim, batch_first=True, dtype=tdt,
                                      add_bias_kv=bias_kv, add_zero_attn=zero)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    layer = L.MultiHeadAttention(8, 2, kdim=kdim, vdim=kdim, packed=kdim is None,
                                 add_bias_kv=bias_kv, add_zero_attn=zero, dtype=dtype)
    layer.ensure_built((5, 8))
    copy_into_layer(mha, layer)
    if bias_kv:
        for name in ("bias_k", "bias_v"):
            layer.parameters[name][...] = getattr(mha, name).detach().numpy()
    return mha, layer


CASES = [(True, False), (False, True), (True, True)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bias_kv,zero", CASES)
@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_torch(dtype, bias_kv, zero, cross, masked):
    rng = np.random.default_rng(1)
    mha, layer = make_pair(dtype, bias_kv, zero, kdim=6 if cross else None)
    q = randn(rng, (3, 5, 8), dtype)
    key, value = (randn(rng, (3, 4, 6), dtype) for _ in range(2)) if cross else (None, None)
    tk = 4 if cross else 5
    kpm = np.zeros((3, tk), bool)
    kpm[0, -1] = True
    am = np.triu(np.ones((5, tk), bool), 1)
    masks = dict(key_padding_mask=kpm, attn_mask=am) if masked else {}
    tq_ = torch.tensor(q, requires_grad=True)
    tk_, tv_ = (torch.tensor(x, requires_grad=True) for x in (key, value)) if cross else (tq_,
                                                                                         tq_)
    ty, _ = mha(tq_, tk_, tv_, need_weights=False,
                **{k: torch.tensor(v) for k, v in masks.items()})
    dy = randn(rng, tuple(ty.shape), dtype)
    ty.backward(torch.tensor(dy))
    y = layer.forward(q, key=key, value=value, **masks)
    in_weight, in_bias = layer._in_weights()
    bounds = mha_bounds(q, key, value, in_weight, in_bias, layer.parameters["W_out"],
                        layer.parameters["b_out"], dy, num_heads=2,
                        bias_k=layer.parameters.get("bias_k"),
                        bias_v=layer.parameters.get("bias_v"), add_zero_attn=zero, **masks)
    dq, dk, dv = layer.backward_all(dy)
    ours = {"y": y, "query": dq, **layer.gradients}
    theirs = {"y": ty.detach().numpy(), "query": tq_.grad.numpy(),
              "W_out": mha.out_proj.weight.grad.numpy().T,
              "b_out": mha.out_proj.bias.grad.numpy()}
    if cross:
        ours.update(key=dk, value=dv)
        theirs.update(key=tk_.grad.numpy(), value=tv_.grad.numpy())
    tw = torch_in_weights(mha, grad=True)
    tb = mha.in_proj_bias.grad.numpy()
    if layer.packed:
        theirs.update(W_in=np.concatenate(tw).T, b_in=tb)
    else:
        theirs.update({f"W_{n}": w.T for n, w in zip("qkv", tw)})
        theirs.update({f"b_{n}": tb[i * 8:(i + 1) * 8] for i, n in enumerate("qkv")})
    if bias_kv:
        theirs.update({n: getattr(mha, n).grad.numpy() for n in ("bias_k", "bias_v")})
    else:
        assert "bias_k" not in layer.parameters
    assert set(ours) == set(theirs)
    for name, actual in ours.items():
        terms, scale = bounds[name]
        assert_close(actual, theirs[name], dtype=dtype, terms=terms, scale=scale, what=name)


def test_config_round_trip():
    layer = L.MultiHeadAttention(8, 2, add_bias_kv=True, add_zero_attn=True)
    clone = L.MultiHeadAttention(**{k: v for k, v in layer.get_config().items()
                                    if k not in ("name", "trainable", "dtype", "seed")})
    assert clone.add_bias_kv and clone.add_zero_attn
    clone.ensure_built((5, 8))
    assert clone.parameters["bias_k"].shape == (1, 1, 8)


def test_bad_flag():
    with pytest.raises((TypeError, ValueError), match="add_zero_attn"):
        L.MultiHeadAttention(8, 2, add_zero_attn="yes")


def test_torch_import_and_export_of_bias_kv():
    from handgrad.io import from_torch, to_torch_state_dict
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, add_bias_kv=True,
                                      add_zero_attn=True, dtype=torch.float64)
    layer = L.MultiHeadAttention(8, 2, add_bias_kv=True, add_zero_attn=True,
                                 dtype=np.float64).build((5, 8))
    from_torch(mha, layer)
    assert_close(layer.parameters["bias_k"], mha.bias_k.detach().numpy(), dtype=np.float64)
    q = np.random.default_rng(0).standard_normal((2, 5, 8))
    tq = torch.tensor(q)
    with torch.no_grad():
        expected = mha(tq, tq, tq, need_weights=False)[0].numpy()
    assert_close(layer.forward(q, training=False), expected, dtype=np.float64, terms=64)
    state = to_torch_state_dict(layer)
    assert set(state) == set(mha.state_dict())
    mha.load_state_dict(state, strict=True)


def test_save_load_keeps_bias_kv(tmp_path):
    from handgrad.io import load, save
    from handgrad.model import Sequential
    model = Sequential([L.MultiHeadAttention(8, 2, add_bias_kv=True, add_zero_attn=True)],
                       input_shape=(5, 8), seed=0)
    save(model, tmp_path / "m")
    back = load(tmp_path / "m")
    layer = back.layers[0]
    assert layer.add_bias_kv and layer.add_zero_attn
    np.testing.assert_array_equal(layer.parameters["bias_v"],
                                  model.layers[0].parameters["bias_v"])
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    np.testing.assert_array_equal(back.predict(x), model.predict(x))


@pytest.mark.parametrize("option", ["add_bias_kv", "add_zero_attn"])
def test_onnx_refuses_by_name(option, tmp_path):
    from handgrad.io import export_onnx
    from handgrad.model import Sequential
    model = Sequential([L.MultiHeadAttention(8, 2, **{option: True})], input_shape=(5, 8),
                       seed=0)
    with pytest.raises(ValueError, match=option):
        export_onnx(model, tmp_path / "m.onnx")


def test_op_bad_bias_kv():
    from handgrad import ops
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 4))
    w, b = rng.standard_normal((4, 12)), np.zeros(12)
    w_out = rng.standard_normal((4, 4))
    args = (q, None, None, w, b, w_out, None)
    with pytest.raises(ValueError, match="bias_v"):
        ops.multi_head_attention(*args, num_heads=2, bias_k=np.zeros((1, 1, 4)))
    with pytest.raises(ValueError, match=r"bias_k.*\(1, 1, 4\)"):
        ops.multi_head_attention(*args, num_heads=2, bias_k=np.zeros((4,)),
                                 bias_v=np.zeros((1, 1, 4)))
    with pytest.raises(ValueError, match="causal"):
        ops.multi_head_attention(*args, num_heads=2, add_zero_attn=True, causal=True,
                                 attn_mask=np.zeros((3, 3), bool))


def test_causal_pads_like_an_explicit_mask():
    """causal=True with extra columns: the new columns stay visible to every query (torch
    pads the causal attn_mask with zeros)."""
    mha, layer = make_pair(np.float64, True, True)
    q = np.random.default_rng(2).standard_normal((2, 5, 8))
    tq = torch.tensor(q)
    mask = np.triu(np.ones((5, 5), bool), 1)
    with torch.no_grad():
        expected = mha(tq, tq, tq, need_weights=False, attn_mask=torch.tensor(mask))[0]
    assert_close(layer.forward(q, training=False, causal=True), expected.numpy(),
                 dtype=np.float64, terms=64)


def test_bias_kv_init_has_torch_spread():
    """torch's xavier_normal_ on (1, 1, E) has std sqrt(2 / (E + E)) = 1 / sqrt(E)."""
    e = 1024
    layer = L.MultiHeadAttention(e, 1, add_bias_kv=True, dtype=np.float64, seed=0)
    layer.ensure_built((2, e))
    for name in ("bias_k", "bias_v"):
        std = float(layer.parameters[name].std())
        # 0.1 is 4.5 standard errors; glorot_normal's fans would be 0.41 off
        assert abs(std * np.sqrt(e) - 1) < 0.1, (name, std)
