"""MultiHeadAttention(mask_inputs=...): key_padding_mask / attn_mask as graph inputs of a
Model, against torch.nn.MultiheadAttention with copied weights (output, query/key/value
and every parameter gradient), no gradient for the masks, save/load, ONNX refusal."""

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.testing import assert_close
from test_attention_mha import copy_into_layer, torch_mha, torch_param_grads

from tolerances_composite import mha_bounds

torch = pytest.importorskip("torch")

N, TQ, TK, E, H = 3, 4, 5, 8, 2


def masks_for(rng, kinds, tk, dtype):
    """{name: (graph array, torch array, Input shape)} for the named mask kinds."""
    out = {}
    if "pad" in kinds:
        pad = rng.random((N, tk)) < 0.4
        pad[:, 0] = False  # every query sees a key
        out["key_padding_mask"] = (pad, pad, (tk,))
    if "attn-bool" in kinds:  # one (Tq, Tk) mask for every example, torch's (Tq, Tk)
        am = rng.random((TQ, tk)) < 0.3
        am[:, 0] = False
        out["attn_mask"] = (np.broadcast_to(am, (N, TQ, tk)).copy(), am, (TQ, tk))
    if "attn-float-heads" in kinds:  # per example and head, torch's (N*H, Tq, Tk)
        am = rng.standard_normal((N, H, TQ, tk)).astype(dtype)
        out["attn_mask"] = (am, am.reshape(N * H, TQ, tk), (H, TQ, tk))
        if "key_padding_mask" in out:  # torch wants one mask type: the padding as -inf
            pad = out["key_padding_mask"][0]
            out["key_padding_mask"] = (pad, np.where(pad, -np.inf, 0).astype(dtype), (tk,))
    return out


CASES = {
    "self-pad": (False, ("pad",)),
    "cross-pad": (True, ("pad",)),
    "self-attn-bool": (False, ("attn-bool",)),
    "cross-pad-attn-float-heads": (True, ("pad", "attn-float-heads")),
    "self-attn-then-pad": (False, ("attn-float-heads", "pad")),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(CASES))
def test_graph_mask_inputs_match_torch(name, dtype):
    cross, kinds = CASES[name]
    rng = np.random.default_rng(3)
    tk = TK if cross else TQ
    masks = masks_for(rng, kinds, tk, dtype)
    order = tuple(masks)
    if name == "self-attn-then-pad":  # the order of mask_inputs decides the call's order
        order = ("attn_mask", "key_padding_mask")
    layer = L.MultiHeadAttention(E, H, mask_inputs=order, name="mha")
    query = hg.Input((TQ, E), name="query")
    data = [query, hg.Input((tk, E), name="key"), hg.Input((tk, E), name="value")] \
        if cross else [query]
    mask_tensors = [hg.Input(masks[m][2], name=m, dtype=masks[m][0].dtype) for m in order]
    model = hg.Model([*data, *mask_tensors], layer([*data, *mask_tensors]), dtype=dtype)
    mha = torch_mha(E, H, dtype=dtype)
    copy_into_layer(mha, layer)

    arrays = [rng.standard_normal((N, TQ, E)).astype(dtype)]
    if cross:
        arrays += [rng.standard_normal((N, tk, E)).astype(dtype) for _ in range(2)]
    y = model.forward([*arrays, *(masks[m][0] for m in order)], training=True)
    dy = rng.standard_normal(y.shape).astype(dtype)
    grads = model.backward(dy)

    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    tq_, tk_, tv_ = tensors if cross else tensors * 3
    ty, _ = mha(tq_, tk_, tv_, need_weights=False,
                **{m: torch.tensor(masks[m][1]) for m in masks})
    ty.backward(torch.tensor(dy))
    op_masks = {"key_padding_mask": masks["key_padding_mask"][0]} if "pad" in kinds else {}
    if "attn_mask" in masks:
        op_masks["attn_mask"] = masks["attn_mask"][1]
    in_weight, in_bias = layer._in_weights()
    bounds = mha_bounds(arrays[0], *(arrays[1:] if cross else (None, None)), in_weight,
                        in_bias, layer.parameters["W_out"], layer.parameters["b_out"], dy,
                        num_heads=H, **op_masks)
    for m, grad in zip(order, grads[len(arrays):]):  # none for a bool mask, zeros for float
        if masks[m][0].dtype == bool:
            assert grad is None
        else:
            np.testing.assert_array_equal(grad, np.zeros_like(masks[m][0]))
    ours = {"y": y, "query": grads[0], **layer.gradients}
    theirs = {"y": ty.detach().numpy(), "query": tensors[0].grad.numpy(),
              **torch_param_grads(mha, layer)}
    if cross:
        ours.update(key=grads[1], value=grads[2])
        theirs.update(key=tensors[1].grad.numpy(), value=tensors[2].grad.numpy())
    assert set(ours) == set(theirs)
    for key, actual in ours.items():
        terms, scale = bounds[key]
        assert actual.dtype == dtype
        assert_close(actual, theirs[key], dtype=dtype, terms=terms, scale=scale, what=key)


def test_masks_get_no_gradient_and_data_calls_still_work():
    layer = L.MultiHeadAttention(E, H, mask_inputs=("key_padding_mask",))
    x, pad = hg.Input((TQ, E)), hg.Input((TQ,), dtype=bool)
    model = hg.Model([x, pad], layer([x, pad]), seed=0)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((2, TQ, E)).astype(np.float32)
    mask = np.zeros((2, TQ), bool)
    mask[:, -1] = True
    y = model.forward([xs, mask], training=True)
    assert layer.graph_backward(np.ones_like(y))[1] is None
    # the mask acts: a padded key's value does not reach the output
    changed = xs.copy()
    changed[:, -1] += 1.0
    unmasked = layer.forward(xs, training=False)
    assert not np.allclose(unmasked, layer.forward(changed, training=False))
    y2 = model.forward([changed, mask], training=False)
    assert not np.allclose(y2[:, :-1], unmasked[:, :-1])
    # each output sums TQ keys' values through the E-wide out projection
    assert_close(y2[:, :-1], model.forward([xs, mask], training=False)[:, :-1],
                 dtype=np.float32, terms=TQ * E, what="outputs of the unpadded positions")
    plain = L.MultiHeadAttention(E, H)  # today's calls: mha(q), mha([q, kv]), mha([q, k, v])
    q, kv = hg.Input((TQ, E)), hg.Input((TK, E))
    assert hg.Model([q, kv], plain([q, kv]), seed=0).forward(
        [xs, rng.standard_normal((2, TK, E)).astype(np.float32)]).shape == (2, TQ, E)


def test_save_load_round_trip(tmp_path):
    from handgrad.io import load, save
    layer = L.MultiHeadAttention(E, H, mask_inputs=("attn_mask", "key_padding_mask"))
    x = hg.Input((TQ, E), name="x")
    am, pad = hg.Input((TQ, TQ), name="am", dtype=bool), hg.Input((TQ,), name="pad",
                                                                   dtype=bool)
    model = hg.Model([x, am, pad], layer([x, am, pad]), seed=0)
    save(model, tmp_path / "m")
    back = load(tmp_path / "m")
    assert back.layers[0].mask_inputs == ("attn_mask", "key_padding_mask")
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((2, TQ, E)).astype(np.float32),
              np.triu(np.ones((2, TQ, TQ), bool), 1), rng.random((2, TQ)) < 0.3]
    inputs[2][:, 0] = False
    np.testing.assert_array_equal(back.forward(inputs, training=False),
                                  model.forward(inputs, training=False))


def test_onnx_export_refuses_mask_inputs_by_name(tmp_path):
    from handgrad.io import export_onnx
    layer = L.MultiHeadAttention(E, H, mask_inputs=("key_padding_mask",))
    x, pad = hg.Input((TQ, E)), hg.Input((TQ,), dtype=bool)
    model = hg.Model([x, pad], layer([x, pad]), seed=0)
    with pytest.raises(ValueError, match="mask_inputs"):
        export_onnx(model, tmp_path / "m.onnx")


def test_bad_mask_inputs():
    with pytest.raises(TypeError, match="mask_inputs"):
        L.MultiHeadAttention(E, H, mask_inputs="key_padding_mask")
    for bad in (("padding",), ("attn_mask", "attn_mask")):
        with pytest.raises(ValueError, match="mask_inputs"):
            L.MultiHeadAttention(E, H, mask_inputs=bad)
    layer = L.MultiHeadAttention(E, H, mask_inputs=("attn_mask",))
    x = hg.Input((TQ, E))
    with pytest.raises(ValueError, match="attn_mask"):  # per example (Tq, Tk) or (H, Tq, Tk)
        layer([x, hg.Input((TQ * TQ,), dtype=bool)])
    with pytest.raises(ValueError, match="mask_inputs"):  # the mask is missing
        layer(x)
    pad_layer = L.MultiHeadAttention(E, H, mask_inputs=("key_padding_mask",))
    with pytest.raises(ValueError, match="key_padding_mask"):
        pad_layer([x, hg.Input((TQ, TQ), dtype=bool)])
