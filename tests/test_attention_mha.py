"""Multi-head attention (op and layer): against torch.nn.MultiheadAttention with copied
weights (packed and separate projections, kdim/vdim, key_padding_mask, attn_mask,
causal), the loop twin, finite differences, Sequential use and bad inputs."""

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import ops
from handgrad.model import Sequential
from handgrad.ops import reference
from handgrad.testing import assert_close, assert_gradient_close
from test_attention import DTYPES, numeric_grad, randn, tt

from tolerances_composite import mha_bounds, network_bounds

torch = pytest.importorskip("torch")


# ------------------------------------------------------------------ multi-head attention
def torch_mha(e, h, kdim=None, vdim=None, bias=True, dtype=np.float64, seed=0):
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(e, h, bias=bias, kdim=kdim, vdim=vdim, batch_first=True,
                                      dtype=torch.float64 if dtype == np.float64 else
                                      torch.float32)
    if bias:
        with torch.no_grad():  # torch zero-initializes the biases; make them matter
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha


def torch_in_weights(mha, grad=False):
    """torch's q, k, v projection weights (E, F_in) (or their gradients), packed or not."""
    get = (lambda t: t.grad.numpy()) if grad else (lambda t: t.detach().numpy())
    if mha._qkv_same_embed_dim:
        w, e = get(mha.in_proj_weight), mha.embed_dim
        return [w[i * e:(i + 1) * e] for i in range(3)]
    return [get(getattr(mha, f"{name}_proj_weight")) for name in "qkv"]


def copy_into_layer(mha, layer):
    """torch (F_out, F_in) weights -> handgrad (F_in, F_out) parameters."""
    e, p = layer.embed_dim, layer.parameters
    weights = torch_in_weights(mha)
    if layer.packed:
        p["W_in"][...] = np.concatenate(weights).T
    else:
        for name, w in zip("qkv", weights):
            p[f"W_{name}"][...] = w.T
    p["W_out"][...] = mha.out_proj.weight.detach().numpy().T
    if layer.use_bias:
        b = mha.in_proj_bias.detach().numpy()
        if layer.packed:
            p["b_in"][...] = b
        else:
            for i, name in enumerate("qkv"):
                p[f"b_{name}"][...] = b[i * e:(i + 1) * e]
        p["b_out"][...] = mha.out_proj.bias.detach().numpy()


def torch_param_grads(mha, layer):
    """torch's parameter gradients in the layer's names and layout."""
    e, grads = layer.embed_dim, {}
    weights = torch_in_weights(mha, grad=True)
    if layer.packed:
        grads["W_in"] = np.concatenate(weights).T
    else:
        grads.update({f"W_{name}": w.T for name, w in zip("qkv", weights)})
    grads["W_out"] = mha.out_proj.weight.grad.numpy().T
    if layer.use_bias:
        b = mha.in_proj_bias.grad.numpy()
        if layer.packed:
            grads["b_in"] = b
        else:
            grads.update({f"b_{n}": b[i * e:(i + 1) * e] for i, n in enumerate("qkv")})
        grads["b_out"] = mha.out_proj.bias.grad.numpy()
    return grads


def assert_grads_close(ours, expected, bounds, dtype):
    """Each named result against ``expected`` within the tolerance ``bounds = {name:
    (terms, scale)}`` (tolerances_composite.mha_bounds). The key bias's gradient is zero
    in exact arithmetic (softmax ignores a shift of a whole row): both are rounding noise."""
    for name, actual in ours.items():
        terms, scale = bounds[name]
        check = dict(dtype=dtype, terms=terms, scale=scale, what=name)
        assert_close(actual, expected[name], **check)
        if name == "b_k":
            assert_close(actual, np.zeros_like(actual), **check)


MHA_CASES = {
    "self-packed": dict(packed=True, cross=False),
    "self-separate-nobias": dict(packed=False, cross=False, bias=False),
    "cross-packed-longer-keys": dict(packed=True, cross=True, tk=7),
    "cross-kdim-vdim": dict(packed=False, cross=True, tk=6, kdim=5, vdim=3),
    "self-key-padding": dict(packed=True, cross=False, padding=True),
    "cross-bool-attn-mask": dict(packed=False, cross=True, tk=6, kdim=5, vdim=3,
                                 attn="bool", padding=True),
    "self-float-attn-mask-3d": dict(packed=True, cross=False, attn="float3d"),
    "self-causal": dict(packed=True, cross=False, causal=True, padding=True),
}


def mha_setup(case, dtype, n=2, tq=5, e=8, h=2, seed=0):
    rng = np.random.default_rng(seed)
    tk = case.get("tk", tq) if case["cross"] else tq
    kdim, vdim = case.get("kdim"), case.get("vdim")
    layer = L.MultiHeadAttention(e, h, bias=case.get("bias", True), kdim=kdim, vdim=vdim,
                                 packed=case["packed"], dtype=dtype)
    layer.build((tq, e))
    mha = torch_mha(e, h, kdim, vdim, case.get("bias", True), dtype)
    copy_into_layer(mha, layer)
    query = randn(rng, n, tq, e, dtype=dtype)
    key = randn(rng, n, tk, kdim or e, dtype=dtype) if case["cross"] else None
    value = randn(rng, n, tk, vdim or e, dtype=dtype) if case["cross"] else None
    masks, torch_masks = {}, {}
    if case.get("padding"):
        kpm = rng.random((n, tk)) < 0.3
        kpm[:, 0] = False
        masks["key_padding_mask"] = torch_masks["key_padding_mask"] = kpm
    if case.get("attn") == "bool":
        am = rng.random((tq, tk)) < 0.3
        masks["attn_mask"] = torch_masks["attn_mask"] = am
    if case.get("attn") == "float3d":
        am = rng.standard_normal((n * h, tq, tk)).astype(dtype)
        masks["attn_mask"] = torch_masks["attn_mask"] = am
    if case.get("causal"):
        masks["causal"] = True
        torch_masks["attn_mask"] = np.triu(np.ones((tq, tk), dtype=bool), 1)
    return layer, mha, query, key, value, masks, torch_masks


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(MHA_CASES))
def test_multi_head_attention_layer_matches_torch(name, dtype):
    case = MHA_CASES[name]
    layer, mha, query, key, value, masks, torch_masks = mha_setup(case, dtype)
    y = layer.forward(query, key=key, value=value, **masks)
    dy = randn(np.random.default_rng(7), *y.shape, dtype=dtype)
    bounds = mha_bounds(query, key, value, *op_arguments(layer), dy, num_heads=layer.num_heads,
                        **masks)
    dquery, dkey, dvalue = layer.backward_all(dy)

    tq_, tk_, tv_ = tt(query), tt(key if case["cross"] else query), tt(
        value if case["cross"] else query)
    if not case["cross"]:
        tk_ = tv_ = tq_
    expected, _ = mha(tq_, tk_, tv_, need_weights=False,
                      **{k: torch.tensor(v) for k, v in torch_masks.items()})
    expected.backward(torch.tensor(dy))
    assert y.dtype == dtype and dquery.dtype == dtype
    ours = {"y": y, "query": dquery}
    theirs = {"y": expected.detach().numpy(), "query": tq_.grad.numpy()}
    if case["cross"]:
        ours.update(key=dkey, value=dvalue)
        theirs.update(key=tk_.grad.numpy(), value=tv_.grad.numpy())
        assert layer.key_value_grads[0] is dkey
    else:
        assert dkey is None and dvalue is None
    expected_grads = torch_param_grads(mha, layer)
    assert set(expected_grads) == set(layer.gradients)
    assert all(grad.dtype == dtype for grad in layer.gradients.values())
    assert_grads_close({**ours, **layer.gradients}, {**theirs, **expected_grads}, bounds, dtype)


def op_arguments(layer):
    in_weight, in_bias = layer._in_weights()
    return in_weight, in_bias, layer.parameters["W_out"], layer.parameters.get("b_out")


@pytest.mark.parametrize("name", ["self-packed", "cross-kdim-vdim", "cross-bool-attn-mask",
                                  "self-causal"])
def test_multi_head_attention_loop_twin_and_finite_differences(name):
    case = MHA_CASES[name]
    layer, _, query, key, value, masks, _ = mha_setup(case, np.float64, tq=3, e=4)
    weights = op_arguments(layer)
    kwargs = dict(num_heads=2, dropout=0.3, **masks)
    y, cache = ops.multi_head_attention(query, key, value, *weights, rng=1, **kwargs)
    dy = randn(np.random.default_rng(5), *y.shape)
    grads = ops.multi_head_attention_backward(dy, cache)
    ref_y, ref_cache = reference.multi_head_attention(query, key, value, *weights, rng=1,
                                                      **kwargs)
    ref_grads = reference.multi_head_attention_backward(dy, ref_cache)
    ours, theirs = named_op_grads(layer, grads), named_op_grads(layer, ref_grads)
    bounds = mha_bounds(query, key, value, *weights, dy, rng=1, **kwargs)
    assert_grads_close({"y": y, **ours}, {"y": ref_y, **theirs}, bounds, np.float64)

    def loss():
        out, _ = ops.multi_head_attention(query, key, value, *weights, rng=1, **kwargs)
        return float(np.sum(out * dy))

    arrays = {"query": query, "key": key, "value": value, **layer.parameters}
    for key_name, grad in ours.items():
        numeric, error = numeric_grad(loss, arrays[key_name], with_error=True)
        assert_gradient_close(grad, numeric, error, what=key_name)


def named_op_grads(layer, grads):
    """The op's gradient tuple as {name: array} in the layer's parameter names."""
    dquery, dkey, dvalue, din_w, din_b, dw_out, db_out = grads
    named = {"query": dquery, "key": dkey, "value": dvalue, "W_out": dw_out, "b_out": db_out}
    if layer.packed:
        named.update(W_in=din_w, b_in=din_b)
    else:
        named.update(zip(("W_q", "W_k", "W_v"), din_w))
        named.update(zip(("b_q", "b_k", "b_v"), din_b or (None,) * 3))
    return {k: v for k, v in named.items() if v is not None}


def test_multi_head_attention_non_contiguous_inputs():
    layer, _, query, key, value, masks, _ = mha_setup(MHA_CASES["cross-bool-attn-mask"],
                                                      np.float64)
    weights = op_arguments(layer)
    views = [np.asfortranarray(a) for a in (query, key, value)]
    assert not views[0].flags.c_contiguous
    y, cache = ops.multi_head_attention(query, key, value, *weights, num_heads=2, **masks)
    y_t, cache_t = ops.multi_head_attention(*views, *weights, num_heads=2, **masks)
    np.testing.assert_array_equal(y, y_t)
    dy = randn(np.random.default_rng(0), *y.shape)
    grads = ops.multi_head_attention_backward(dy, cache)
    grads_t = ops.multi_head_attention_backward(np.asfortranarray(dy), cache_t)
    for a, b in zip(named_op_grads(layer, grads).values(),
                    named_op_grads(layer, grads_t).values()):
        np.testing.assert_array_equal(a, b)


def test_key_bias_gradient_is_zero_and_padded_keys_get_no_gradient():
    layer, _, query, key, value, _, _ = mha_setup(MHA_CASES["cross-kdim-vdim"], np.float64)
    kpm = np.zeros((2, 6), dtype=bool)
    kpm[:, [2, 4]] = True
    layer.forward(query, key=key, value=value, key_padding_mask=kpm)
    dy = randn(np.random.default_rng(1), 2, 5, 8)
    _, dkey, dvalue = layer.backward_all(dy)
    assert np.all(dkey[:, [2, 4]] == 0) and np.all(dvalue[:, [2, 4]] == 0)
    assert np.all(dkey[:, [0, 1, 3, 5]] != 0)
    terms, scale = mha_bounds(query, key, value, *op_arguments(layer), dy,
                              num_heads=layer.num_heads, key_padding_mask=kpm)["b_k"]
    b_k = layer.gradients["b_k"]  # softmax ignores a row shift: only rounding is left
    assert_close(b_k, np.zeros_like(b_k), dtype=np.float64, terms=terms, scale=scale,
                 what="b_k")


def test_multi_head_attention_in_sequential_with_dropout_and_causal_config():
    model = Sequential([L.Dense(8, name="embed"),
                        L.MultiHeadAttention(8, 4, dropout=0.2, causal=True, seed=3,
                                             name="attn"),
                        L.Dense(2, name="head")], dtype="float64")
    x = randn(np.random.default_rng(0), 3, 6, 5)
    y = model.forward(x)
    assert y.shape == (3, 6, 2)
    assert model.backward(randn(np.random.default_rng(1), *y.shape)).shape == x.shape
    eval_y = model.forward(x, training=False)
    np.testing.assert_array_equal(eval_y, model.forward(x, training=False))
    # causal: changing the last time step leaves the earlier outputs unchanged
    x2 = x.copy()
    x2[:, -1] += 1.0
    changed = model.forward(x2, training=False)
    terms, scale = network_bounds(model, x)  # the projections' matmuls see other rows
    assert_close(changed[:, :-1], eval_y[:, :-1], dtype=np.float64, terms=terms, scale=scale,
                 what="earlier steps")
    assert "attn.W_in" in model.named_parameters()


def test_mha_layer_initialization_matches_torch_rules():
    layer = L.MultiHeadAttention(16, 4, kdim=8, packed=False, seed=0).build((5, 16))
    p = layer.parameters
    assert p["W_q"].shape == (16, 16) and p["W_k"].shape == (8, 16)
    assert p["W_v"].shape == (16, 16) and p["W_out"].shape == (16, 16)
    assert np.max(np.abs(p["W_k"])) <= np.sqrt(6 / 24) and np.all(p["b_k"] == 0)
    assert np.max(np.abs(p["W_out"])) <= 0.25
    assert p["W_q"].dtype == np.float32


def test_multi_head_attention_bad_inputs():
    rng = np.random.default_rng(0)
    x = randn(rng, 2, 3, 8)
    w_in, w_out = randn(rng, 8, 24), randn(rng, 8, 8)
    mha = ops.multi_head_attention
    with pytest.raises(ValueError, match="E = 8 must be divisible by num_heads = 3"):
        mha(x, None, None, w_in, None, w_out, None, num_heads=3)
    with pytest.raises(ValueError, match="pass both 'key' and 'value'"):
        mha(x, x, None, w_in, None, w_out, None, num_heads=2)
    with pytest.raises(ValueError, match=r"'in_weight' must have shape \(8, 24\)"):
        mha(x, None, None, w_in[:, :16], None, w_out, None, num_heads=2)
    with pytest.raises(ValueError, match=r"packed 'in_weight' .* kdim = 5"):
        mha(x, randn(rng, 2, 4, 5), randn(rng, 2, 4, 8), w_in, None, w_out, None, num_heads=2)
    with pytest.raises(ValueError, match="'key' and 'value' must be"):
        mha(x, randn(rng, 2, 4, 8), randn(rng, 2, 5, 8), w_in, None, w_out, None, num_heads=2)
    with pytest.raises(ValueError, match=r"'key_padding_mask' must be broadcastable .*\(2, 3\)"):
        mha(x, None, None, w_in, None, w_out, None, num_heads=2,
            key_padding_mask=np.zeros((2, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"'attn_mask' must be broadcastable .*\(3, 3, 3\)"):
        mha(x, None, None, w_in, None, w_out, None, num_heads=2,
            attn_mask=np.zeros((3, 3, 3), dtype=bool))
    with pytest.raises(TypeError, match="'num_heads' must be an int"):
        mha(x, None, None, w_in, None, w_out, None, num_heads=2.0)
    with pytest.raises(ValueError, match=r"'query' must be a 3-D array \(N, Tq, E\)"):
        mha(x[0], None, None, w_in, None, w_out, None, num_heads=2)
    with pytest.raises(TypeError, match="'in_bias' must be None or a tuple"):
        mha(x, None, None, (w_out, w_out, w_out), randn(rng, 24), w_out, None, num_heads=2)


def test_multi_head_attention_layer_bad_config_and_inputs():
    with pytest.raises(ValueError, match=r"'embed_dim' \(10\) must be divisible by "
                                         r"'num_heads' \(4\)"):
        L.MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="packed=True needs kdim == vdim == embed_dim"):
        L.MultiHeadAttention(8, 2, kdim=4)
    with pytest.raises(ValueError, match="'dropout' must be"):
        L.MultiHeadAttention(8, 2, dropout=1.5)
    with pytest.raises(TypeError, match="'packed' must be a bool"):
        L.MultiHeadAttention(8, 2, packed="yes")
    layer = L.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"expects queries \(N, Tq, 8\); received .*\(3, 6\)"):
        layer.forward(np.zeros((2, 3, 6), dtype=np.float32))
    layer.forward(np.zeros((2, 3, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="'query' must have embed_dim = 8"):
        layer.forward(np.zeros((2, 3, 6), dtype=np.float32))
    with pytest.raises(TypeError, match=r"input dtype float64 does not match .* float32"):
        layer.forward(np.zeros((2, 3, 8)))
