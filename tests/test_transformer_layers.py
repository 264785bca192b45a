"""Transformer layers against torch (weights imported, dropout 0): outputs and the
gradients of every input and every parameter, float32 and float64, train and eval,
post-norm and norm_first, relu and gelu, with causal and key padding masks; the
tolerance of each result is the case's condition measured on the float64 layer."""

from __future__ import annotations

import copy
import functools
import warnings

import numpy as np
import pytest

import handgrad.layers as L
from handgrad import Input, Model
from handgrad.io import export_onnx
from handgrad.io.torch_interop import from_torch, to_torch_state_dict
from handgrad.testing import assert_close, gradcheck

from tolerances import condition_bounds

torch = pytest.importorskip("torch")
nn = torch.nn

E, H, FF, N, T, S = 4, 2, 6, 2, 3, 4
DTYPES = (np.float32, np.float64)
# (norm_first, activation, training, masks): masks "none", "explicit" (bool causal
# attention mask and key padding masks, on both sides) or "flag" (handgrad's causal flag
# against torch's explicit causal mask, with key padding)
VARIANTS = {
    "post-relu-train": (False, "relu", True, "none"),
    "pre-gelu-eval-explicit": (True, "gelu", False, "explicit"),
    "post-relu-train-flag": (False, "relu", True, "flag"),
    "pre-relu-train-explicit": (True, "relu", True, "explicit"),
    "post-gelu-train-explicit": (False, "gelu", True, "explicit"),
}
LAYERS = [(kind, variant) for kind in ("encoder_layer", "decoder_layer") for variant in VARIANTS]
# the stacks: both norms and activations, train and eval, masks as given and as the flag
STACKS = [(kind, variant) for kind in ("encoder", "decoder", "transformer")
          for variant in ("pre-gelu-eval-explicit", "post-relu-train-flag")]


def layer_args(norm_first, activation):
    return dict(dim_feedforward=FF, dropout=0.0, activation=activation, norm_first=norm_first,
                layer_norm_eps=1e-5)


def make_pair(kind, norm_first, activation, dtype):
    """(torch module, built handgrad layer with the torch weights)."""
    args = layer_args(norm_first, activation)
    torch.manual_seed(0)
    with warnings.catch_warnings():  # torch: no nested tensors with norm_first
        warnings.simplefilter("ignore")
        if kind == "transformer":
            tm = nn.Transformer(E, H, 1, 1, batch_first=True, **args)
            ours = L.Transformer(E, H, 1, 1, **args, dtype=dtype)
        elif kind.startswith("encoder"):
            tm = nn.TransformerEncoderLayer(E, H, batch_first=True, **args)
            ours = L.TransformerEncoderLayer(E, H, **args, dtype=dtype)
            if kind == "encoder":
                tm = nn.TransformerEncoder(tm, 2, norm=nn.LayerNorm(E),
                                           enable_nested_tensor=False)
                ours = L.TransformerEncoder(ours, 2, norm=L.LayerNorm(E), dtype=dtype)
        else:
            tm = nn.TransformerDecoderLayer(E, H, batch_first=True, **args)
            ours = L.TransformerDecoderLayer(E, H, **args, dtype=dtype)
            if kind == "decoder":
                tm = nn.TransformerDecoder(tm, 2, norm=nn.LayerNorm(E))
                ours = L.TransformerDecoder(ours, 2, norm=L.LayerNorm(E), dtype=dtype)
    tm = tm.to(torch.float64 if dtype == np.float64 else torch.float32)
    with torch.no_grad():  # varied norms, so that their gradients are checked too
        for name, p in tm.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    ours.build((T, E))
    return tm, from_torch(tm.state_dict(), ours)


def case_inputs(kind, masks, dtype):
    """(data arrays, handgrad keyword masks, torch keyword masks)."""
    rng = np.random.default_rng(7)
    first = S if kind == "transformer" else T
    data = [rng.standard_normal((N, first if kind == "transformer" else T, E))]
    if kind != "encoder_layer" and kind != "encoder":
        data.append(rng.standard_normal((N, S if kind != "transformer" else T, E)))
    data = [a.astype(dtype) for a in data]
    if masks == "none":
        return data, {}, {}
    causal = np.triu(np.ones((T, T), bool), 1)
    pad_t = np.zeros((N, T), bool)
    pad_t[1, -1] = True
    pad_s = np.zeros((N, S), bool)
    pad_s[0, -2:] = True
    if kind.startswith("encoder"):
        ours = {"src_key_padding_mask": pad_t}
        theirs = {"src_key_padding_mask": pad_t, "mask" if kind == "encoder" else "src_mask":
                  causal}
        ours.update({"is_causal": True} if masks == "flag" else {"src_mask": causal})
        return data, ours, theirs
    memory_pad = "src_key_padding_mask" if kind == "transformer" else None
    ours = {"tgt_key_padding_mask": pad_t, "memory_key_padding_mask": pad_s}
    if memory_pad:
        ours[memory_pad] = pad_s
    theirs = {**ours, "tgt_mask": causal}
    ours.update({"tgt_is_causal": True} if masks == "flag" else {"tgt_mask": causal})
    return data, ours, theirs


def torch_names(layer, arrays):
    """``{torch name: array}`` for handgrad ``{path: array}`` (the layer's layout)."""
    twin = copy.deepcopy(layer)
    for key, value in twin.named_parameters().items():
        value[...] = arrays[key]
    return to_torch_state_dict(twin, numpy=True)


def run_ours(layer, data, masks, dy, training):
    layer.zero_grad()
    y = layer.forward(*data, training=training, grad=True, **masks)
    grads = layer.backward_all(dy)
    return {"y": y, **{f"d{i}": g for i, g in enumerate(grads)},
            **torch_names(layer, layer.named_gradients())}


def run_torch(tm, data, masks, dy, training):
    tm.train(training)
    tm.zero_grad()
    xs = [torch.tensor(a, requires_grad=True) for a in data]
    y = tm(*xs, **{k: torch.tensor(v) for k, v in masks.items()})
    (y * torch.tensor(dy)).sum().backward()
    return {"y": y.detach().numpy(), **{f"d{i}": x.grad.numpy() for i, x in enumerate(xs)},
            **{name: p.grad.numpy() for name, p in tm.named_parameters()}}


@functools.cache
def bounds(kind, variant):
    """{result: (terms, scale)} measured on the float64 layer: the condition of each
    result with respect to the inputs, the upstream gradient and every weight."""
    norm_first, activation, training, masks = VARIANTS[variant]
    _, layer = make_pair(kind, norm_first, activation, np.float64)
    data, ours, _ = case_inputs(kind, masks, np.float64)
    dy = np.random.default_rng(3).standard_normal((N, T, E))
    arrays = [*data, dy, *layer.named_parameters().values()]
    return condition_bounds(lambda: run_ours(layer, data, ours, dy, training), arrays)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize(("kind", "variant"), LAYERS + STACKS)
def test_matches_torch(kind, variant, dtype):
    norm_first, activation, training, masks = VARIANTS[variant]
    tm, layer = make_pair(kind, norm_first, activation, dtype)
    data, ours, theirs = case_inputs(kind, masks, dtype)
    dy = np.random.default_rng(3).standard_normal((N, T, E)).astype(dtype)
    expected = run_torch(tm, data, theirs, dy, training)
    actual = run_ours(layer, data, ours, dy, training)
    assert set(actual) == set(expected)  # every parameter of torch's, by its name
    for name, (terms, scale) in bounds(kind, variant).items():
        assert_close(actual[name], expected[name], dtype=dtype, terms=terms, scale=scale,
                     what=name)


def test_the_masks_change_the_output():
    """The masked cases test the masks: without them the outputs differ."""
    _, layer = make_pair("transformer", False, "relu", np.float64)
    data, masks, _ = case_inputs("transformer", "explicit", np.float64)
    assert not np.allclose(layer.forward(*data, training=False, **masks),
                           layer.forward(*data, training=False))


def test_stack_copies_are_independent_and_start_equal():
    prototype = L.TransformerEncoderLayer(E, H, FF, dropout=0.0, dtype=np.float64)
    stack = L.TransformerEncoder(prototype, 2, dtype=np.float64).build((T, E))
    first, second = stack.layers
    assert first is not prototype and first is not second
    for key, value in first.named_parameters().items():
        assert np.array_equal(value, second.named_parameters()[key])
        assert not np.shares_memory(value, second.named_parameters()[key])
    stack.forward(np.random.default_rng(0).standard_normal((N, T, E)))
    stack.backward(np.ones((N, T, E)))
    assert not np.array_equal(first.named_gradients()["linear1.W"],
                              second.named_gradients()["linear1.W"])


def test_seeded_dropout_is_reproducible():
    x = np.random.default_rng(0).standard_normal((N, T, E))
    tgt = np.random.default_rng(1).standard_normal((N, S, E))

    def run(seed, state=None):
        layer = L.Transformer(E, H, 1, 1, FF, dropout=0.5, seed=seed, dtype=np.float64)
        layer.build((T, E))
        return layer.forward(x, tgt), layer

    (a, first), (b, _), (c, _) = run(5), run(5), run(6)
    assert np.array_equal(a, b) and not np.allclose(a, c)
    assert not np.allclose(a, first.forward(x, tgt, training=False))  # dropout acted
    state = copy.deepcopy(first.extra_state())
    again = first.forward(x, tgt)
    first.load_extra_state(state)
    assert np.array_equal(first.forward(x, tgt), again)


def test_decoder_gradients_match_finite_differences():
    _, layer = make_pair("decoder_layer", True, "gelu", np.float64)
    data, _, _ = case_inputs("decoder_layer", "none", np.float64)
    result = gradcheck(layer, data, rng=0)
    assert set(result.errors) == {"x[0]", "x[1]", *layer.named_parameters()}
    assert result.passed, result.errors


def test_graph_with_mask_inputs_matches_the_forward():
    """``mask_inputs``: masks follow the data in a graph; attention masks per example."""
    layer = L.TransformerDecoderLayer(E, H, FF, dropout=0.0, dtype=np.float64,
                                      mask_inputs=("tgt_mask", "memory_key_padding_mask"))
    tgt, memory = Input((T, E)), Input((S, E))
    mask, pad = Input((T, T), dtype=bool), Input((S,), dtype=bool)
    model = Model([tgt, memory, mask, pad], layer([tgt, memory, mask, pad]),
                  dtype=np.float64)
    data, _, _ = case_inputs("decoder_layer", "none", np.float64)
    causal = np.broadcast_to(np.triu(np.ones((T, T), bool), 1), (N, T, T))
    pad_s = np.zeros((N, S), bool)
    pad_s[0, -1] = True
    y = model.forward([*data, causal, pad_s], training=True)
    grads = model.backward(np.ones_like(y))
    direct = layer.forward(*data, tgt_mask=causal[0], memory_key_padding_mask=pad_s,
                           training=False)
    assert np.array_equal(y, direct)
    assert grads[2] is None and grads[3] is None and grads[1].shape == data[1].shape


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="'activation'"):
        L.TransformerEncoderLayer(E, H, activation="tanh")
    with pytest.raises(ValueError, match="'mask_inputs'"):
        L.TransformerEncoderLayer(E, H, mask_inputs=("tgt_mask",))
    with pytest.raises(TypeError, match="'encoder_layer'"):
        L.TransformerEncoder(L.Dense(4), 2)
    layer = L.TransformerEncoderLayer(E, H, FF, dtype=np.float64)
    with pytest.raises(TypeError, match="tgt_mask"):
        layer.forward(np.zeros((N, T, E)), tgt_mask=None)
    with pytest.raises(ValueError, match="d_model = 4"):
        layer.forward(np.zeros((N, T, 5)))
    with pytest.raises(ValueError, match="'d_model' \\(5\\) must be divisible by 'nhead'"):
        L.TransformerEncoderLayer(5, 2)
    decoder = L.TransformerDecoderLayer(E, H, FF, dtype=np.float64)
    tgt, memory = np.zeros((N, T, E)), np.zeros((N, S, E))
    with pytest.raises(ValueError, match=r"multihead_attn with the masks \('memory_mask', "
                                         r"'memory_key_padding_mask'\).*key_padding_mask"):
        decoder.forward(tgt, memory, memory_key_padding_mask=np.zeros((N, T), bool))
    with pytest.raises(TypeError, match="'memory' has dtype float32"):
        decoder.forward(tgt, memory.astype(np.float32))
    with pytest.raises(TypeError, match=r"takes the inputs \('tgt', 'memory'\)"):
        decoder.forward(tgt)


@pytest.mark.parametrize("kind", ["decoder_layer", "transformer"])
def test_onnx_export_of_two_input_layers_is_refused_by_name(kind):
    _, layer = make_pair(kind, False, "relu", np.float32)
    first, second = Input((S if kind == "transformer" else T, E)), Input((T, E))
    model = Model([first, second], layer([first, second]))
    with pytest.raises(ValueError, match=type(layer).__name__):
        export_onnx(model, None)


@pytest.mark.parametrize("kind", ["encoder", "decoder", "transformer"])
def test_torch_weights_round_trip_by_name(kind):
    """Export to torch (strict load_state_dict) and import back, bit for bit."""
    tm, layer = make_pair(kind, True, "gelu", np.float64)
    fresh = copy.deepcopy(layer)
    for value in fresh.named_parameters().values():
        value[...] = 0.0
    tm.load_state_dict(to_torch_state_dict(layer), strict=True)
    from_torch(tm, fresh)
    for key, value in layer.named_parameters().items():
        assert np.array_equal(fresh.named_parameters()[key], value), key


def test_save_and_load_a_graph_transformer(tmp_path):
    from handgrad import io

    src, tgt = Input((S, E)), Input((T, E))
    net = L.Transformer(E, H, 2, 1, FF, dropout=0.25, norm_first=True, seed=3)
    model = Model([src, tgt], net([src, tgt]), seed=0)
    data = [a.astype(np.float32) for a in case_inputs("transformer", "none", np.float32)[0]]
    model.forward(data, training=True)  # moves the dropout streams
    io.save(model, tmp_path / "t.safetensors")
    loaded = io.load(tmp_path / "t.safetensors")
    assert list(loaded.named_parameters()) == list(model.named_parameters())
    for key, value in model.named_parameters().items():
        assert np.array_equal(loaded.named_parameters()[key], value), key
    assert np.array_equal(loaded.forward(data, training=True), model.forward(data, training=True))
    assert np.array_equal(loaded.predict(data), model.predict(data))
