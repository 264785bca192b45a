"""Merge layers (Add, Multiply, Concatenate), Residual (ResNet basic blocks against
torch, gradient checks, save/load) and the WaveNet residual block (against torch,
skip gradients, causality)."""

import json

import numpy as np
import pytest

import handgrad as hg
from handgrad import io
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import assert_close, assert_gradient_close, gradcheck, numeric_gradient

from tolerances import assert_outputs_close, condition_bounds, float64_twin, layer_reference
from torch_twins import from_torch, to_torch, weight_to_torch

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float64, np.float32]


def randn(seed, *shape, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------ merge layers
MERGES = {
    "add": (L.Add, lambda ts: ts[0] + ts[1] + ts[2], [(2, 3, 4)] * 3),
    "multiply": (L.Multiply, lambda ts: ts[0] * ts[1] * ts[2], [(2, 3, 4)] * 3),
    "concatenate": (lambda: L.Concatenate(axis=1), lambda ts: torch.cat(ts, dim=1),
                    [(2, 3, 4), (2, 1, 4), (2, 2, 4)]),
    "concatenate-last": (L.Concatenate, lambda ts: torch.cat(ts, dim=-1),
                         [(2, 3, 4), (2, 3, 1), (2, 3, 2)]),
    "add-broadcast": (L.Add, lambda ts: ts[0] + ts[1] + ts[2],
                      [(2, 3, 4, 5), (2, 1, 1, 5), (2, 3, 1, 1)]),
    "multiply-squeeze-excitation": (L.Multiply, lambda ts: ts[0] * ts[1],
                                    [(2, 3, 4, 5), (2, 1, 1, 5)]),
    "multiply-broadcast-first": (L.Multiply, lambda ts: ts[0] * ts[1] * ts[2],
                                 [(2, 1, 4), (2, 3, 4), (2, 3, 1)]),
    "cosine_similarity": (L.CosineSimilarity, lambda ts: F.cosine_similarity(*ts, dim=-1),
                          [(3, 4, 5)] * 2),
    "cosine_similarity-axis1": (lambda: L.CosineSimilarity(1, eps=1e-3),
                                lambda ts: F.cosine_similarity(*ts, dim=1, eps=1e-3),
                                [(3, 4, 5)] * 2),
    "pairwise_distance": (L.PairwiseDistance, lambda ts: F.pairwise_distance(*ts),
                          [(3, 4, 5)] * 2),
    "pairwise_distance-p1-keepdim": (lambda: L.PairwiseDistance(1.0, keepdim=True),
                                     lambda ts: F.pairwise_distance(*ts, p=1.0, keepdim=True),
                                     [(3, 5)] * 2),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(MERGES))
def test_merge_layers_match_torch(name, dtype):
    factory, twin, shapes = MERGES[name]
    layer = factory()
    xs = [randn(i, *shape, dtype=dtype) for i, shape in enumerate(shapes)]
    if name == "multiply":
        xs[1][0, 0, 0] = 0.0  # a zero input: no division in the backward pass
    y = layer.forward(xs)
    assert layer.output_shape([x.shape[1:] for x in xs]) == y.shape[1:]
    dy = randn(9, *y.shape, dtype=dtype)
    dxs = layer.backward(dy)
    tensors = [torch.tensor(x, requires_grad=True) for x in xs]
    expected = twin(tensors)
    expected.backward(torch.tensor(dy))
    assert y.dtype == dtype and isinstance(dxs, list) and len(dxs) == len(xs)
    assert all(dx.dtype == dtype for dx in dxs)
    theirs = {"y": expected.detach().numpy(), **{f"dx{i}": t.grad.numpy()
                                                 for i, t in enumerate(tensors)}}
    wide = [x.astype(np.float64) for x in (*xs, dy)]

    def run():
        twin = factory()
        out = twin.forward(wide[:-1])
        return {"y": out, **{f"dx{i}": dx for i, dx in enumerate(twin.backward(wide[-1]))}}

    ours = {"y": y, **{f"dx{i}": dx for i, dx in enumerate(dxs)}}
    assert_outputs_close(ours, theirs, condition_bounds(run, wide), dtype)
    assert len({id(dx) for dx in dxs}) == len(dxs) and all(dx is not dy for dx in dxs)


@pytest.mark.parametrize("name", list(MERGES))
def test_merge_layers_finite_differences_and_config(name):
    factory, _, shapes = MERGES[name]
    layer = factory()
    xs = [randn(i + 3, *shape) for i, shape in enumerate(shapes)]
    y = layer.forward(xs)
    dy = randn(1, *y.shape)
    dxs = layer.backward(dy)
    for i, (x, dx) in enumerate(zip(xs, dxs)):
        loss = lambda: float(np.sum(layer.forward(xs, training=False) * dy))  # noqa: E731
        numeric, error = numeric_gradient(loss, x, with_error=True)
        assert_gradient_close(dx, numeric, error, what=f"dx{i}")
    clone = type(layer).from_config(json.loads(json.dumps(layer.get_config())))
    np.testing.assert_array_equal(clone.forward(xs), y)
    with pytest.raises(RuntimeError, match="without a matching forward"):
        layer.backward(dy)


def test_merge_layers_bad_inputs():
    x = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match=r"Add: needs at least 2 inputs; received 1"):
        L.Add().forward([x])
    with pytest.raises(TypeError, match=r"Add: 'inputs' must be a list of arrays"):
        L.Add().forward(x)
    with pytest.raises(ValueError, match=r"Multiply: the inputs' shapes must broadcast .*"
                                         r"inputs\[1\] has shape \(2, 3, 5\), the inputs "
                                         r"before it merge to \(2, 3, 4\)"):
        L.Multiply().forward([x, np.zeros((2, 3, 5))])
    with pytest.raises(ValueError, match=r"Add: .*one rank.*inputs\[1\] \(per example\) "
                                         r"has shape \(4,\)"):
        L.Add().output_shape([(3, 4), (4,)])  # channels-last broadcasting keeps the rank
    with pytest.raises(ValueError, match=r"Add: .*the same batch size.*\(1, 3, 4\)"):
        L.Add().forward([x, np.zeros((1, 3, 4))])  # the batch axis does not broadcast
    with pytest.raises(ValueError, match=r"Add: .*inputs\[2\] \(per example\) has shape "
                                         r"\(2, 4\), the inputs before it merge to \(3, 4\)"):
        L.Add().output_shape([(1, 4), (3, 1), (2, 4)])
    with pytest.raises(TypeError, match=r"Add: 'inputs\[1\]' has dtype float32"):
        L.Add().forward([x, x.astype(np.float32)])
    with pytest.raises(ValueError, match=r"inputs must match except along axis -1; "
                                         r"inputs\[0\] has shape \(2, 3, 4\) and inputs\[1\]"):
        L.Concatenate().forward([x, np.zeros((2, 2, 4))])
    with pytest.raises(ValueError, match="'axis' must not be 0, the batch axis"):
        L.Concatenate(axis=0)
    with pytest.raises(TypeError, match="'axis' must be an int"):
        L.Concatenate(axis=1.0)
    with pytest.raises(ValueError, match="'axis' 3 is not a non-batch axis of 3-D inputs"):
        L.Concatenate(axis=3).forward([x, x])
    with pytest.raises(TypeError, match="cannot be a step of Sequential"):
        Sequential([L.Add()]).forward(x)
    layer = L.Add()
    layer.forward([x, x])
    with pytest.raises(ValueError, match=r"'dy' must have the forward output's shape"):
        layer.backward(np.zeros((2, 3, 5)))


# ---------------------------------------------------------------------------- Residual
def residual_unit(channels, stride=1, name="res"):
    """conv3x3 - relu - conv3x3 plus the identity, or a strided 1x1 projection."""
    body = Sequential([L.Conv2D(channels, 3, stride=stride, padding=1, name="conv1"),
                       L.ReLU(name="relu"), L.Conv2D(channels, 3, padding=1, name="conv2")])
    shortcut = None if stride == 1 else L.Conv2D(channels, 1, stride=stride, bias=False,
                                                 name="proj")
    return L.Residual(body, shortcut, name=name)


def basic_block(channels, stride=1, dtype=None):
    """A ResNet basic block without batch norm: relu(conv(relu(conv(x))) + shortcut(x))."""
    return Sequential([residual_unit(channels, stride), L.ReLU(name="out")], dtype=dtype)


def torch_basic_block(x, model):
    """The same block in torch (NCHW) with the model's weights; returns (y, leaves)."""
    res = model["res"]
    leaves = {f"res.block.{n}.{k}": (weight_to_torch(res.block[n].parameters[k]) if k == "W"
                                     else torch.tensor(res.block[n].parameters[k],
                                                       requires_grad=True))
              for n in ("conv1", "conv2") for k in ("W", "b")}
    stride = res.block["conv1"].stride
    h = F.relu(F.conv2d(x, leaves["res.block.conv1.W"], leaves["res.block.conv1.b"],
                        stride=stride, padding=1))
    h = F.conv2d(h, leaves["res.block.conv2.W"], leaves["res.block.conv2.b"], padding=1)
    short = x
    if res.shortcut is not None:
        leaves["res.shortcut.W"] = weight_to_torch(res.shortcut.parameters["W"])
        short = F.conv2d(x, leaves["res.shortcut.W"], stride=stride)
    return F.relu(h + short), leaves


BLOCKS = {"identity": dict(channels=3), "projection": dict(channels=4, stride=2)}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(BLOCKS))
def test_resnet_basic_block_matches_torch(name, dtype):
    model = basic_block(**BLOCKS[name], dtype=dtype)
    x = randn(0, 2, 6, 5, 3, dtype=dtype)
    y = model.forward(x)
    dy = randn(1, *y.shape, dtype=dtype)
    dx = model.backward(dy)
    tx = to_torch(x)
    expected, leaves = torch_basic_block(tx, model)
    expected.backward(to_torch(dy, requires_grad=False))
    assert y.dtype == dtype and dx.dtype == dtype
    grads = model.named_gradients()
    assert set(grads) == set(leaves)
    theirs = {"y": from_torch(expected), "dx": from_torch(tx.grad)}
    for key, leaf in leaves.items():
        grad = leaf.grad.numpy()
        theirs[key] = grad.transpose(2, 3, 1, 0) if grad.ndim == 4 else grad
    assert_outputs_close({"y": y, "dx": dx, **grads}, theirs,
                         layer_reference(float64_twin(model), x, dy)[1], dtype)


@pytest.mark.parametrize("name", list(BLOCKS))
def test_resnet_basic_block_gradcheck(name):
    model = basic_block(**BLOCKS[name], dtype="float64")
    result = gradcheck(model, randn(2, 2, 5, 4, 3), rng=0, max_entries=24)
    assert set(result.errors) == {"x", *model.named_parameters()}
    assert result.passed, result.errors


def test_residual_parameters_are_the_childrens_arrays_with_prefixes():
    model = basic_block(4, stride=2)
    model.build((6, 6, 3))
    res = model["res"]
    assert set(res.named_parameters()) == {"block.conv1.W", "block.conv1.b", "block.conv2.W",
                                           "block.conv2.b", "shortcut.W"}
    assert res.named_parameters()["block.conv1.W"] is res.block["conv1"].parameters["W"]
    assert res.named_gradients()["shortcut.W"] is res.shortcut.gradients["W"]
    assert res.parameters == {} and res.gradients == {}  # a container holds no arrays
    assert "res.shortcut.W" in model.named_parameters()
    assert res.count_params() == 3 * 3 * 3 * 4 + 4 + 3 * 3 * 4 * 4 + 4 + 3 * 4
    res.trainable = False
    assert not res.block["conv1"].trainable and not res.shortcut.trainable
    assert model.named_parameters(trainable_only=True) == {}
    nested = L.Residual(Sequential([L.Residual(L.Dense(3, name="fc"), name="inner")]))
    nested.build((3,))
    assert set(nested.named_parameters()) == {"block.inner.block.W", "block.inner.block.b"}


def test_model_with_residual_trains_saves_loads_and_summarizes(tmp_path):
    def make():
        return Sequential([L.Conv2D(4, 3, padding=1, name="stem"), residual_unit(4, name="b1"),
                           L.Residual(Sequential([L.Conv2D(6, 3, padding=1, name="conv"),
                                                  L.BatchNorm(name="bn"), L.Tanh()]),
                                      L.Conv2D(6, 1), name="b2"),
                           L.GlobalAvgPool2D(), L.Dropout(0.2, seed=1), L.Dense(3)],
                          seed=0, input_shape=(6, 6, 2))

    model = make().compile("adam", "cross_entropy")
    x = randn(0, 16, 6, 6, 2, dtype=np.float32)
    labels = np.arange(16) % 3
    before = {k: v.copy() for k, v in model.named_parameters().items()}
    model.fit(x, labels, epochs=1, batch_size=8, rng=0, verbose=0)
    after = model.named_parameters()
    assert all(np.any(after[k] != before[k]) for k in before), "a child was not trained"
    buffers = model.named_buffers()
    assert buffers and all(k.startswith("b2.block.bn.") for k in buffers)
    path = tmp_path / "resnet.safetensors"
    io.save(model, path)
    loaded = io.load(path)
    assert loaded.get_config() == model.get_config()
    assert set(loaded.named_parameters()) == set(after)
    for key, value in loaded.named_buffers().items():  # running statistics came back
        np.testing.assert_array_equal(value, buffers[key])
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    text = loaded.summary(print_fn=None)
    assert "b2 (Residual)" in text and "(None, 6, 6, 6)" in text
    assert f"Total params: {model.count_params():,}" in text


def test_residual_bad_inputs():
    with pytest.raises(TypeError, match="Residual: 'block' must be a handgrad Layer"):
        L.Residual(lambda x: x)
    with pytest.raises(TypeError, match="'shortcut' must be a handgrad Layer or None"):
        L.Residual(L.ReLU(), shortcut="identity")
    relu = L.ReLU()
    with pytest.raises(ValueError, match="'block' and 'shortcut' must be different layers"):
        L.Residual(relu, relu)
    with pytest.raises(ValueError, match=r"the block maps per-example shape \(5, 5, 3\) to "
                                         r"\(5, 5, 4\) but the shortcut gives \(5, 5, 3\)"):
        L.Residual(L.Conv2D(4, 3, padding=1)).forward(np.zeros((2, 5, 5, 3)))
    with pytest.raises(ValueError, match=r"Residual\.from_config: 'block' must be"):
        L.Residual.from_config({"block": {"class": "NoSuchLayer", "config": {}}})
    layer = L.Residual(L.Conv2D(3, 3, padding=1))
    layer.forward(np.zeros((2, 5, 5, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="input dtype float64 does not match"):
        layer.forward(np.zeros((2, 5, 5, 3)))


# ------------------------------------------------------------------------- WaveNetBlock
def torch_wavenet(x, layer):
    """The block in torch with the layer's weights; returns (y, skip, leaves)."""
    p = layer.parameters
    leaves = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    c, k, d = layer.channels, layer.kernel_size, layer.dilation
    w = leaves["W_conv"].permute(2, 1, 0)  # (K, C, 2C) -> (2C, C, K)
    h = F.conv1d(F.pad(x.transpose(1, 2), ((k - 1) * d, 0)), w, leaves["b_conv"], dilation=d)
    h = h.transpose(1, 2)
    z = torch.tanh(h[..., :c]) * torch.sigmoid(h[..., c:])
    y = x + z @ leaves["W_res"] + leaves["b_res"]
    skip = z @ leaves["W_skip"] + leaves["b_skip"] if layer.skip_channels else None
    return y, skip, leaves


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize(("kernel", "dilation", "skip"), [(2, 1, None), (3, 2, 5), (2, 4, 0)])
def test_wavenet_block_matches_torch(kernel, dilation, skip, dtype):
    layer = L.WaveNetBlock(3, kernel, dilation, skip_channels=skip, dtype=dtype, seed=0)
    x = randn(0, 2, 9, 3, dtype=dtype)
    y, s = layer.forward_with_skip(x)
    dy = randn(1, *y.shape, dtype=dtype)
    ds = None if s is None else randn(2, *s.shape, dtype=dtype)
    dx = layer.backward(dy, ds)
    tx = torch.tensor(x, requires_grad=True)
    ty, ts, leaves = torch_wavenet(tx, layer)
    loss = (ty * torch.tensor(dy)).sum() + (0 if ts is None else (ts * torch.tensor(ds)).sum())
    loss.backward()
    assert y.dtype == dtype and dx.dtype == dtype
    if skip == 0:
        assert s is None and layer.last_skip is None and "W_skip" not in layer.parameters
    else:
        assert s.shape == (2, 9, skip or 3) and s is layer.last_skip
    ours = {"y": y, "skip": s, "dx": dx, **layer.gradients}
    theirs = {"y": ty.detach().numpy(), "skip": None if ts is None else ts.detach().numpy(),
              "dx": tx.grad.numpy(), **{k: leaf.grad.numpy() for k, leaf in leaves.items()}}
    twin = float64_twin(layer)
    wide = {k: None if a is None else a.astype(np.float64) for k, a in
            {"x": x, "dy": dy, "ds": ds}.items()}
    assert_outputs_close(ours, theirs, condition_bounds(
        lambda: wavenet_outputs(twin, **wide),
        [a for a in (*wide.values(), *twin.parameters.values()) if a is not None]), dtype)


def wavenet_outputs(layer, x, dy, ds):
    """{y, skip, dx, gradients} of one training step of a WaveNetBlock."""
    layer.zero_grad()
    y, skip = layer.forward_with_skip(x)
    dx = layer.backward(dy, ds)
    return {"y": y, "skip": skip, "dx": dx, **{k: g.copy() for k, g in layer.gradients.items()}}


def test_wavenet_block_finite_differences_with_skip_gradient():
    layer = L.WaveNetBlock(2, 2, dilation=2, skip_channels=3, dtype="float64", seed=1)
    x = randn(3, 2, 6, 2)
    y, s = layer.forward_with_skip(x)
    dy, ds = randn(4, *y.shape), randn(5, *s.shape)
    dx = layer.backward(dy, ds)

    def loss():
        out, skip = layer.forward_with_skip(x, training=False)
        return float(np.sum(out * dy) + np.sum(skip * ds))

    for key, (value, analytic) in {"dx": (x, dx), **{k: (p, layer.gradients[k]) for k, p in
                                                     layer.parameters.items()}}.items():
        numeric, error = numeric_gradient(loss, value, with_error=True)
        assert_gradient_close(analytic, numeric, error, what=key)
    # without dskip, the skip weights receive nothing and dx is the residual path's only
    layer.zero_grad()
    layer.forward(x)
    layer.backward(dy)
    assert not np.any(layer.gradients["W_skip"]) and not np.any(layer.gradients["b_skip"])


def test_wavenet_stack_is_causal_and_chains_in_sequential():
    model = Sequential([L.WaveNetBlock(4, 2, dilation=d, skip_channels=0) for d in (1, 2, 4)],
                       dtype="float64", seed=0)
    x = randn(0, 2, 12, 4)
    y = model.forward(x, training=False)
    x2 = x.copy()
    x2[:, 7] += 1.0
    y2 = model.forward(x2, training=False)
    np.testing.assert_array_equal(y2[:, :7], y[:, :7])
    assert np.all(np.abs(y2[:, 7:] - y[:, 7:]).max(axis=-1) > 0)
    result = gradcheck(model, randn(1, 2, 8, 4), rng=0, max_entries=16)
    assert result.passed, result.errors


def test_wavenet_block_bad_inputs():
    with pytest.raises(TypeError, match="WaveNetBlock: 'channels' must be an int"):
        L.WaveNetBlock(2.5)
    with pytest.raises(ValueError, match="'skip_channels' must be an int >= 0"):
        L.WaveNetBlock(2, skip_channels=-1)
    layer = L.WaveNetBlock(3)
    with pytest.raises(ValueError, match=r"expects inputs \(N, T, 3\) .* \(5, 2\)"):
        layer.forward(np.zeros((1, 5, 2), dtype=np.float32))
    plain = L.WaveNetBlock(2, skip_channels=0)
    plain.forward(np.zeros((1, 5, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="'dskip' was given but the block has no skip output"):
        plain.backward(np.zeros((1, 5, 2), dtype=np.float32), np.zeros((1, 5, 2)))
    layer = L.WaveNetBlock(2, skip_channels=4)
    layer.forward(np.zeros((1, 5, 2), dtype=np.float32))
    with pytest.raises(ValueError, match=r"'dskip' must have the skip output's shape"
                                         r" \(1, 5, 4\)"):
        layer.backward(np.zeros((1, 5, 2), dtype=np.float32), np.zeros((1, 5, 2), np.float32))


@pytest.mark.parametrize("call, error, match", [
    (lambda x: L.CosineSimilarity().forward([x, x, x]), ValueError, "takes exactly 2 inputs"),
    (lambda x: L.PairwiseDistance().forward([x, x[:, :2]]), ValueError,
     r"both inputs must have one shape.*\(2, 2, 4\)"),
    (lambda x: L.CosineSimilarity(0).forward([x, x]), ValueError, "non-batch axis"),
    (lambda x: L.CosineSimilarity(axis=1.0), TypeError, "'axis' must be an int"),
    (lambda x: L.PairwiseDistance(0.5), ValueError, "'p' must be"),
])
def test_vector_comparisons_refuse_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call(randn(0, 2, 3, 4))


def test_bilinear_matches_torch_with_its_weights_and_gradients():
    """Bilinear on (N, L, I) and (N, L, J): y, dx1, dx2, dW, db against nn.Bilinear whose
    weight (O, I, J) is W (I, J, O) moved; float64."""
    layer = L.Bilinear(3, dtype="float64")
    x1, x2 = randn(0, 2, 5, 4), randn(1, 2, 5, 2)
    y = layer.forward([x1, x2])
    dy = randn(2, *y.shape)
    dx1, dx2 = layer.backward(dy)
    module = torch.nn.Bilinear(4, 2, 3).double()
    with torch.no_grad():
        module.weight.copy_(torch.tensor(layer.parameters["W"].transpose(2, 0, 1)))
        module.bias.copy_(torch.tensor(layer.parameters["b"]))
    t1, t2 = torch.tensor(x1, requires_grad=True), torch.tensor(x2, requires_grad=True)
    out = module(t1, t2)
    out.backward(torch.tensor(dy))
    theirs = {"y": out.detach().numpy(), "dx1": t1.grad.numpy(), "dx2": t2.grad.numpy(),
              "W": module.weight.grad.numpy().transpose(1, 2, 0), "b": module.bias.grad.numpy()}
    ours = {"y": y, "dx1": dx1, "dx2": dx2, **layer.gradients}
    wide = [x1, x2, dy, *layer.parameters.values()]

    def run():
        twin = L.Bilinear(3, dtype="float64").build([(5, 4), (5, 2)])
        for key, value in layer.parameters.items():
            twin.parameters[key][...] = value
        out = twin.forward([x1, x2])
        d1, d2 = twin.backward(dy)
        return {"y": out, "dx1": d1, "dx2": d2, **twin.gradients}

    assert_outputs_close(ours, theirs, condition_bounds(run, wide), np.float64)
    assert layer.output_shape([(5, 4), (5, 2)]) == (5, 3)


def test_bilinear_gradcheck_config_and_torch_import():
    a, b = hg.Input((4,), name="a"), hg.Input((2,), name="b")
    model = hg.Model([a, b], L.Bilinear(3, bias=False, name="bil")([a, b]), seed=0,
                     dtype="float64")
    layer = model.get_layer("bil")
    xs = [randn(3, 5, 4), randn(4, 5, 2)]
    dy = randn(5, 5, 3)
    layer.forward(xs)
    dxs = layer.backward(dy)
    for i, (x, dx) in enumerate(zip(xs, dxs)):
        loss = lambda: float(np.sum(layer.forward(xs, training=False) * dy))  # noqa: E731
        assert_gradient_close(dx, *numeric_gradient(loss, x, with_error=True), what=f"dx{i}")
    loss = lambda: float(np.sum(layer.forward(xs, training=False) * dy))  # noqa: E731
    assert_gradient_close(layer.gradients["W"], *numeric_gradient(
        loss, layer.parameters["W"], with_error=True), what="dW")
    clone = L.Bilinear.from_config(json.loads(json.dumps(layer.get_config())))
    assert clone.get_config() == layer.get_config() and "b" not in layer.parameters

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bil = torch.nn.Bilinear(4, 2, 3, bias=False).double()

    twin = Twin()
    io.from_torch(twin, model)
    expected = twin.bil(torch.tensor(xs[0]), torch.tensor(xs[1])).detach().numpy()
    assert_close(model.predict(xs), expected, dtype=np.float64, terms=4 * 2)  # x1 W x2 sums
    state = io.to_torch_state_dict(model, numpy=True)
    np.testing.assert_array_equal(state["bil.weight"], twin.bil.weight.detach().numpy())
