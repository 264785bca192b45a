"""Everything else works on a graph ``Model`` as on ``Sequential``: files (save/load,
checkpoints with exact resume, nested and shared layers, per-output losses, malformed
graph configs named by file and field), ``get_config``/``from_config``, the summary
with its "Connected to" column, the ONNX export (one graph, several inputs and
outputs, checked against ``predict``) and torch weights for graphs whose layers are
named."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

import handgrad as hg
from handgrad import io, optimizers
from handgrad import layers as L
from handgrad.inspect import receptive_fields
from handgrad.io import safetensors as _safetensors
from handgrad.model import Sequential


def graph(seed=0, dtype="float32", dropout=False):
    """Two inputs, two outputs; fan-out of ``conv`` (relu and add), Add and
    Concatenate, ``shared`` called twice, a nested Model ``inner``."""
    image, meta = hg.Input((6, 6, 2), name="image"), hg.Input((4,), name="meta")
    c = L.Conv2D(4, 3, padding="same", name="conv")(image)
    s = L.Add(name="add")([L.ReLU(name="relu")(c), c])
    h = L.GlobalAvgPool2D(name="pool")(s)
    shared = L.Dense(4, name="shared")
    m1 = shared(meta)
    m2 = shared(L.Tanh(name="tanh")(m1))
    u = hg.Input((4,))
    inner = hg.Model(u, L.Dense(4, name="d")(L.ReLU(name="r")(u)), name="inner", dtype=dtype,
                     seed=seed + 1)
    z = L.Concatenate(name="cat")([h, m2, inner(m1)])
    if dropout:
        z = L.Dropout(0.3, seed=1, name="drop")(z)
    return hg.Model([image, meta], [L.Dense(3, name="logits")(z), L.Dense(1, name="score")(z)],
                    seed=seed, dtype=dtype)


def data(n=24, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = [rng.standard_normal((n, 6, 6, 2)).astype(dtype), rng.standard_normal((n, 4)).astype(dtype)]
    return x, [rng.integers(0, 3, n), rng.standard_normal((n, 1)).astype(dtype)]


def compiled(model):
    return model.compile(optimizers.Adam(lr=0.01), {"logits": "cross_entropy", "score": "mse"},
                         {"logits": ["accuracy"]}, loss_weights={"logits": 1.0, "score": 0.5})


def document_of(path):
    return json.loads(_safetensors.read(path)[1]["handgrad"])


def assert_same_arrays(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


# ------------------------------------------------------------------------- files
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_save_load_gives_identical_predictions_and_the_compiled_objective(tmp_path, dtype):
    model = compiled(graph(dtype=dtype))
    x, y = data(dtype=dtype)
    model.fit(x, y, epochs=1, batch_size=8, rng=0, verbose=0)
    path = tmp_path / "graph.safetensors"
    io.save(model, path)
    loaded = io.load(path)
    assert type(loaded) is hg.Model and loaded.output_names == ["logits", "score"]
    assert_same_arrays(model.named_parameters(), loaded.named_parameters())
    assert sum(key.startswith("shared.") for key in loaded.named_parameters()) == 2  # W, b once
    for ours, theirs in zip(model.predict(x), loaded.predict(x)):
        assert ours.dtype == np.dtype(dtype) and np.array_equal(ours, theirs)
    assert loaded.compile_config() == model.compile_config()
    document = document_of(path)
    assert document["model"]["input_shape"] == [[6, 6, 2], [4]]
    assert document["loss"] == {"logits": "cross_entropy", "score": "mse"}
    assert document["loss_weights"] == {"logits": 1.0, "score": 0.5}
    assert loaded.evaluate(x, y) == model.evaluate(x, y)


def test_resuming_a_graph_checkpoint_is_bit_identical(tmp_path):
    x, y = data(40, seed=3)
    rng = np.random.default_rng(42)
    straight = compiled(graph(dropout=True))
    straight.fit(x, y, epochs=2, batch_size=8, rng=rng, verbose=0)
    path = tmp_path / "ckpt.safetensors"
    io.save_checkpoint(path, straight, straight.optimizer, epoch=2, rng=rng)
    straight.fit(x, y, epochs=4, initial_epoch=2, batch_size=8, rng=rng, verbose=0)

    checkpoint = io.load_checkpoint(path)
    resumed = checkpoint.model
    resumed.fit(x, y, epochs=4, initial_epoch=checkpoint.epoch, batch_size=8,
                rng=checkpoint.rng, verbose=0)
    assert_same_arrays(straight.named_parameters(), resumed.named_parameters())
    assert_same_arrays(straight.optimizer.state_dict(), resumed.optimizer.state_dict())
    drop = straight.get_layer("drop").rng.bit_generator.state
    assert drop == resumed.get_layer("drop").rng.bit_generator.state
    # the test can fail: another data order continues differently
    other = io.load_checkpoint(path).model
    other.fit(x, y, epochs=4, initial_epoch=2, batch_size=8, rng=7, verbose=0)
    assert not np.array_equal(other.named_parameters()["logits.W"],
                              straight.named_parameters()["logits.W"])


def test_config_round_trip_gives_identical_predictions():
    model = graph(seed=3)
    x, _ = data(5)
    config = json.loads(json.dumps(model.get_config()))  # a file's JSON holds it
    same_seed = hg.Model.from_config(config)
    for ours, theirs in zip(model.predict(x), same_seed.predict(x)):
        assert np.array_equal(ours, theirs)
    for value in model.named_parameters().values():
        value += 0.25  # weights that the seed does not give
    twin = hg.Model.from_config(config)
    for key, value in model.named_parameters().items():
        twin.named_parameters()[key][...] = value
    for ours, theirs in zip(model.predict(x), twin.predict(x)):
        assert np.array_equal(ours, theirs)
    assert twin.get_config() == model.get_config()


def test_a_graph_inside_sequential_saves_and_loads(tmp_path):
    u = hg.Input((8, 3))
    block = hg.Model(u, L.Add(name="add")([L.Conv1D(3, 3, padding="same", name="c")(u), u]),
                     name="block")
    model = Sequential([L.Conv1D(3, 3, name="stem"), block, L.Flatten(), L.Dense(2, name="head")],
                       input_shape=(10, 2), seed=0).compile("adam", "cross_entropy")
    x = np.random.default_rng(0).standard_normal((4, 10, 2)).astype(np.float32)
    model.fit(x, np.array([0, 1, 1, 0]), epochs=1, verbose=0)
    io.save(model, tmp_path / "seq.safetensors")
    loaded = io.load(tmp_path / "seq.safetensors")
    assert isinstance(loaded["block"], hg.Model) and "block.c.W" in loaded.named_parameters()
    assert np.array_equal(model.predict(x), loaded.predict(x))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "model.safetensors"
    model = compiled(graph())
    model.fit(*data(16), epochs=1, batch_size=8, rng=0, verbose=0)
    io.save(model, path)
    return _safetensors.read(path)[0], document_of(path)


def _layer_index(config, name):
    return [entry["config"]["name"] for entry in config["layers"]].index(name)


def _edit(*path, value):
    def mutate(document):
        target = document
        for key in path[:-1]:
            target = key(target) if callable(key) else target[key]
        target[path[-1]] = value
    return mutate


def _inner(document):
    return document["config"]["layers"][_layer_index(document["config"], "inner")]


CONFIG = "model.config"
BAD_FILES = {
    "flat input_shape": (_edit("model", "input_shape", value=[6, 6, 2]), "'model.input_shape'"),
    "one input_shape": (_edit("model", "input_shape", value=[[6, 6, 2]]), "'model.input_shape'"),
    "input_shape text": (_edit("model", "input_shape", value=[[6, "6", 2], [4]]),
                         "'model.input_shape'"),
    "input_shape disagrees": (_edit("model", "input_shape", value=[[6, 6, 3], [4]]),
                              "'model.input_shape'"),
    "no nodes": (lambda d: d["model"]["config"].pop("nodes"), f"'{CONFIG}'"),
    "inputs a dict": (_edit("model", "config", "inputs", value={}), f"'{CONFIG}.inputs'"),
    "input shape negative": (_edit("model", "config", "inputs", 0, "shape", value=[6, -6, 2]),
                             f"'{CONFIG}.inputs[0].shape'"),
    "input name a number": (_edit("model", "config", "inputs", 1, "name", value=4),
                            f"'{CONFIG}.inputs[1].name'"),
    "input dtype object": (_edit("model", "config", "inputs", 0, "dtype", value="object"),
                           f"'{CONFIG}.inputs[0].dtype'"),
    "node calls an unknown layer": (_edit("model", "config", "nodes", 2, "layer", value="evil"),
                                    f"'{CONFIG}.nodes[2].layer'"),
    "node reads a later node": (_edit("model", "config", "nodes", 1, "inputs", 0, value=[5, 0]),
                                f"'{CONFIG}.nodes[1].inputs[0]'"),
    "node reads a missing input": (_edit("model", "config", "nodes", 0, "inputs", 0,
                                         value=["input", 2]), f"'{CONFIG}.nodes[0].inputs[0]'"),
    "node a list": (_edit("model", "config", "nodes", 1, value=["relu", [[0, 0]]]),
                    f"'{CONFIG}.nodes[1]'"),
    "output out of range": (_edit("model", "config", "outputs", 1, value=[99, 0]),
                            f"'{CONFIG}.outputs[1]'"),
    "single_input with two": (_edit("model", "config", "single_input", value=True),
                              f"'{CONFIG}.single_input'"),
    "duplicate layer name": (_edit("model", "config", "layers", 1, "config", "name",
                                   value="conv"), f"'{CONFIG}.layers[1].config.name'"),
    "nested graph node": (_edit("model", _inner, "config", "nodes", 0, "layer", value="gone"),
                          f"'{CONFIG}.layers[6].config.nodes[0].layer'"),
    "shapes that do not fit": (_edit("model", "config", "nodes", 6, "inputs", 0,
                                     value=["input", 0]), f"'{CONFIG}'"),
    "loss of an unknown output": (_edit("loss", "aux", value="mse"), "'loss'"),
    "unknown loss of an output": (_edit("loss", "score", value="nope"), "'loss.score'"),
    "negative loss weight": (_edit("loss_weights", "score", value=-1), "'loss_weights.score'"),
    "metrics of an unknown output": (_edit("metrics", "aux", value=["accuracy"]), "'metrics'"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_malformed_graph_file_names_the_file_and_the_field(saved, tmp_path, case):
    tensors, document = saved
    mutate, field = BAD_FILES[case]
    document = copy.deepcopy(document)
    assert _layer_index(document["model"]["config"], "inner") == 6  # the cases' paths
    mutate(document)
    path = tmp_path / "bad.safetensors"
    _safetensors.write(path, tensors, {"handgrad": json.dumps(document)})
    with pytest.raises(ValueError) as caught:
        io.load_checkpoint(path)
    assert str(path) in str(caught.value) and field in str(caught.value), str(caught.value)


def test_an_unused_layer_in_a_graph_config_is_refused(saved, tmp_path):
    tensors, document = copy.deepcopy(saved)
    config = document["model"]["config"]
    config["layers"].append({"class": "Dense", "config": {"name": "spare", "out_features": 2}})
    path = tmp_path / "spare.safetensors"
    _safetensors.write(path, tensors, {"handgrad": json.dumps(document)})
    with pytest.raises(ValueError, match=r"field 'model.config.layers' holds layers that no "
                                         r"node calls: \['spare'\]"):
        io.load(path)


# ----------------------------------------------------------------------- summary
def _rows(text):
    """{first cell: the row's cells} of a summary table, split on 2+ spaces."""
    return {cells[0]: cells for line in text.splitlines()
            if len(cells := re.split(r"\s{2,}", line.strip())) > 3}


def test_summary_has_one_row_per_node_and_a_connected_to_column(capsys):
    model = graph()
    text = model.summary()
    assert capsys.readouterr().out.strip() == text.strip()
    rows = _rows(text)
    header = rows["Layer (type)"]
    assert header == ["Layer (type)", "Output shape", "Params", "Memory", "Connected to",
                      "Receptive field"]
    body = [cells for key, cells in rows.items() if key != "Layer (type)"]
    assert len(body) == len(model.nodes) == 11
    column = {cells[0]: dict(zip(header, cells)) for cells in body}
    assert column["conv (Conv2D)"]["Connected to"] == "image"
    assert column["add (Add)"]["Connected to"] == "relu, conv"
    assert column["shared[1] (Dense)"]["Connected to"] == "tanh"
    assert column["tanh (Tanh)"]["Connected to"] == "shared"
    assert column["cat (Concatenate)"]["Connected to"] == "pool, shared[1], inner"
    assert column["cat (Concatenate)"]["Output shape"] == "(None, 12)"
    assert column["add (Add)"]["Receptive field"] == "3x3 (jump 1)"  # the merge keeps it
    # a shared layer's parameters at its first call, once in the totals
    assert column["shared (Dense)"]["Params"] == "20"
    assert column["shared[1] (Dense)"]["Params"] == "0"
    assert column["inner (Model)"]["Params"] == "20"
    assert sum(int(row["Params"].replace(",", "")) for row in column.values()) == \
        model.count_params() == 76 + 20 + 20 + 39 + 13
    assert f"Total params: {model.count_params():,}" in text
    assert "inputs image (None, 6, 6, 2), meta (None, 4)   outputs logits, score" in text
    assert receptive_fields(model)[6][0] == "shared[1]"


def test_summary_of_a_graph_without_spatial_inputs_and_inside_sequential():
    u = hg.Input((4,), name="u")
    flat = hg.Model(u, L.Dense(2, name="out")(u))
    assert "Receptive field" not in flat.summary(print_fn=None)
    v = hg.Input((8, 3))
    block = hg.Model(v, L.Add(name="add")([L.Conv1D(3, 5, padding="same", name="c")(v), v]),
                     name="block")
    model = Sequential([L.Conv1D(3, 3, name="stem"), block], input_shape=(10, 1), seed=0)
    rows = _rows(model.summary(print_fn=None))
    assert rows["block (Model)"][1:] == ["(None, 8, 3)", "48", "192 B", "7 (jump 1)"]
