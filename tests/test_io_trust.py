"""Bad files: every malformed field, tensor or header entry of a saved model is a
ValueError that names the file and the field, and loading never calls a function or
touches a random generator that the file names."""

from __future__ import annotations

import contextlib
import copy
import io as stdio
import json
import struct

import numpy as np
import pytest

from handgrad import io
from handgrad import layers as L
from handgrad.cli import commands as cli
from handgrad.io import safetensors as _safetensors
from handgrad.model import Sequential

LAYERS = "model.config.layers"


def make_model():
    net = Sequential([L.Conv1D(4, 3, name="conv"), L.BatchNorm(name="bn"), L.ReLU(),
                      L.Dropout(0.25, seed=1, name="drop"), L.Flatten(), L.Dense(2, name="head")],
                     seed=0, input_shape=(5, 3))
    return net.compile("adam", "cross_entropy")


def data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 5, 3)).astype(np.float32)
    return x, (x[:, :, 0].sum(axis=1) > 0).astype(np.int64)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(tensors, document) of a trained checkpoint with optimizer state and an rng."""
    path = tmp_path_factory.mktemp("saved") / "model.safetensors"
    net = make_model()
    net.fit(*data(), epochs=1, batch_size=8, rng=0, verbose=0)
    io.save_checkpoint(path, net, net.optimizer, epoch=1, rng=np.random.default_rng(5),
                       extra={"note": "x"})
    tensors, metadata = _safetensors.read(path)
    return tensors, json.loads(metadata["handgrad"])


def write(tmp_path, tensors, document, name="bad.safetensors"):
    path = tmp_path / name
    text = document if isinstance(document, str) else json.dumps(document)
    _safetensors.write(path, tensors, {"handgrad": text})
    return path


def assert_load_names(path, *fragments, error=ValueError):
    with pytest.raises(error) as caught:
        io.load_checkpoint(path)
    message = str(caught.value)
    assert str(path) in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def rng_state(name, seed=1):
    state = getattr(np.random, name)(seed).state
    return json.loads(json.dumps(state, default=lambda a: a.tolist()))


def _set(path, value):
    """A mutation setting ``document[path[0]][path[1]]... = value`` (None: delete)."""
    def mutate(document):
        *parents, last = path
        for key in parents:
            document = document[key]
        if value is _set:
            del document[last]
        else:
            document[last] = copy.deepcopy(value)
    return mutate


def _delete(*path):
    return _set(path, _set)


def _layer(i, key, value):
    return _set(("model", "config", "layers", i, "config", key), value)


def _rng(*path_value):
    *path, value = path_value
    return _set(("rng", *path), value)


def _drop_rng(value):
    return _set(("extra_state", "drop", "rng"), value)


DOCUMENT_CASES = {
    # format and top level
    "format missing": (_delete("format"), "'format'"),
    "format a string": (_set(("format",), "1"), "'format'"),
    "format a bool": (_set(("format",), True), "'format'"),
    "unknown field": (_set(("weights",), [1, 2]), "'weights'"),
    "model missing": (_delete("model"), "'model'"),
    "model a number": (_set(("model",), 5), "'model'"),
    "model without input_shape": (_delete("model", "input_shape"), "'model'"),
    "model class a number": (_set(("model", "class"), 5), "'model.class'"),
    "model class unknown": (_set(("model", "class"), "os.system"), "'model.class'"),
    "model config a list": (_set(("model", "config"), []), "'model.config'"),
    # nested layer entries
    "layers a number": (_set(("model", "config", "layers"), 5), f"'{LAYERS}'"),
    "layers: [5]": (_set(("model", "config", "layers"), [5]), f"'{LAYERS}[0]'"),
    "entry without config": (_set(("model", "config", "layers", 0), {"class": "Conv1D"}),
                             f"'{LAYERS}[0]'"),
    "entry class unknown": (_set(("model", "config", "layers", 0, "class"), "Evil"),
                            f"'{LAYERS}[0].class'"),
    "entry config a string": (_set(("model", "config", "layers", 0, "config"), "x"),
                              f"'{LAYERS}[0].config'"),
    "conv out_channels": (_layer(0, "out_channels", "many"), f"'{LAYERS}[0].config'"),
    "unknown layer argument": (_layer(0, "bogus", 1), f"'{LAYERS}[0].config'"),
    "dense out_features < 0": (_layer(5, "out_features", -3), f"'{LAYERS}[5].config'"),
    "dropout rate": (_layer(3, "rate", [0.5]), f"'{LAYERS}[3].config'"),
    "initializer unknown": (_layer(0, "kernel_initializer", "nope"), f"'{LAYERS}[0].config'"),
    "initializer custom missing": (_layer(0, "kernel_initializer", {"custom": "gone"}),
                                   f"'{LAYERS}[0].config.kernel_initializer'"),
    "initializer custom not a name": (_layer(0, "kernel_initializer", {"custom": 5}),
                                      f"'{LAYERS}[0].config.kernel_initializer'"),
    "model name a number": (_set(("model", "config", "name"), 5), "'model.config'"),
    "input_shape a string": (_set(("model", "input_shape"), "abc"), "'model.input_shape'"),
    "input_shape negative": (_set(("model", "input_shape"), [5, -1]), "'model.input_shape'"),
    "input_shape floats": (_set(("model", "input_shape"), [5.0, 3]), "'model.input_shape'"),
    "input_shape disagrees": (_set(("model", "input_shape"), [7, 3]), "'model.input_shape'"),
    # layer extra state
    "extra_state a list": (_set(("extra_state",), []), "'extra_state'"),
    "extra_state unknown layer": (_set(("extra_state", "nope"), {}), "'extra_state'"),
    "dropout rng a number": (_drop_rng(5), "'extra_state"),
    "dropout rng names seed": (_set(("extra_state", "drop", "rng", "bit_generator"), "seed"),
                               "'extra_state.drop.rng.bit_generator'"),
    "dropout rng MT19937 pos": (_drop_rng({**rng_state("MT19937"), "state": {
        "key": rng_state("MT19937")["state"]["key"], "pos": 1000}}),
        "'extra_state.drop.rng.state.pos'"),
    "dropout rng negative": (_set(("extra_state", "drop", "rng", "state", "state"), -1),
                             "'extra_state.drop.rng.state.state'"),
    "dropout rng other generator": (_drop_rng(rng_state("SFC64")), "'extra_state'"),
    "dropout extra entry": (_set(("extra_state", "drop", "junk"), 1), "'extra_state.drop'"),
    # epoch, extra, rng
    "epoch negative": (_set(("epoch",), -1), "'epoch'"),
    "epoch a float": (_set(("epoch",), 1.5), "'epoch'"),
    "epoch a string": (_set(("epoch",), "3"), "'epoch'"),
    "extra a list": (_set(("extra",), [1]), "'extra'"),
    "rng a number": (_set(("rng",), 5), "'rng'"),
    "rng names seed": (_rng("bit_generator", "seed"), "'rng.bit_generator'"),
    "rng names RandomState": (_rng("bit_generator", "RandomState"), "'rng.bit_generator'"),
    "rng flag a bool": (_rng("has_uint32", True), "'rng.has_uint32'"),
    "rng without inc": (_delete("rng", "state", "inc"), "'rng.state'"),
    "rng state too big": (_rng("state", "state", 2**128), "'rng.state.state'"),
    "rng state a string": (_rng("state", "state", "12"), "'rng.state.state'"),
    "rng MT19937 short key": (_set(("rng",), {"bit_generator": "MT19937", "state": {
        "key": [1, 2, 3], "pos": 0}}), "'rng.state.key'"),
    "rng Philox buffer_pos": (_set(("rng",), {**rng_state("Philox"), "buffer_pos": 9}),
                              "'rng.buffer_pos'"),
    # optimizer, loss, metrics
    "optimizer a number": (_set(("optimizer",), 5), "'optimizer'"),
    "optimizer without name": (_set(("optimizer",), {"lr": 0.1}), "'optimizer'"),
    "optimizer name unknown": (_set(("optimizer", "name"), "os"), "'optimizer'"),
    "optimizer lr a string": (_set(("optimizer", "lr"), "fast"), "'optimizer'"),
    "optimizer lr huge": (_set(("optimizer", "lr"), 10**400), "'optimizer'"),
    "optimizer unknown key": (_set(("optimizer", "momentumm"), 0.9), "'optimizer'"),
    "optimizer null with state": (_set(("optimizer",), None), "'optimizer'"),
    "loss a number": (_set(("loss",), 5), "'loss'"),
    "loss unknown": (_set(("loss",), "nope"), "'loss'"),
    "loss custom missing": (_set(("loss",), {"custom": "gone"}), "'loss'"),
    "loss odd object": (_set(("loss",), {"custom": "x", "y": 1}), "'loss'"),
    "metrics a string": (_set(("metrics",), "accuracy"), "'metrics'"),
    "metric a number": (_set(("metrics",), [5]), "'metrics[0]'"),
    "metric unknown": (_set(("metrics",), ["nope"]), "'metrics'"),
    "metric custom missing": (_set(("metrics",), [{"custom": "gone"}]), "'metrics[0]'"),
}


@pytest.mark.parametrize("case", list(DOCUMENT_CASES))
def test_a_malformed_field_names_the_file_and_the_field(saved, tmp_path, case):
    tensors, document = saved
    mutate, field = DOCUMENT_CASES[case]
    document = copy.deepcopy(document)
    mutate(document)
    assert_load_names(write(tmp_path, tensors, document), field)


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "handgrad metadata is not valid JSON"),
    ('{"format": 1, "epoch": 1, "epoch": 2}', "'epoch' appears twice"),
    ("[1, 2]", "not a handgrad model file"),
])
def test_a_broken_document_is_named(saved, tmp_path, text, fragment):
    assert_load_names(write(tmp_path, saved[0], text), fragment)


def _key(tensors, prefix):
    return sorted(k for k in tensors if k.startswith(prefix))[0]


TENSOR_CASES = {
    "optim state wrong shape": (lambda t: t.update({_key(t, "optim/exp_avg/"): np.zeros(
        (7,), np.float32)}), "exp_avg/"),
    "optim state float64": (lambda t: t.update({_key(t, "optim/exp_avg/"): t[_key(
        t, "optim/exp_avg/")].astype(np.float64)}), "float64"),
    "optim state integer": (lambda t: t.update({_key(t, "optim/exp_avg_sq/"): np.zeros(
        t[_key(t, "optim/exp_avg_sq/")].shape, np.int32)}), "exp_avg_sq/"),
    "iterations a float": (lambda t: t.update({"optim/iterations": np.array(2.5)}),
                           "iterations"),
    "iterations missing": (lambda t: t.pop("optim/iterations"), "iterations"),
    "step zero": (lambda t: t.update({_key(t, "optim/step/"): np.array(0)}), "step/"),
    "slot missing": (lambda t: t.pop(_key(t, "optim/exp_avg_sq/")), "lack some of the slots"),
    "unknown slot": (lambda t: t.update({"optim/momentum_buffer/head.W": np.zeros(
        (12, 2), np.float32)}), "momentum_buffer/head.W"),
    "state of a missing parameter": (lambda t: t.update({
        "optim/exp_avg/ghost.W": np.zeros(2, np.float32),
        "optim/exp_avg_sq/ghost.W": np.zeros(2, np.float32),
        "optim/step/ghost.W": np.array(1)}), "ghost.W"),
    "parameter float64": (lambda t: t.update({"param/head.W": t["param/head.W"].astype(
        np.float64)}), "mismatched dtypes ['head.W"),
    "parameter missing": (lambda t: t.pop("param/head.b"), "missing ['head.b']"),
    "parameter wrong shape": (lambda t: t.update({"param/head.b": np.zeros(3, np.float32)}),
                              "head.b: file (3,)"),
    "buffer wrong shape": (lambda t: t.update({"buffer/bn.running_mean": np.zeros(
        5, np.float32)}), "bn.running_mean"),
    "unknown tensor group": (lambda t: t.update({"junk/x": np.zeros(1)}), "junk/x"),
}


@pytest.mark.parametrize("case", list(TENSOR_CASES))
def test_a_wrong_tensor_is_reported_at_load_time(saved, tmp_path, case):
    tensors, document = saved
    tensors = dict(tensors)
    mutate, fragment = TENSOR_CASES[case]
    mutate(tensors)
    assert_load_names(write(tmp_path, tensors, document), fragment)


# -------------------------------------------------------- the safetensors header


def _raw(tmp_path, header, data=b"", name="raw.safetensors"):
    encoded = header.encode() if isinstance(header, str) else json.dumps(header).encode()
    path = tmp_path / name
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    return path


def _entry(**changes):
    return {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12], **changes}}


HEADER_CASES = {
    "shape a string": (_entry(shape=["3"]), "'shape'"),
    "shape a float": (_entry(shape=[12.9]), "'shape'"),
    "shape a bool": (_entry(shape=[True, 3]), "'shape'"),
    "shape negative": (_entry(shape=[-3]), "'shape'"),
    "shape wraps int64": (_entry(shape=[2**32, 2**32], data_offsets=[0, 0]), "'shape'"),
    "shape zero times huge": (_entry(shape=[0, 2**62], data_offsets=[0, 0]), "'shape'"),
    "shape a number": (_entry(shape=3), "'shape'"),
    "shape too many dims": (_entry(shape=[1] * 65, data_offsets=[0, 4]), "'shape'"),
    "offset a string": (_entry(data_offsets=["0", 12]), "'data_offsets'"),
    "offset a float": (_entry(data_offsets=[0, 12.9]), "'data_offsets'"),
    "offset negative": (_entry(data_offsets=[-12, 0]), "'data_offsets'"),
    "offset a bool": (_entry(data_offsets=[False, 12]), "'data_offsets'"),
    "offsets a dict": (_entry(data_offsets={"a": 0}), "'data_offsets'"),
    "dtype unknown": (_entry(dtype="BF16"), "'dtype'"),
    "dtype a number": (_entry(dtype=4), "'dtype'"),
    "entry a list": ({"x": [0, 12]}, "tensor 'x' has a malformed entry"),
    "entry a string": ({"x": "F32"}, "tensor 'x' has a malformed entry"),
    "entry extra key": (_entry(extra=1), "unexpected keys ['extra']"),
    "entry missing key": ({"x": {"dtype": "F32", "shape": [3]}}, "missing keys ['data_offsets']"),
    "metadata a list": ({**_entry(), "__metadata__": [1]}, "'__metadata__'"),
    "metadata value a number": ({**_entry(), "__metadata__": {"handgrad": 5}}, "'handgrad'"),
    "duplicate tensor": ('{"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}, '
                         '"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}',
                         "'x' appears twice"),
}


@pytest.mark.parametrize("case", list(HEADER_CASES))
def test_a_malformed_header_entry_names_the_file_and_the_entry(tmp_path, case):
    header, fragment = HEADER_CASES[case]
    path = _raw(tmp_path, header, bytes(12))
    with pytest.raises(ValueError) as caught:
        _safetensors.read(path)
    message = str(caught.value)
    assert str(path) in message and fragment in message, message
    assert_load_names(path, fragment)


def test_a_header_over_the_format_limit_is_refused(tmp_path, monkeypatch):
    path = _raw(tmp_path, _entry(), bytes(12))
    assert _safetensors.read(path)[0]["x"].shape == (3,)  # the test can fail
    monkeypatch.setattr(_safetensors, "MAX_HEADER", 16)
    with pytest.raises(ValueError, match=r"raw\.safetensors' is corrupted: a header of \d+ "
                                         r"bytes exceeds the format's limit of 16"):
        _safetensors.read(path)


@pytest.mark.parametrize("metadata, name", [({"a": 5}, "'a'"), ({"a": None}, "'a'"),
                                            ({3: "x"}, "3")])
def test_the_writer_refuses_metadata_that_is_not_strings(tmp_path, metadata, name):
    with pytest.raises(TypeError, match=f"'metadata' must map strings to strings; entry {name}"):
        _safetensors.write(tmp_path / "m.safetensors", {}, metadata)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------ random generators


def test_a_file_naming_seed_never_touches_the_global_rng(saved, tmp_path):
    tensors, document = saved
    document = copy.deepcopy(document)
    document["rng"] = {"bit_generator": "seed", "state": 0}
    path = write(tmp_path, tensors, document)
    np.random.seed(1234)  # noqa: NPY002  (the global state is what must not change)
    before = np.random.get_state()  # noqa: NPY002
    assert_load_names(path, "'rng.bit_generator'", "PCG64")
    after = np.random.get_state()  # noqa: NPY002
    assert before[0] == after[0] and np.array_equal(before[1], after[1])
    assert before[2:] == after[2:]


@pytest.mark.parametrize("name", ["PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"])
def test_every_allowed_bit_generator_round_trips_exactly(tmp_path, name):
    rng = np.random.Generator(getattr(np.random, name)(7))
    rng.random(5)
    path = tmp_path / "rng.safetensors"
    io.save_checkpoint(path, make_model(), rng=rng)
    restored = io.load_checkpoint(path).rng
    assert type(restored.bit_generator) is type(rng.bit_generator)
    assert np.array_equal(restored.random(9), rng.random(9))


def test_save_refuses_what_is_not_a_generator(tmp_path):
    with pytest.raises(TypeError, match=r"'rng' must be a numpy\.random\.Generator or None; "
                                        r"received RandomState"):
        io.save_checkpoint(tmp_path / "m.safetensors", make_model(),
                           rng=np.random.RandomState(0))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- command line


def test_the_cli_reports_a_malformed_file_in_one_line(saved, tmp_path):
    tensors, document = saved
    document = copy.deepcopy(document)
    document["model"]["config"]["layers"] = [5]
    path = write(tmp_path, tensors, document)
    out, err = stdio.StringIO(), stdio.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["evaluate", str(path)])
    lines = err.getvalue().splitlines()
    assert code != 0 and out.getvalue() == "" and len(lines) == 1, err.getvalue()
    assert lines[0].startswith("handgrad: error: ")
    assert str(path) in lines[0] and f"'{LAYERS}[0]'" in lines[0]
