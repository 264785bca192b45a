"""A graph ``Model`` leaves handgrad as it does in ``Sequential``: one ONNX graph with
several inputs and outputs (run by onnx's reference evaluator against ``predict``), and
torch weights in and out for graphs whose layers are named (against the torch twin's
outputs), within tolerances measured on the case in float64."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.io import export_onnx, from_torch, to_torch_state_dict
from handgrad.model import Sequential
from handgrad.testing import assert_close

from custom_layers import Doubled
from tolerances import condition_bounds
from tolerances_composite import LAYER_ROUNDINGS


def as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _float64_config(config):
    """``config`` with every float dtype float64 (integer Inputs stay integer)."""
    if isinstance(config, dict):
        return {k: "float64" if k == "dtype" and v is not None and np.dtype(v).kind == "f"
                else _float64_config(v) for k, v in config.items()}
    return [_float64_config(c) for c in config] if isinstance(config, list) else config


def graph_bounds(model, xs):
    """[(terms, scale)] per output of ``model`` in inference mode on the inputs ``xs``:
    the componentwise condition of its float64 twin with respect to the float inputs,
    weights and buffers, plus ``LAYER_ROUNDINGS`` terms per node (as network_bounds)."""
    twin = type(model).from_config(_float64_config(model.get_config()))
    twin.build(model.input_shape, dtype=np.float64)
    for ours, theirs in ((twin.named_parameters(), model.named_parameters()),
                         (twin.named_buffers(), model.named_buffers())):
        for key, value in theirs.items():
            ours[key][...] = value
    wide = [np.array(x, np.float64) if x.dtype.kind == "f" else x for x in xs]
    perturbed = [a for a in (*wide, *twin.named_parameters().values(),
                             *twin.named_buffers().values()) if a.dtype == np.float64]

    def run():
        return dict(enumerate(as_list(twin.forward(wide if len(wide) > 1 else wide[0],
                                                   training=False))))

    bounds = condition_bounds(run, perturbed)
    nodes = len(getattr(model, "nodes", model.layers))
    return [(terms + LAYER_ROUNDINGS * nodes, scale) for terms, scale in bounds.values()]


def assert_matches(got, model, xs, dtype):
    expected = as_list(model.predict(xs if len(xs) > 1 else xs[0]))
    assert len(got) == len(expected)
    for i, ((terms, scale), ours, theirs) in enumerate(zip(graph_bounds(model, xs), got,
                                                           expected)):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        assert_close(ours, theirs, dtype=dtype, terms=terms, scale=scale, what=f"output {i}")


# -------------------------------------------------------------------------- ONNX
onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def run_onnx(proto, feeds):
    onnx.checker.check_model(proto, full_check=True)
    return ReferenceEvaluator(proto).run(None, feeds)


def conv_graph():
    """A conv section with fan-out, Add, Multiply and a channel Concatenate, a 1x1 conv
    shared by two maps, a shared Dense, a nested Model, and outputs that are read
    further (``cat``) or are an Input (``meta``)."""
    image, meta = hg.Input((6, 5, 2), name="image"), hg.Input((4,), name="meta")
    c = L.Conv2D(4, 3, padding="same", name="conv")(image)
    b = L.BatchNorm(name="bn")(c)
    p = L.Multiply(name="mul")([L.Add(name="add")([L.ReLU(name="relu")(b), c]),
                                L.Sigmoid(name="gate")(b)])
    mix = L.Conv2D(3, 1, name="mix")
    h1 = L.GlobalAvgPool2D(name="pool")(mix(L.Concatenate(name="maps")([p, c])))
    h2 = L.GlobalMaxPool2D(name="max")(mix(L.Concatenate(name="maps2")([c, p])))
    u = hg.Input((3,))
    inner = hg.Model(u, L.Dense(3, name="d")(L.Tanh(name="t")(u)), name="inner", seed=2)
    m = L.Dense(3, name="shared")(meta)
    z = L.Concatenate(name="cat")([h1, h2, m, inner(m)])
    return hg.Model([image, meta], [L.Dense(3, name="logits")(z), L.Dense(1, name="score")(z),
                                    z, meta], seed=0)


def test_a_graph_exports_one_onnx_graph_with_its_inputs_and_outputs(tmp_path):
    model = conv_graph()
    rng = np.random.default_rng(0)
    for buffer in model.named_buffers().values():
        buffer[...] = rng.uniform(0.5, 1.5, buffer.shape)
    xs = [rng.standard_normal((3, 6, 5, 2), dtype=np.float32),
          rng.standard_normal((3, 4), dtype=np.float32)]
    proto = export_onnx(model, tmp_path / "graph.onnx")
    assert onnx.load(str(tmp_path / "graph.onnx")) == proto
    assert [v.name for v in proto.graph.input] == ["image", "meta"]
    assert [v.name for v in proto.graph.output] == ["logits", "score", "cat", "meta_2"]
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    ops = [node.op_type for node in proto.graph.node]
    assert ops.count("Transpose") == 1  # the merges run in the conv section's layout
    assert ops.count("Conv") == 3 and ops.count("Sum") == 1 and ops.count("Mul") == 1
    # the two calls of ``mix`` read one initializer
    w = model.get_layer("mix").parameters["W"].transpose(3, 2, 0, 1)
    stored = [i.name for i in proto.graph.initializer
              if np.array_equal(numpy_helper.to_array(i), w)]
    assert len(stored) == 1
    assert sum(stored[0] in node.input for node in proto.graph.node) == 2
    assert_matches(run_onnx(proto, {"image": xs[0], "meta": xs[1]}), model, xs, np.float32)


def test_a_graph_inside_sequential_and_cross_attention_export():
    v = hg.Input((8, 3))
    block = hg.Model(v, L.Add(name="add")([L.Conv1D(3, 3, padding="same", name="c")(v), v]),
                     name="block", dtype="float64")
    seq = Sequential([L.Conv1D(3, 3, name="stem"), block, L.Flatten(), L.Dense(2)],
                     input_shape=(10, 2), seed=0, dtype="float64")
    x = np.random.default_rng(1).standard_normal((2, 10, 2))
    assert_matches(run_onnx(export_onnx(seq, None), {"input": x}), seq, [x], np.float64)

    q, kv = hg.Input((5, 4), name="q"), hg.Input((7, 4), name="kv")
    causal = L.MultiHeadAttention(4, 2, causal=True, name="att")([q, kv])
    separate = L.MultiHeadAttention(4, 1, packed=False, name="att2")(
        [q, kv, L.Dense(4, name="values")(kv)])
    model = hg.Model([q, kv], [causal, separate], seed=0)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((2, 5, 4), dtype=np.float32),
          rng.standard_normal((2, 7, 4), dtype=np.float32)]
    got = run_onnx(export_onnx(model, None), {"q": xs[0], "kv": xs[1]})
    assert_matches(got, model, xs, np.float32)


def test_integer_inputs_of_a_graph_are_int64_ids():
    ids, meta = hg.Input((5,), name="ids", dtype="int64"), hg.Input((3,), name="meta")
    pooled = L.GlobalAvgPool1D()(L.Embedding(10, 4, name="emb")(ids))
    model = hg.Model([ids, meta], L.Dense(2, name="out")(
        L.Concatenate()([pooled, L.Dense(4, name="m")(meta)])), seed=0)
    proto = export_onnx(model, None)
    types = [v.type.tensor_type.elem_type for v in proto.graph.input]
    assert types == [onnx.TensorProto.INT64, onnx.TensorProto.FLOAT]
    rng = np.random.default_rng(3)
    xs = [rng.integers(0, 10, (3, 5)), rng.standard_normal((3, 3), dtype=np.float32)]
    assert_matches(run_onnx(proto, {"ids": xs[0], "meta": xs[1]}), model, xs, np.float32)


def test_graph_export_errors():
    u = hg.Input((2,), name="u")
    model = hg.Model(u, Doubled(L.Dense(2, name="inner"), )(u))
    with pytest.raises(ValueError, match=r"export_onnx: Doubled 'doubled_0' \(Doubled\) has "
                                         r"no ONNX export"):
        export_onnx(model, None)
    with pytest.raises(ValueError, match=r"export_onnx: the input shapes of Model are those "
                                         r"of its Inputs, \(2,\); received input_shape=\(3,\)"):
        export_onnx(model, None, input_shape=(3,))


# ------------------------------------------------------------------------- torch
torch = pytest.importorskip("torch")
nn = torch.nn


def torch_graph():
    image, meta = hg.Input((6, 6, 2), name="image"), hg.Input((4,), name="meta")
    c = L.ReLU()(L.BatchNorm(name="bn")(L.Conv2D(4, 3, padding=1, name="conv")(image)))
    h1 = L.GlobalAvgPool2D()(c)
    h2 = L.Dense(5, name="proj")(L.Flatten()(c))  # rows reordered from (H, W, C)
    shared = L.Dense(4, name="shared")
    m = shared(L.Tanh()(shared(meta)))
    u = hg.Input((4,))
    inner = hg.Model(u, L.Dense(4, name="d")(L.ReLU()(u)), name="inner", dtype="float64")
    z = L.Concatenate()([h1, h2, inner(m)])
    return hg.Model([image, meta], [L.Dense(3, name="logits")(z), L.Dense(1, name="score")(z)],
                    seed=0, dtype="float64")


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.Linear(4, 4)

    def forward(self, u):
        return self.d(torch.relu(u))


class Twin(nn.Module):
    """Submodules named as the handgrad layers, defined in another order."""

    def __init__(self):
        super().__init__()
        self.score, self.logits = nn.Linear(13, 1), nn.Linear(13, 3)
        self.inner, self.shared = Inner(), nn.Linear(4, 4)
        self.proj, self.bn, self.conv = nn.Linear(144, 5), nn.BatchNorm2d(4), nn.Conv2d(2, 4, 3,
                                                                                          padding=1)

    def forward(self, image, meta):
        c = torch.relu(self.bn(self.conv(image)))
        m = self.shared(torch.tanh(self.shared(meta)))
        z = torch.cat([c.mean(dim=(2, 3)), self.proj(c.flatten(1)), self.inner(m)], dim=1)
        return self.logits(z), self.score(z)


def random_twin(seed=0):
    twin = Twin().double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in twin.state_dict().items():
            if tensor.is_floating_point():
                low = 0.5 if name.endswith("running_var") else -0.6
                tensor.copy_(torch.rand(tensor.shape, generator=gen, dtype=tensor.dtype)
                             * (low + 0.6 if low > 0 else 1.2) + low)
    return twin.eval()


def test_torch_weights_load_into_a_graph_by_layer_name():
    twin, model = random_twin(), torch_graph()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((3, 6, 6, 2)), rng.standard_normal((3, 4))]
    assert from_torch(twin, model) is model
    with torch.no_grad():
        expected = [t.numpy() for t in twin(torch.from_numpy(xs[0]).permute(0, 3, 1, 2),
                                            torch.from_numpy(xs[1]))]
    for i, ((terms, scale), ours, theirs) in enumerate(zip(graph_bounds(model, xs),
                                                           model.predict(xs), expected)):
        assert_close(ours, theirs, dtype=np.float64, terms=terms, scale=scale,
                     what=f"output {i}")
    # back to torch: every entry of the twin, bit for bit
    state = to_torch_state_dict(model, numpy=True)
    assert sorted(state) == sorted(twin.state_dict())
    for key, value in twin.state_dict().items():
        assert np.array_equal(state[key], value.numpy()), key
    # under another module prefix, in another order: found by name all the same
    wrapped = {f"net.{key}": value for key, value in reversed(twin.state_dict().items())}
    other = from_torch(wrapped, torch_graph())
    for key, value in model.named_parameters().items():
        assert np.array_equal(other.named_parameters()[key], value), key


def test_torch_mismatches_and_graphs_without_a_twin_are_named():
    state = {k: v for k, v in random_twin().state_dict().items() if not k.startswith("score")}
    with pytest.raises(ValueError, match=r"missing \['score.weight \(handgrad score.W\)', "
                                         r"'score.bias \(handgrad score.b\)'\]"):
        from_torch(state, torch_graph())
    a, b = hg.Input((2, 2, 1)), hg.Input((4,))
    flat = L.Flatten()(L.Conv2D(1, 1)(a))
    d = L.Dense(2, name="d")
    with pytest.raises(ValueError, match="Dense 'd' is shared by calls on tensors of "
                                         "different layouts"):
        to_torch_state_dict(hg.Model([a, b], [d(flat), d(b)]))
    with pytest.raises(ValueError, match="merges features flattened from channels-last maps"):
        to_torch_state_dict(hg.Model([a, b], L.Dense(2)(L.Concatenate()([flat, b]))))


def test_cosine_similarity_pairwise_distance_and_bilinear_export():
    a, b = hg.Input((4, 5), name="a"), hg.Input((4, 5), name="b")
    h = L.Conv1D(5, 1, name="c")(a)
    outputs = [L.CosineSimilarity(name="cos")([h, b]),
               L.CosineSimilarity(1, eps=1e-3, name="cos1")([a, b]),
               L.PairwiseDistance(name="dist")([h, b]),
               L.PairwiseDistance(3.0, keepdim=True, name="dist3")([a, b]),
               L.Bilinear(3, name="bil")([h, b]), L.Bilinear(2, bias=False)([a, b])]
    model = hg.Model([a, b], outputs, seed=0, dtype="float64")
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((2, 4, 5)), rng.standard_normal((2, 4, 5))]
    assert_matches(run_onnx(export_onnx(model, None), {"a": xs[0], "b": xs[1]}), model, xs,
                   np.float64)


def test_squeeze_excitation_broadcast_exports():
    """Multiply and Add of a (1, 1, C) gate with an (H, W, C) map, in the conv section's
    channels-first layout."""
    image = hg.Input((5, 4, 3), name="image")
    h = L.Conv2D(4, 3, padding="same", name="conv")(image)
    gate = L.Sigmoid(name="gate")(L.Dense(4, name="fc")(L.GlobalAvgPool2D(keepdims=True,
                                                                          name="pool")(h)))
    y = L.Add(name="shift")([L.Multiply(name="scale")([h, gate]), gate])
    model = hg.Model(image, y, seed=0)
    x = np.random.default_rng(4).standard_normal((2, 5, 4, 3), dtype=np.float32)
    assert_matches(run_onnx(export_onnx(model, None), {"image": x}), model, [x], np.float32)


def test_load_onnx_gives_back_the_layer_names_weights_and_batch_norm_momentum():
    """export_onnx names initializers as torch's state dict (``block.conv_a.weight``), so
    load_onnx names the layers back; two layers with equal weights keep their own; the
    BatchNorm keeps its momentum (ONNX's is 1 - torch's, stored in float32)."""
    from handgrad.io import load_onnx
    x = hg.Input((6, 5, 2))
    h = L.BatchNorm(momentum=0.01, name="block.bn")(L.Conv2D(3, 3, padding=1,
                                                             name="block.conv_a")(x))
    h = L.Conv2D(3, 1, name="block.conv_c")(L.Conv2D(3, 1, name="block.conv_b")(h))
    model = hg.Model(x, L.Dense(4, name="head")(L.Flatten()(h)), dtype="float64")
    model.get_layer("block.conv_c").parameters["W"][...] = \
        model.get_layer("block.conv_b").parameters["W"]
    back = load_onnx(export_onnx(model, None))
    ours, theirs = to_torch_state_dict(model, numpy=True), to_torch_state_dict(back, numpy=True)
    assert sorted(ours) == sorted(theirs)
    for name, value in ours.items():
        np.testing.assert_array_equal(theirs[name], value, err_msg=name)
    bn = back.get_layer("block.bn")
    assert bn.trainable and np.float32(1 - bn.momentum) == np.float32(1 - 0.01)
